"""Pass 26's comparisons, paired over items (serving.intervals): DSpark with five layers taken from
pass 25's 110,000-sample export on to 206,000 samples of training (6,000 steps x 16 over pass 25's
file extended to 61,614 samples, data.shuffle_seed 2), evaluated on GSM8K's 200, MT-Bench's 80 x 2
turns and HumanEval's 164, greedy and T=1, against:
- EAGLE-3 and DFlash at 206,000 (passes 23 and 22: three stages over pass 17's and 18's files):
  the goals' comparisons at that budget, across files (run-to-run 0.2-1.6 % between files);
- the 3-layer DSpark at 206,000 (pass 19; its T=1 reports evaluated in pass 22), the table's row;
- this draft at 110,000 (pass 25), what the last 96,000 samples gave;
- the 3-layer DSpark at 334,000 (pass 20), the draft that met the greedy goals and 2x first.

    python docs/ablations/tau_h200_pass26/compare.py   # from the checkout: writes compare.json
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
from serving.benchmarks import BENCHES  # noqa: E402
from serving.intervals import compare_folders, comparison_lines  # noqa: E402

ABL = HERE.parent
TEMPS = ("t1", "t0")
EVALS = {  # draft at its budget (thousands of samples): its reports' folder, by temperature
    "layers5_206": {t: HERE / f"eval/dspark-{t}" for t in TEMPS},
    "eagle3_206": {t: ABL / f"tau_h200_pass23/eagle3_206k/eval/eagle3-{t}" for t in TEMPS},
    "dflash_206": {t: ABL / f"tau_h200_pass22/dflash_206k/eval/dflash-{t}" for t in TEMPS},
    "dspark_206": {
        "t1": ABL / "tau_h200_pass22/dspark_206k/eval/dspark-t1",
        "t0": ABL / "tau_h200_pass19/eval/dspark-t0",
    },
    "layers5_110": {t: ABL / f"tau_h200_pass25/eval/dspark-{t}" for t in TEMPS},
    "dspark_334": {t: ABL / f"tau_h200_pass20/eval/dspark-{t}" for t in TEMPS},
}
PAIRS = [
    ("layers5_206", "eagle3_206"),
    ("layers5_206", "dflash_206"),
    ("layers5_206", "dspark_206"),
    ("layers5_206", "layers5_110"),
    ("layers5_206", "dspark_334"),
]

res = compare_folders(EVALS, PAIRS, BENCHES, temps=TEMPS)
(HERE / "compare.json").write_text(json.dumps(res, indent=1) + "\n")
print("\n".join(comparison_lines(res)))
