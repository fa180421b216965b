#!/bin/bash
# Pass 23: assemble docs/ablations/tau_h200_pass23_206k.json (the three drafts at 206,000 samples,
# DSpark with three layers; tau_h200.json until pass 26 put its 5-layer draft in the table) and
# tau_h200_pass23.json (the three at 110,000, with their batch-1 timings of this pass) from the
# folders the passes keep.
#   bash docs/ablations/tau_h200_pass23/assemble.sh   # PY: the Python to run (default python)
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-python}
P=docs/ablations/tau_h200_pass23
A=docs/ablations
T=/root/.cache/splitserve/smollm2-135m-instruct-float32
TIMED="--bench gsm8k --max-new-tokens 128 --no-plot --limit 200 --compile --verify-widths 8"
# the three drafts at 206,000 samples of training: docs/ablations/tau_h200_pass23_206k.json
$PY scripts/tau_table.py --results $P/eagle3_206k --out $A/tau_h200_pass23_206k.json --budget 96000 --samples-before 110000 \
 --draft-results dspark=$A/tau_h200_pass22/dspark_206k --draft-results dspark=$A/tau_h200_pass19 \
 --draft-results dflash=$A/tau_h200_pass22/dflash_206k \
 --command 'W=/tmp/e206 bash scripts/tau_experiment.sh data-in /tmp/d18   # pass 18 file, 61,614 samples, sha256 7726c1c2...' \
 --command 'GPUS=1 SPEED=0 ABLATE=0 CURVE=0 W=/tmp/e206 SAMPLES=60000 STEPS=6000 RUNS=eagle3 EVAL_JOBS="eagle3-t1 eagle3-t0" EXTRA="train.init_from=/tmp/e3w110/draft data.shuffle_seed=2" bash scripts/tau_experiment.sh pipeline-fg   # EAGLE-3 stage 3 (pass 23, eagle3_206k/), from chain.sh; /tmp/e3w110: pass 22 EAGLE-3 weights, sha256 f67fa65f...' \
 --command "python -m serving.evaluate --checkpoint /tmp/e3d206 --target $T $TIMED --out /root/out/eagle3-206k   # eagle3_206k/speed/eagle3-fixed; /tmp/e3d206: the step-6000 draft/ folder, sha256 a51ca4cd..." \
 --note 'three drafts at 206,000 samples of training each, on the same two files in the same three stages: 1,875 steps over pass 17 file (30,846 samples, sha256 6d91f045...), 5,000 over pass 18 file (61,614 samples, sha256 7726c1c2...), then train.init_from that run and 6,000 more over pass 18 file in the orders seeded 2 and 3, warm-up 240 steps to 6e-4 and cosine to 6e-5' \
 --note 'eagle3 is pass 23; dspark is pass 19 (its T=1 reports evaluated in pass 22, its greedy ones, run and speed run, 2.002x on 100 items on pass 19 machine, from pass 19); dflash is pass 22 (never timed at batch 1 at this budget)' \
 --note 'the three drafts were timed at batch 1 in one session at 110,000 samples (tau_h200_pass23.json); the greedy goals and the 2x one were met by pass 20 draft at 334,000 samples (tau_h200_pass20.json)'
# the three drafts at 110,000 with this pass's batch-1 timings: docs/ablations/tau_h200_pass23.json
$PY scripts/tau_table.py --results $A/tau_h200_pass22/eagle3_110k --out $A/tau_h200_pass23.json --budget 80000 --samples-before 30000 \
 --draft-results eagle3=$P/timed_110k --draft-results eagle3=$A/tau_h200_pass22/eagle3_110k \
 --draft-results dspark=$P/timed_110k --draft-results dspark=$A/tau_h200_pass18 \
 --draft-results dflash=$P/timed_110k --draft-results dflash=$A/tau_h200_pass21 \
 --command 'W=/tmp/e18 bash scripts/tau_experiment.sh data-in /tmp/d18   # pass 18 file, 61,614 samples, sha256 7726c1c2...' \
 --command 'GPUS=1 SPEED=0 ABLATE=0 CURVE=0 W=/tmp/e18 SAMPLES=60000 STEPS=5000 RUNS=eagle3 EVAL_JOBS="eagle3-t1 eagle3-t0" EXTRA="train.init_from=/tmp/e3w/draft" bash scripts/tau_experiment.sh pipeline-fg   # EAGLE-3 stage 2 (pass 22, tau_h200_pass22/eagle3_110k/); /tmp/e3w: pass 21 eagle3_30k weights, sha256 f48ea626...' \
 --command 'GPUS=1 RUNS=eagle3 SPEED=0 ABLATE=0 CURVE=0 W=/tmp/e17 SAMPLES=30000 EVAL_JOBS="" bash scripts/tau_experiment.sh pipeline-fg   # EAGLE-3 stage 1 (pass 21, tau_h200_pass21/eagle3_30k/): 1,875 steps over pass 17 file' \
 --command "python -m serving.evaluate --checkpoint CK --target $T $TIMED --out /tmp/speed/DRAFT   # pass 23, timed_110k/speed/DRAFT-fixed, from chain.sh, one after another on one idle H200: eagle3 (CK /tmp/e3w110/draft, sha256 f67fa65f...), dspark (CK /tmp/w18, pass 18 export), dflash (CK /tmp/dfw/draft, sha256 f69e98d8...); dspark-fixed-repeat the same for dspark, later in the session" \
 --note 'three drafts at 110,000 samples of training each, on the same two files in the same two stages: 1,875 steps over pass 17 file (30,846 samples, sha256 6d91f045...), then train.init_from that run and 5,000 steps over pass 18 file (61,614 samples, sha256 7726c1c2...), each stage with its own warm-up and cosine, data.shuffle_seed 0' \
 --note 'eagle3 is pass 22 (its stage 1 pass 21); dspark is pass 18; dflash is pass 21 (their commands are in tau_h200_pass18.json and tau_h200_pass21.json); every speed run is pass 23 (timed_110k/, read first with --draft-results), the three on one machine in one session; pass 18 own run of its draft gave 1.805x on another machine' \
 --note 'the greedy and speed goals were met by pass 20 draft at 334,000 samples (tau_h200_pass20.json), not by this budget draft; the T=1 goal against DFlash is settled at 206,000 (tau_h200_pass22.json)'
