#!/bin/bash
# Pass 23 (issue 13), in the background from a copy of the checkout (/tmp/repo):
#  1. the three 110,000-sample drafts timed at batch 1 on GSM8K's 200 (--compile --verify-widths
#     8, target-only decoding in the same run), one after another on the idle GPU: EAGLE-3
#     (pass 22, /tmp/e3w110/draft), DSpark (pass 18's export, /tmp/w18), DFlash (pass 21,
#     /tmp/dfw/draft); each waits for its READY file (written by the call that carries it);
#  2. if /tmp/go_e206 exists then: EAGLE-3 on to 206,000 as pass 19's DSpark and pass 22's
#     DFlash (6,000 steps over pass 18's file, data.shuffle_seed=2) with T=1 and greedy.
# $1: the shared data (SPLITSERVE_SHARED_DATA).
set -u
cd /tmp/repo
source /tmp/gpu-bundle/env.sh
export SPLITSERVE_SHARED_DATA=$1
mkdir -p /tmp/speed /tmp/e206
T=$(python -c "from splitserve.target.embedded import ensure_smollm2; print(ensure_smollm2())" | tail -1)
for job in eagle3:/tmp/e3w110/draft dspark:/tmp/w18 dflash:/tmp/dfw/draft; do
  name=${job%%:*} ck=${job#*:}
  while [ ! -f "$(dirname "$ck")/READY" ] && [ ! -f "$ck/READY" ]; do sleep 5; done
  echo "### $(date +%T) chain: $name at batch 1"
  python -m serving.evaluate --checkpoint "$ck" --target "$T" --bench gsm8k \
    --max-new-tokens 128 --no-plot --limit 200 --compile --verify-widths 8 \
    --out /tmp/speed/$name > /tmp/speed/$name.log 2>&1 || echo "### $(date +%T) chain: $name failed"
done
if [ -f /tmp/go_e206 ]; then
  while [ ! -f /tmp/e206/regen.jsonl ]; do sleep 5; done
  echo "### $(date +%T) chain: EAGLE-3 on to 206,000 (/tmp/e206)"
  GPUS=1 SPEED=0 ABLATE=0 CURVE=0 W=/tmp/e206 SAMPLES=60000 STEPS=6000 RUNS=eagle3 \
    EVAL_JOBS="eagle3-t1 eagle3-t0" EXTRA="train.init_from=/tmp/e3w110/draft data.shuffle_seed=2" \
    bash scripts/tau_experiment.sh pipeline-fg > /tmp/e206/pipeline.log 2>&1
fi
echo "### $(date +%T) chain done"
