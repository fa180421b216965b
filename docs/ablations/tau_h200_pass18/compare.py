"""Pass 18's draft against pass 13's (the whole sets, greedy and T=1) and pass 17's baseline
(GSM8K 0..199 and MT-Bench 80 x 2, greedy), paired over items (serving.intervals): tau by
bench, the macro ratio with its 95 % interval, and each bench's difference with its interval.

    python docs/ablations/tau_h200_pass18/compare.py   # from the checkout: writes compare.json
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
from serving.intervals import compare_parts, comparison_lines, folder_parts  # noqa: E402


def compare(a: Path, b: Path, benches) -> dict:
    return compare_parts(folder_parts(a, benches), folder_parts(b, benches), name="pass18")


full, two = ["gsm8k", "mtbench", "humaneval"], ["gsm8k", "mtbench"]
res = {
    f"vs_pass13_{t}": compare(
        HERE / f"eval/dspark-{t}", HERE.parent / f"tau_h200_pass13/eval/dspark-{t}", full
    )
    for t in ("t0", "t1")
}
res["vs_pass17_baseline_t0"] = compare(
    HERE / "eval/dspark-t0", HERE.parent / "tau_h200_pass17/runs/dspark/eval/step-00001875-t0", two
)
(HERE / "compare.json").write_text(json.dumps(res, indent=1) + "\n")
print("\n".join(comparison_lines(res, "pass18")))
