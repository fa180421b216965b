"""Pass 23's comparisons, paired over items (serving.intervals):
- EAGLE-3 at 206,000 samples (this pass) against pass 19's DSpark and pass 22's DFlash, all three
  trained on the same two files in the same three stages (the issue's T=1 goal against EAGLE-3
  at the largest budget the three share), and against itself at 110,000 (pass 22);
- EAGLE-3's lead over DSpark at 206,000 over its lead at 110,000 (the four runs' items drawn
  together);
- the batch-1 timings of this pass (timed_110k/: the three 110,000-sample drafts, one after
  another on one idle H200, GSM8K's 200, each with target-only decoding in its own run): each
  speedup, and each ratio of two speedups with an interval over the items with both drafts'
  step costs held at their runs' (it leaves out how step costs vary between runs: DSpark's
  two runs, `dspark-fixed` and `dspark-fixed-repeat`, show that spread).

    python docs/ablations/tau_h200_pass23/compare.py   # from the checkout: writes compare.json
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

BENCHES = ["gsm8k", "mtbench", "humaneval"]
ABL = HERE.parent
P22 = ABL / "tau_h200_pass22"
EVALS = {  # draft at its budget (thousands of samples): its reports' folder, by temperature
    "eagle3_206": {t: HERE / f"eagle3_206k/eval/eagle3-{t}" for t in ("t1", "t0")},
    "dspark_206": {
        "t1": P22 / "dspark_206k/eval/dspark-t1",
        "t0": ABL / "tau_h200_pass19/eval/dspark-t0",
    },
    "dflash_206": {t: P22 / f"dflash_206k/eval/dflash-{t}" for t in ("t1", "t0")},
    "eagle3_110": {t: P22 / f"eagle3_110k/eval/eagle3-{t}" for t in ("t1", "t0")},
    "dspark_110": {t: ABL / f"tau_h200_pass18/eval/dspark-{t}" for t in ("t1", "t0")},
}
PAIRS = [
    ("dspark_206", "eagle3_206"),
    ("eagle3_206", "dflash_206"),
    ("eagle3_206", "eagle3_110"),
]
TIMED = HERE / "timed_110k/speed"
RUNS = ["eagle3-fixed", "dflash-fixed", "dspark-fixed", "dspark-fixed-repeat"]


def parts(draft, t):
    return folder_parts(EVALS[draft][t], BENCHES)


res = compare_folders(EVALS, PAIRS, BENCHES)
for t in ("t1", "t0"):  # EAGLE-3's lead over DSpark at 206,000 over its lead at 110,000
    runs = [parts(d, t) for d in ("eagle3_206", "dspark_206", "eagle3_110", "dspark_110")]
    res[f"eagle3_lead_206_vs_110_{t}"] = ratio_of_ratios(runs)
res["timed_110k"] = timed_comparison(
    TIMED,
    RUNS,
    [
        ("eagle3-fixed", "dspark-fixed"),
        ("dflash-fixed", "dspark-fixed"),
        ("eagle3-fixed", "dflash-fixed"),
        ("dspark-fixed", "dspark-fixed-repeat"),
    ],
)
(HERE / "compare.json").write_text(json.dumps(res, indent=1) + "\n")
print("\n".join(comparison_lines({k: v for k, v in res.items() if k != "timed_110k"})))
print("\n".join(timed_lines(res["timed_110k"])))
