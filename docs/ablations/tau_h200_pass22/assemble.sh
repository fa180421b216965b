#!/bin/bash
# Pass 22: assemble docs/ablations/tau_h200.json (the three drafts at 110,000 samples) and
# tau_h200_pass22.json (DSpark and DFlash at 206,000) from the folders the passes keep.
#   bash docs/ablations/tau_h200_pass22/assemble.sh   # PY: the Python to run (default python)
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-python}
P=docs/ablations/tau_h200_pass22
# the three drafts at 110,000 samples of training: docs/ablations/tau_h200.json
$PY scripts/tau_table.py --results $P/eagle3_110k --out docs/ablations/tau_h200.json --budget 80000 --samples-before 30000 \
 --draft-results dspark=docs/ablations/tau_h200_pass18 --draft-results dflash=docs/ablations/tau_h200_pass21 \
 --command 'W=/tmp/e18 bash scripts/tau_experiment.sh data-in /tmp/d18   # pass 18 file, 61,614 samples, sha256 7726c1c2...' \
 --command 'GPUS=1 SPEED=0 ABLATE=0 CURVE=0 W=/tmp/e18 SAMPLES=60000 STEPS=5000 RUNS=eagle3 EVAL_JOBS="eagle3-t1 eagle3-t0" EXTRA="train.init_from=/tmp/e3w/draft" bash scripts/tau_experiment.sh pipeline-fg   # EAGLE-3 stage 2 (pass 22, eagle3_110k/), from chain.sh, run from a copy of the checkout; /tmp/e3w: pass 21 eagle3_30k weights, sha256 f48ea626...' \
 --command 'GPUS=1 RUNS=eagle3 SPEED=0 ABLATE=0 CURVE=0 W=/tmp/e17 SAMPLES=30000 EVAL_JOBS="" bash scripts/tau_experiment.sh pipeline-fg   # EAGLE-3 stage 1 (pass 21, tau_h200_pass21/eagle3_30k/): 1,875 steps over pass 17 file' \
 --note 'three drafts at 110,000 samples of training each, on the same two files in the same two stages: 1,875 steps over pass 17 file (30,846 samples, sha256 6d91f045...), then train.init_from that run and 5,000 steps over pass 18 file (61,614 samples, sha256 7726c1c2...), each stage with its own warm-up and cosine, data.shuffle_seed 0' \
 --note 'eagle3 is pass 22 (its stage 1 pass 21); dspark is pass 18 (with its speed run, 1.805x); dflash is pass 21 (both read with --draft-results; their commands are in tau_h200_pass18.json and tau_h200_pass21.json)' \
 --note 'the greedy and speed goals were met by pass 20 draft at 334,000 samples (tau_h200_pass20.json), not by this budget draft; the T=1 goal against DFlash is settled at 206,000 (tau_h200_pass22.json)'
# DSpark against DFlash at 206,000: docs/ablations/tau_h200_pass22.json
$PY scripts/tau_table.py --results $P/dflash_206k --out docs/ablations/tau_h200_pass22.json --budget 96000 --samples-before 110000 \
 --draft-results dspark=$P/dspark_206k --draft-results dspark=docs/ablations/tau_h200_pass19 \
 --command 'W=/tmp/f18 bash scripts/tau_experiment.sh data-in /tmp/d18   # pass 18 file, 61,614 samples, sha256 7726c1c2...' \
 --command 'GPUS=1 SPEED=0 ABLATE=0 CURVE=0 W=/tmp/f18 SAMPLES=60000 STEPS=6000 RUNS=dflash EVAL_JOBS="dflash-t1 dflash-t0" EXTRA="train.init_from=/tmp/dfw/draft data.shuffle_seed=2" bash scripts/tau_experiment.sh pipeline-fg   # DFlash stage 3 (dflash_206k/), from chain.sh; /tmp/dfw: pass 21 DFlash weights, sha256 f69e98d8...' \
 --command 'python -m serving.evaluate --no-baseline --no-plot --max-new-tokens 128 --batch 32 --out /tmp/p19t1 --checkpoint /tmp/w19 --target /root/.cache/splitserve/smollm2-135m-instruct-float32 --temperature 1 --bench gsm8k,mtbench,humaneval --limit 200   # dspark_206k/eval/dspark-t1; /tmp/w19: pass 19 export, four shards sha256 e5332961... b21ba511... 9fec67b5... e3c2f1fd...' \
 --note 'DFlash trained on as pass 19 trained DSpark: from its 110,000-sample weights (pass 21), 6,000 steps over pass 18 file in the orders seeded 2 and 3, warm-up 240 steps to 6e-4 and cosine to 6e-5; 206,000 samples of training' \
 --note 'dspark is pass 19 draft (206,000): its T=1 reports are this pass evaluation of its export (dspark_206k/), its greedy reports, run and speed (2.002x on 100 items) pass 19 (read with --draft-results twice, the first folder holding a file wins)' \
 --note 'eagle3 is absent here: it was trained to 110,000 samples (tau_h200.json)'
