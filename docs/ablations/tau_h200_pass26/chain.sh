#!/bin/bash
# Pass 26 (issue 13): the 5-layer DSpark draft on from 110,000 to 206,000 samples of training, as
# pass 19 took the 3-layer one and pass 23 EAGLE-3 there: pass 25's file (30,846 samples, brought
# by data-in and checked) extended to ~61,600 as pass 18's was (no shuffle seed: the prompt
# order), then 6,000 steps x 16 = 96,000 samples from pass 25's export (train.init_from,
# data.shuffle_seed=2), T=1 then greedy on the whole sets (GSM8K 200, MT-Bench 80 x 2,
# HumanEval 164; batch 32), pack (export, checksums), the file out; then the draft timed at
# batch 1 on GSM8K (200 items, as pass 24 timed its 5-layer draft).
# Runs in the background from a copy of the checkout (/tmp/repo). $1: the shared data.
set -u
cd /tmp/repo
source /tmp/gpu-bundle/env.sh
export SPLITSERVE_SHARED_DATA=$1
export W=/tmp/p26 GPUS=1 POLL=10 SAMPLES=60000 REGEN_EXTRA="target.generate_batch=512"
S=scripts/tau_experiment.sh
echo "### $(date +%T) chain: data-in"
bash $S data-in /tmp/p26in || { echo "### chain: data-in failed"; exit 1; }
(cd $W && sha256sum -c /tmp/repo/docs/ablations/tau_h200_pass25/regen_sha256.txt) ||
  { echo "### chain: the file is not pass 25's"; exit 1; }
echo "### $(date +%T) chain: regen (extend)"
bash $S regen && bash $S wait regen 3600 || { echo "### chain: regen failed"; exit 1; }
bash $S data-out $W/dataout
echo "### $(date +%T) chain: waiting for the 110,000-sample export"
while [ ! -f /tmp/p26init/OK ]; do sleep 5; done
echo "### $(date +%T) chain: pipeline"
RUNS=dspark EVAL_JOBS="dspark-t1 dspark-t0" SPEED=0 ABLATE=0 CURVE=0 STEPS=6000 \
  EXTRA="train.init_from=/tmp/p26init draft.num_layers=5 data.shuffle_seed=2" \
  bash $S pipeline-fg > $W/pipeline.log 2>&1
[ -f $W/pack/results.tar.gz ] || { echo "### $(date +%T) chain: no pack (pipeline failed)"; exit 1; }
echo "### $(date +%T) chain: packed; timed at batch 1"
T=$(python -c "from splitserve.target.embedded import ensure_smollm2; print(ensure_smollm2())" | tail -1)
mkdir -p $W/speed
python -m serving.evaluate --checkpoint $W/runs/dspark --target "$T" --bench gsm8k \
  --max-new-tokens 128 --no-plot --limit 200 --compile --verify-widths 8 \
  --out $W/speed/layers5 > $W/speed/layers5.log 2>&1 || echo "### $(date +%T) chain: timed run failed"
echo "### $(date +%T) chain done"
