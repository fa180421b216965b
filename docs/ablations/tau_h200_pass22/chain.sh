#!/bin/bash
# Pass 22 (issue 13), run in the background from a copy of the checkout (/tmp/repo), one stage
# after the other:
#  1. EAGLE-3's second stage, as pass 18 trained DSpark and pass 21 DFlash: train.init_from its
#     first stage (pass 21, 30,000 samples over pass 17's file), 5,000 steps over pass 18's
#     file, then the whole sets at T=1 and greedy: 110,000 samples of training;
#  2. pass 19's DSpark export (206,000 samples) at T=1 on the whole sets, as pass 18's was;
#  3. if /tmp/go_dflash exists then: DFlash on from pass 21 (110,000) for 6,000 steps over pass
#     18's file, data.shuffle_seed=2, as pass 19 trained DSpark (206,000), and its evaluations.
# $1: the shared data (SPLITSERVE_SHARED_DATA). Gates: /tmp/w19/READY, /tmp/dfw/READY and
# /tmp/f18/regen.jsonl, written by the calls that carry them.
set -u
cd /tmp/repo
source /tmp/gpu-bundle/env.sh
export SPLITSERVE_SHARED_DATA=$1
export GPUS=1 SPEED=0 ABLATE=0 CURVE=0
mkdir -p /tmp/e18 /tmp/f18
echo "### $(date +%T) chain: EAGLE-3 stage 2 (/tmp/e18)"
W=/tmp/e18 SAMPLES=60000 STEPS=5000 RUNS=eagle3 EVAL_JOBS="eagle3-t1 eagle3-t0" \
  EXTRA="train.init_from=/tmp/e3w/draft" bash scripts/tau_experiment.sh pipeline-fg \
  > /tmp/e18/pipeline.log 2>&1
echo "### $(date +%T) chain: EAGLE-3 done; waiting for /tmp/w19/READY"
while [ ! -f /tmp/w19/READY ]; do sleep 5; done
echo "### $(date +%T) chain: pass 19's DSpark at T=1 (/tmp/p19t1)"
T=$(python -c "from splitserve.target.embedded import ensure_smollm2; print(ensure_smollm2())" | tail -1)
python -m serving.evaluate --no-baseline --no-plot --max-new-tokens 128 --batch 32 \
  --out /tmp/p19t1 --checkpoint /tmp/w19 --target "$T" --temperature 1 \
  --bench gsm8k,mtbench,humaneval --limit 200 > /tmp/p19t1.log 2>&1 ||
  echo "### $(date +%T) chain: pass 19's evaluation failed"
if [ -f /tmp/go_dflash ]; then
  while [ ! -f /tmp/dfw/READY ] || [ ! -f /tmp/f18/regen.jsonl ]; do sleep 5; done
  echo "### $(date +%T) chain: DFlash stage 3 (/tmp/f18)"
  W=/tmp/f18 SAMPLES=60000 STEPS=6000 RUNS=dflash EVAL_JOBS="dflash-t1 dflash-t0" \
    EXTRA="train.init_from=/tmp/dfw/draft data.shuffle_seed=2" \
    bash scripts/tau_experiment.sh pipeline-fg > /tmp/f18/pipeline.log 2>&1
fi
echo "### $(date +%T) chain done"
