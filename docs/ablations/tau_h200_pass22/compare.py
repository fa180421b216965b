"""Pass 22's comparisons over the whole sets, paired over items (serving.intervals):
- EAGLE-3 at 110,000 samples (this pass) against pass 18's DSpark and pass 21's DFlash, all three
  trained on the same two files in the same two stages (the issue's T=1 goal against EAGLE-3);
- DFlash at 206,000 (this pass) against pass 19's DSpark, both trained on from 110,000 over pass
  18's file in the orders seeded 2 and 3 (the T=1 goal against DFlash at a second budget;
  DSpark's T=1 reports are this pass's evaluation of pass 19's export, its greedy ones pass 19's);
- each draft against itself at its earlier budget (EAGLE-3 at 30,000 is pass 9's);
- the ratio of DSpark / DFlash at 206,000 to the same ratio at 110,000, the four runs' items
  drawn together.
Each comparison: tau by bench ("this" is the first named), the macro ratio with its 95 %
interval, and each bench's difference with its interval.

    python docs/ablations/tau_h200_pass22/compare.py   # from the checkout: writes compare.json
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
from serving.intervals import compare_folders, comparison_lines, folder_parts, ratio_of_ratios  # noqa: E402

BENCHES = ["gsm8k", "mtbench", "humaneval"]
ABL = HERE.parent
EVALS = {  # draft at its budget (thousands of samples): its reports' folder, by temperature
    "eagle3_110": {t: HERE / f"eagle3_110k/eval/eagle3-{t}" for t in ("t1", "t0")},
    "dflash_206": {t: HERE / f"dflash_206k/eval/dflash-{t}" for t in ("t1", "t0")},
    "dspark_206": {
        "t1": HERE / "dspark_206k/eval/dspark-t1",
        "t0": ABL / "tau_h200_pass19/eval/dspark-t0",
    },
    "dspark_110": {t: ABL / f"tau_h200_pass18/eval/dspark-{t}" for t in ("t1", "t0")},
    "dflash_110": {t: ABL / f"tau_h200_pass21/eval/dflash-{t}" for t in ("t1", "t0")},
    "eagle3_30": {t: ABL / f"tau_h200_pass9/eval/eagle3-{t}" for t in ("t1", "t0")},
    "dspark_30": {t: ABL / f"tau_h200_pass9/eval/dspark-{t}" for t in ("t1", "t0")},
}
PAIRS = [
    ("dspark_110", "eagle3_110"),
    ("eagle3_110", "dflash_110"),
    ("dspark_206", "dflash_206"),
    ("eagle3_110", "eagle3_30"),
    ("dspark_110", "dspark_30"),
    ("dflash_206", "dflash_110"),
    ("dspark_206", "dspark_110"),
]


def parts(draft, t):
    return folder_parts(EVALS[draft][t], BENCHES)


res = compare_folders(EVALS, PAIRS, BENCHES)
for t in ("t1", "t0"):  # DSpark's lead over DFlash at 206,000 over its lead at 110,000
    runs = [parts(d, t) for d in ("dspark_206", "dflash_206", "dspark_110", "dflash_110")]
    res[f"lead_over_dflash_206_vs_110_{t}"] = ratio_of_ratios(runs)
(HERE / "compare.json").write_text(json.dumps(res, indent=1) + "\n")
print("\n".join(comparison_lines(res)))
