"""Pass 27's comparisons, paired over items (serving.intervals): the `layers3` ablation job (the
former 3-layer default) against the 5-layer baseline, pass 25's draft. Both were trained in one
stage of 6,875 steps x 16 (110,000 samples of training) over the same file (pass 25's, brought
in with data-in, sha256 `d7d1f2fc...`) with the same overrides and data order; only
draft.num_layers differs. Evaluated on GSM8K's 200, MT-Bench's 80 x 2 turns and HumanEval's
164, greedy and T=1, batch 32. Also against the 3-layer draft of pass 18 (the same budget in
two stages over passes 17's and 18's files), for the spread between files.

Then the batch-1 timings of this session (GSM8K 0..199, `--compile --verify-widths 8`): pass 25's
and pass 26's 5-layer exports one after the other, and pass 26's again at the end
(`timed_comparison`), each run's speedup with its 95 % interval over the items (both step costs
held at the run's own, as `scripts/tau_table.py` gives the goal's).

    python docs/ablations/tau_h200_pass27/compare.py   # from the checkout: writes compare.json
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
from serving.benchmarks import BENCHES  # noqa: E402
from serving.intervals import (  # noqa: E402
    compare_folders,
    comparison_lines,
    folder_parts,
    speedup_interval,
    timed_comparison,
    timed_lines,
)

ABL = HERE.parent
TEMPS = ("t1", "t0")
EVALS = {  # draft at 110,000 samples: its reports' folder, by temperature
    "layers3": {t: HERE / f"eval/layers3-{t}" for t in TEMPS},
    "layers5": {t: ABL / f"tau_h200_pass25/eval/dspark-{t}" for t in TEMPS},
    "layers3_p18": {t: ABL / f"tau_h200_pass18/eval/dspark-{t}" for t in TEMPS},
}
PAIRS = [("layers5", "layers3"), ("layers3", "layers3_p18")]

TIMED = ["p25", "p26", "p26-again"]

res = compare_folders(EVALS, PAIRS, BENCHES, temps=TEMPS)
timed = timed_comparison(HERE / "speed", TIMED, [("p26", "p25"), ("p26-again", "p26")])
for run, s in timed["runs"].items():
    parts = folder_parts(HERE / "speed" / run, ["gsm8k"])
    s["speedup_ci95"] = speedup_interval(parts, s["speedup"])
res["timed"] = timed
(HERE / "compare.json").write_text(json.dumps(res, indent=1) + "\n")
print("\n".join(comparison_lines({k: v for k, v in res.items() if k != "timed"})))
print("\n".join(timed_lines(timed)))
for run, s in timed["runs"].items():
    print(f"{run}: speedup 95 % {s['speedup_ci95'][0]:.3f}-{s['speedup_ci95'][1]:.3f}")
