#!/bin/bash
# Pass 25: assemble docs/ablations/tau_h200_pass25.json, the three drafts at 110,000 samples of
# training with DSpark's row the 5-layer draft of this pass (one stage on a new file), DFlash's
# pass 21 and EAGLE-3's pass 22 (two stages on pass 17's and 18's files), with DFlash's and
# EAGLE-3's batch-1 timings of pass 23. This pass's folder is the results folder: chain.sh wrote
# eval/layers5-tT and ablate/layers5 (the layers5 ablation job); they were renamed
# eval/dspark-tT and runs/dspark (metrics gzipped), the layout scripts/tau_table.py reads.
#   bash docs/ablations/tau_h200_pass25/assemble.sh   # PY: the Python to run (default python)
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-python}
P=docs/ablations/tau_h200_pass25
A=docs/ablations
$PY scripts/tau_table.py --results $P --out $A/tau_h200_pass25.json --budget 110000 \
 --draft-results eagle3=$A/tau_h200_pass23/timed_110k --draft-results eagle3=$A/tau_h200_pass22/eagle3_110k \
 --draft-results dflash=$A/tau_h200_pass23/timed_110k --draft-results dflash=$A/tau_h200_pass21 \
 --command 'W=/tmp/p25 GPUS=1 RUNS="" EVAL_JOBS="" SPEED=0 ABLATE=1 CURVE=0 ABL=layers5 SAMPLES=30000 STEPS=6875 POLL=10 REGEN_EXTRA="target.generate_batch=512" bash scripts/tau_experiment.sh regen   # then wait regen, ablate, wait ablate (chain.sh): a new file of 30,846 samples, sha256 d7d1f2fc..., and 6,875 steps x 16 of draft.num_layers=5 over it' \
 --command 'python -m serving.evaluate --no-baseline --no-plot --max-new-tokens 128 --batch 32 --checkpoint /tmp/p25/ablate/layers5 --target /root/.cache/splitserve/smollm2-135m-instruct-float32 --temperature T --bench gsm8k,mtbench,humaneval --limit 200 --out /tmp/p25/eval/layers5-tT   # T = 1, then 0 (chain.sh; here eval/dspark-tT)' \
 --command 'python -m serving.export --checkpoint /tmp/p25/ablate/layers5 --out /tmp/p25/export/layers5 --max-shard-mb 15   # export/SHA256SUMS' \
 --note 'dspark is pass 25: five layers (draft.num_layers=5, the issue allows up to five), one stage of 6,875 steps x 16 = 110,000 samples (warm-up 275 steps to 6e-4, cosine to 6e-5) over a new 30,846-sample file (sha256 d7d1f2fc...; about 3.6 passes over its 30,782-sample training pool), data.shuffle_seed 0; never timed at batch 1 (pass 24 timed the 5-layer draft of its own two stages: 1.868x)' \
 --note 'dflash is pass 21 and eagle3 pass 22 (its stage 1 pass 21): two stages, 1,875 steps over pass 17 file (30,846 samples, sha256 6d91f045...), then train.init_from that run and 5,000 steps over pass 18 file (61,614 samples, sha256 7726c1c2...); their speed runs are pass 23 (timed_110k/). The files differ from dspark s: comparisons between the rows carry the 0.2-1.6 % seen between files' \
 --note 'the 3-layer DSpark at this budget (pass 18) is tau_h200_pass23.json s dspark row; the greedy and speed goals were met by pass 20 draft at 334,000 samples (tau_h200_pass20.json)'
