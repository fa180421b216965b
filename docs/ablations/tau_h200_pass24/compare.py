"""Pass 24's comparisons, paired over items (serving.intervals): the depth ablation `layers5`
trained as pass 18's baseline was (1,875 steps over pass 17's file, then train.init_from that run
and 5,000 over pass 18's file: 110,000 samples of training), greedy on GSM8K's first 200 and
MT-Bench's 80 x 2 turns, the ablations' two benches:
- against the 3-layer baseline at 110,000 (pass 18) and, after its first stage, at 30,000 on the
  same file (pass 17's baseline);
- the depth gain at 110,000 over the depth gain at 30,000 (the four runs' items drawn together);
- against EAGLE-3 at 110,000 (pass 22), trained on the same two files in the same two stages
  (and the 3-layer baseline against it on these two benches),
  and against the 3-layer baseline at 206,000 (pass 19: a third stage over pass 18's file);
- batch 1 (speed/: layers5, then pass 18's export, one after the other on one idle H200, GSM8K's
  200, each with target-only decoding in its own run): each speedup, and their ratio with an
  interval over the items with each run's step costs held at its own.

    python docs/ablations/tau_h200_pass24/compare.py   # from the checkout: writes compare.json
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
from serving.intervals import (  # noqa: E402
    compare_folders,
    comparison_lines,
    folder_parts,
    ratio_of_ratios,
    timed_comparison,
    timed_lines,
)

BENCHES = ["gsm8k", "mtbench"]
ABL = HERE.parent
EVALS = {  # draft at its budget (thousands of samples): its greedy reports' folder
    "layers5_110": {"t0": HERE / "stage2_110k/ablate/layers5/eval/step-00005000-t0"},
    "layers5_30": {"t0": HERE / "stage1_30k/ablate/layers5/eval/step-00001875-t0"},
    "dspark_110": {"t0": ABL / "tau_h200_pass18/eval/dspark-t0"},
    "dspark_30": {"t0": ABL / "tau_h200_pass17/runs/dspark/eval/step-00001875-t0"},
    "eagle3_110": {"t0": ABL / "tau_h200_pass22/eagle3_110k/eval/eagle3-t0"},
    "dspark_206": {"t0": ABL / "tau_h200_pass19/eval/dspark-t0"},
}
PAIRS = [
    ("layers5_110", "dspark_110"),
    ("layers5_30", "dspark_30"),
    ("layers5_110", "eagle3_110"),
    ("dspark_110", "eagle3_110"),
    ("layers5_110", "dspark_206"),
]
DEPTH_RUNS = ["layers5_110", "dspark_110", "layers5_30", "dspark_30"]

res = compare_folders(EVALS, PAIRS, BENCHES, temps=("t0",))
runs = [folder_parts(EVALS[d]["t0"], BENCHES) for d in DEPTH_RUNS]
res["depth_gain_110_vs_30_t0"] = ratio_of_ratios(runs)
res["timed_110k"] = timed_comparison(HERE / "speed", ["layers5", "dspark"], [("layers5", "dspark")])
(HERE / "compare.json").write_text(json.dumps(res, indent=1) + "\n")
print("\n".join(comparison_lines({k: v for k, v in res.items() if k != "timed_110k"})))
print("\n".join(timed_lines(res["timed_110k"])))
