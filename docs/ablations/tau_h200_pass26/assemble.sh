#!/bin/bash
# Pass 26: assemble docs/ablations/tau_h200.json, the three drafts at 206,000 samples of training
# with DSpark's row the 5-layer draft of this pass (pass 25's 110,000-sample export on to 206,000
# over pass 25's file extended), DFlash's pass 22 and EAGLE-3's pass 23 (three stages on pass 17's
# and 18's files). The 3-layer DSpark at 206,000 (pass 19) is tau_h200_pass23_206k.json's row.
# This pass's folder is the results folder (the pipeline's W, the layout scripts/tau_table.py
# reads; metrics gzipped, the timed run's folder speed/layers5 renamed speed/dspark-fixed).
#   bash docs/ablations/tau_h200_pass26/assemble.sh   # PY: the Python to run (default python)
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-python}
P=docs/ablations/tau_h200_pass26
A=docs/ablations
T=/root/.cache/splitserve/smollm2-135m-instruct-float32
$PY scripts/tau_table.py --results $P --out $A/tau_h200.json --budget 96000 --samples-before 110000 \
 --draft-results eagle3=$A/tau_h200_pass23/eagle3_206k \
 --draft-results dflash=$A/tau_h200_pass22/dflash_206k \
 --command 'W=/tmp/p26 bash scripts/tau_experiment.sh data-in /tmp/p26in   # pass 25 file, 30,846 samples, sha256 d7d1f2fc... (checked)' \
 --command 'W=/tmp/p26 GPUS=1 SAMPLES=60000 REGEN_EXTRA="target.generate_batch=512" bash scripts/tau_experiment.sh regen   # then wait regen: extended to 61,614 samples, sha256 89e99063...' \
 --command 'W=/tmp/p26 GPUS=1 SAMPLES=60000 STEPS=6000 RUNS=dspark EVAL_JOBS="dspark-t1 dspark-t0" SPEED=0 ABLATE=0 CURVE=0 EXTRA="train.init_from=/tmp/p26init draft.num_layers=5 data.shuffle_seed=2" bash scripts/tau_experiment.sh pipeline-fg   # /tmp/p26init: pass 25 export (tau_h200_pass25/export/SHA256SUMS, checked)' \
 --command "python -m serving.evaluate --checkpoint /tmp/p26/runs/dspark --target $T --bench gsm8k --max-new-tokens 128 --no-plot --limit 200 --compile --verify-widths 8 --out /tmp/p26/speed/layers5   # here speed/dspark-fixed" \
 --note 'dspark is pass 26: five layers (draft.num_layers=5; the issue allows up to five), pass 25 (one stage of 6,875 steps x 16 over a new 30,846-sample file, sha256 d7d1f2fc...) then train.init_from its export and 6,000 steps x 16 over that file extended to 61,614 samples (sha256 89e99063...) in the order seeded 2, warm-up 240 steps to 6e-4 and cosine to 6e-5; timed at batch 1 on 200 items in this pass' \
 --note 'eagle3 is pass 23 and dflash pass 22: three stages, 1,875 steps over pass 17 file (30,846 samples, sha256 6d91f045...), 5,000 over pass 18 file (61,614 samples, sha256 7726c1c2...), then 6,000 more over pass 18 file in the order seeded 2; eagle3 timed by hand in pass 23 on another machine, dflash never timed at this budget. The files differ from dspark s: comparisons between the rows carry the 0.2-1.6 % seen between files' \
 --note 'the 3-layer DSpark at this budget (pass 19) is tau_h200_pass23_206k.json s dspark row; this pass draft leads it by x1.075 at T=1 and x1.191 greedy (tau_h200_pass26/compare.json)' \
 --note 'pass 27 timed this draft again, twice in one session on another machine, with the same flags on its bf16 export (pass 26 timed the run checkpoint; tau 3.961 in all three): 2.145x (95 % 2.102-2.187 over the items) and 2.083x (2.042-2.124) target-only, steps 2.067 and 2.194 ms against 1.125 and 1.160 ms target-only (tau_h200_pass27/compare.json); speed_gsm8k and the 2x goal here are pass 26 timing, 1.966x. The same weights step in the same time as pass 25 110,000-sample draft (pass 27 profile): the difference is between sessions'
