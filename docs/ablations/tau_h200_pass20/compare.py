"""Pass 20's draft against pass 19's, the draft it started from on the same file (greedy), and
against pass 18's and pass 13's at T=1 (pass 19 was not evaluated at T=1), over the whole
sets, paired over items (serving.intervals): tau by bench, the macro ratio with its 95 %
interval, and each bench's difference with its interval.

    python docs/ablations/tau_h200_pass20/compare.py   # from the checkout: writes compare.json
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
from serving.intervals import compare_parts, comparison_lines, folder_parts  # noqa: E402

BENCHES = ["gsm8k", "mtbench", "humaneval"]
PAIRS = [("pass19", "t0"), ("pass13", "t0"), ("pass18", "t1"), ("pass13", "t1")]
res = {
    f"vs_{other}_{t}": compare_parts(
        folder_parts(HERE / f"eval/dspark-{t}", BENCHES),
        folder_parts(HERE.parent / f"tau_h200_{other}/eval/dspark-{t}", BENCHES),
        "pass20",
    )
    for other, t in PAIRS
}
(HERE / "compare.json").write_text(json.dumps(res, indent=1) + "\n")
print("\n".join(comparison_lines(res, "pass20")))
