#!/bin/bash
# Pass 21 (issue 13): DFlash trained the way pass 18 trained DSpark, in two stages, one after
# the other in this background chain: 1,875 steps over pass 17's file, then 5,000 over pass
# 18's from that run, with the whole-set evaluations at T=1 and greedy.
# The record of what ran: it ran as /tmp/repo/.gpu/chain.sh (a copy of the checkout on the
# machine); `tau_experiment.sh pipeline` now makes such a copy itself (W/src).
set -u
cd "$(dirname "$0")/.."
source /tmp/gpu-bundle/env.sh
export GPUS=1 RUNS=dflash SPEED=0 ABLATE=0 CURVE=0
echo "### $(date +%T) chain: stage 1 (t17)"
W=/tmp/t17 SAMPLES=30000 EVAL_JOBS="" bash scripts/tau_experiment.sh pipeline-fg > /tmp/t17/pipeline.log 2>&1
echo "### $(date +%T) chain: stage 1 ended; waiting for /tmp/t18/regen.jsonl"
while [ ! -f /tmp/t18/regen.jsonl ]; do sleep 5; done
[ -d /tmp/t17/runs/dflash/checkpoints ] || { echo "### chain: stage 1 left no checkpoints"; exit 1; }
echo "### $(date +%T) chain: stage 2 (t18)"
W=/tmp/t18 SAMPLES=60000 STEPS=5000 EVAL_JOBS="dflash-t1 dflash-t0" \
  EXTRA="train.init_from=/tmp/t17/runs/dflash" bash scripts/tau_experiment.sh pipeline-fg > /tmp/t18/pipeline.log 2>&1
echo "### $(date +%T) chain done"
