#!/bin/bash
# Pass 22: assemble docs/ablations/tau_h200_pass22.json (DSpark and DFlash at 206,000 samples)
# from the folders the passes keep. Pass 22's other table, the three drafts at 110,000 (then
# tau_h200.json), is tau_h200_pass23.json since pass 23: the same reports with pass 23's batch-1
# timings (tau_h200_pass23/assemble.sh, which now writes tau_h200.json at 206,000).
#   bash docs/ablations/tau_h200_pass22/assemble.sh   # PY: the Python to run (default python)
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-python}
P=docs/ablations/tau_h200_pass22
# DSpark against DFlash at 206,000: docs/ablations/tau_h200_pass22.json
$PY scripts/tau_table.py --results $P/dflash_206k --out docs/ablations/tau_h200_pass22.json --budget 96000 --samples-before 110000 \
 --draft-results dspark=$P/dspark_206k --draft-results dspark=docs/ablations/tau_h200_pass19 \
 --command 'W=/tmp/f18 bash scripts/tau_experiment.sh data-in /tmp/d18   # pass 18 file, 61,614 samples, sha256 7726c1c2...' \
 --command 'GPUS=1 SPEED=0 ABLATE=0 CURVE=0 W=/tmp/f18 SAMPLES=60000 STEPS=6000 RUNS=dflash EVAL_JOBS="dflash-t1 dflash-t0" EXTRA="train.init_from=/tmp/dfw/draft data.shuffle_seed=2" bash scripts/tau_experiment.sh pipeline-fg   # DFlash stage 3 (dflash_206k/), from chain.sh; /tmp/dfw: pass 21 DFlash weights, sha256 f69e98d8...' \
 --command 'python -m serving.evaluate --no-baseline --no-plot --max-new-tokens 128 --batch 32 --out /tmp/p19t1 --checkpoint /tmp/w19 --target /root/.cache/splitserve/smollm2-135m-instruct-float32 --temperature 1 --bench gsm8k,mtbench,humaneval --limit 200   # dspark_206k/eval/dspark-t1; /tmp/w19: pass 19 export, four shards sha256 e5332961... b21ba511... 9fec67b5... e3c2f1fd...' \
 --note 'DFlash trained on as pass 19 trained DSpark: from its 110,000-sample weights (pass 21), 6,000 steps over pass 18 file in the orders seeded 2 and 3, warm-up 240 steps to 6e-4 and cosine to 6e-5; 206,000 samples of training' \
 --note 'dspark is pass 19 draft (206,000): its T=1 reports are this pass evaluation of its export (dspark_206k/), its greedy reports, run and speed (2.002x on 100 items) pass 19 (read with --draft-results twice, the first folder holding a file wins)' \
 --note 'eagle3 is absent here: it was trained to 110,000 samples (tau_h200.json)'
