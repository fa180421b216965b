"""Pass 21's DFlash against pass 18's DSpark: both trained on the same two files to 110,000
samples in the same two stages (the issue's T=1 goal at equal budgets, and greedy); pass 9's
DSpark against its DFlash at 30,000 samples (one file) the same way; and each draft at 110,000
against itself at 30,000 (pass 9, another file). Over the whole sets, paired over items
(serving.intervals): tau by bench ("this" is the first named), the macro ratio with its 95 %
interval, and each bench's difference with its interval.

    python docs/ablations/tau_h200_pass21/compare.py   # from the checkout: writes compare.json
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
from serving.intervals import compare_parts, comparison_lines, folder_parts  # noqa: E402

BENCHES = ["gsm8k", "mtbench", "humaneval"]
EVALS = {  # draft at its pass: its reports' folder, by temperature
    "dspark18": HERE.parent / "tau_h200_pass18/eval/dspark-{t}",
    "dflash21": HERE / "eval/dflash-{t}",
    "dspark9": HERE.parent / "tau_h200_pass9/eval/dspark-{t}",
    "dflash9": HERE.parent / "tau_h200_pass9/eval/dflash-{t}",
}
PAIRS = [
    ("dspark18", "dflash21"),
    ("dspark9", "dflash9"),
    ("dflash21", "dflash9"),
    ("dspark18", "dspark9"),
]
res = {
    f"{a}_vs_{b}_{t}": compare_parts(
        folder_parts(Path(str(EVALS[a]).format(t=t)), BENCHES),
        folder_parts(Path(str(EVALS[b]).format(t=t)), BENCHES),
    )
    for t in ("t1", "t0")
    for a, b in PAIRS
}
(HERE / "compare.json").write_text(json.dumps(res, indent=1) + "\n")
print("\n".join(comparison_lines(res)))
