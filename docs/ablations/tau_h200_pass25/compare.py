"""Pass 25's comparisons, paired over items (serving.intervals): DSpark with five layers trained
in one stage of 6,875 steps x 16 (110,000 samples of training) over a new 30,846-sample file
(passes 17-24's files were lost), evaluated on GSM8K's 200, MT-Bench's 80 x 2 turns and
HumanEval's 164, greedy and T=1, against:
- EAGLE-3 and DFlash at 110,000 (passes 22 and 21: two stages over pass 18's two files): the
  goals' comparisons at that budget, across files (run-to-run 0.2-1.6 % between files);
- the 3-layer DSpark at 110,000 (pass 18, the same two stages);
- EAGLE-3 at 206,000 (pass 23), for scale;
- the 5-layer draft of pass 24 (two stages over pass 18's files), greedy on the two benches it
  was evaluated on: the same architecture and budget on another file and schedule.

    python docs/ablations/tau_h200_pass25/compare.py   # from the checkout: writes compare.json
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
    "layers5_110": {t: HERE / f"eval/dspark-{t}" for t in TEMPS},
    "eagle3_110": {t: ABL / f"tau_h200_pass22/eagle3_110k/eval/eagle3-{t}" for t in TEMPS},
    "dflash_110": {t: ABL / f"tau_h200_pass21/eval/dflash-{t}" for t in TEMPS},
    "dspark_110": {t: ABL / f"tau_h200_pass18/eval/dspark-{t}" for t in TEMPS},
    "eagle3_206": {t: ABL / f"tau_h200_pass23/eagle3_206k/eval/eagle3-{t}" for t in TEMPS},
    "layers5_p24": {"t0": ABL / "tau_h200_pass24/stage2_110k/ablate/layers5/eval/step-00005000-t0"},
}
PAIRS = [
    ("layers5_110", "eagle3_110"),
    ("layers5_110", "dflash_110"),
    ("layers5_110", "dspark_110"),
    ("layers5_110", "eagle3_206"),
]

res = compare_folders(EVALS, PAIRS, BENCHES, temps=TEMPS)
res |= compare_folders(EVALS, [("layers5_110", "layers5_p24")], BENCHES[:2], temps=("t0",))
(HERE / "compare.json").write_text(json.dumps(res, indent=1) + "\n")
print("\n".join(comparison_lines(res)))
