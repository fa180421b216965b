"""Pass 19's draft against pass 18's, the draft it started from on the same file, and against
pass 13's (the whole sets, greedy), paired over items (serving.intervals): tau by bench, the
macro ratio with its 95 % interval, and each bench's difference with its interval.

    python docs/ablations/tau_h200_pass19/compare.py   # from the checkout: writes compare.json
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
from serving.intervals import compare_parts, comparison_lines, folder_parts  # noqa: E402

BENCHES = ["gsm8k", "mtbench", "humaneval"]
mine = folder_parts(HERE / "eval/dspark-t0", BENCHES)
res = {
    f"vs_{other}_t0": compare_parts(
        mine, folder_parts(HERE.parent / f"tau_h200_{other}/eval/dspark-t0", BENCHES), "pass19"
    )
    for other in ("pass18", "pass13")
}
(HERE / "compare.json").write_text(json.dumps(res, indent=1) + "\n")
print("\n".join(comparison_lines(res, "pass19")))
