#!/bin/bash
# Pass 24 (issue 13): the depth ablation layers5 at 110,000 samples of training, the way pass
# 18's DSpark baseline got there (in the background from a copy of the checkout, /tmp/repo):
#  1. stage 1: 1,875 steps x 16 over pass 17's file (/tmp/a17), as pass 17's baseline, then its
#     evaluation (greedy, GSM8K 0..199 and MT-Bench 80 x 2, batch 32): same file as pass 17;
#  2. stage 2: train.init_from stage 1, 5,000 steps x 16 over pass 18's file (/tmp/a18), as
#     pass 18's baseline, then the same evaluation;
#  3. batch 1 on the idle GPU (GSM8K 0..199, --compile --verify-widths 8): layers5, then pass
#     18's baseline export (/tmp/w18, gated on its READY), same session.
# $1: the shared data (SPLITSERVE_SHARED_DATA). Gates: /tmp/a17/regen.jsonl, /tmp/a18/regen.jsonl.
set -u
cd /tmp/repo
source /tmp/gpu-bundle/env.sh
export SPLITSERVE_SHARED_DATA=$1
export GPUS=1 RUNS="" EVAL_JOBS="" SPEED=0 ABLATE=1 CURVE=0 ABL=layers5 ABL_LIMIT=200 ABL_PROCS=1
while [ ! -f /tmp/a17/regen.jsonl ]; do sleep 5; done
echo "### $(date +%T) chain: stage 1 (/tmp/a17)"
W=/tmp/a17 SAMPLES=30000 bash scripts/tau_experiment.sh pipeline-fg > /tmp/a17/pipeline.log 2>&1
[ -d /tmp/a17/ablate/layers5/checkpoints ] || { echo "### chain: stage 1 left no checkpoints"; exit 1; }
while [ ! -f /tmp/a18/regen.jsonl ]; do sleep 5; done
echo "### $(date +%T) chain: stage 2 (/tmp/a18)"
W=/tmp/a18 SAMPLES=60000 STEPS=5000 EXTRA="train.init_from=/tmp/a17/ablate/layers5" \
  bash scripts/tau_experiment.sh pipeline-fg > /tmp/a18/pipeline.log 2>&1
T=$(python -c "from splitserve.target.embedded import ensure_smollm2; print(ensure_smollm2())" | tail -1)
mkdir -p /tmp/speed
for job in layers5:/tmp/a18/ablate/layers5 dspark:/tmp/w18; do
  name=${job%%:*} ck=${job#*:}
  [ "$name" = layers5 ] || while [ ! -f "$ck/READY" ]; do sleep 5; done
  echo "### $(date +%T) chain: $name at batch 1"
  python -m serving.evaluate --checkpoint "$ck" --target "$T" --bench gsm8k \
    --max-new-tokens 128 --no-plot --limit 200 --compile --verify-widths 8 \
    --out /tmp/speed/$name > /tmp/speed/$name.log 2>&1 || echo "### $(date +%T) chain: $name failed"
done
echo "### $(date +%T) chain done"
