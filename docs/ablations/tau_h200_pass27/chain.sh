#!/bin/bash
# Pass 27 (issue 13): two of the ablations at 110,000 samples of training against the 5-layer
# default, trained at once on one H200 (LANES=2, the first time two runs share a GPU since the
# runtime got fast): layers3 (the former default) and mla. Each is one stage of 6,875 steps x 16
# on pass 25's file (data-in, sha256 checked), as pass 25 trained the 5-layer baseline; each is
# evaluated on the whole sets as soon as it ends (T=1, then greedy; batch 32). Then, on the idle
# GPU, pass 25's and pass 26's 5-layer exports timed at batch 1 one after the other (GSM8K, the
# item count read from /tmp/speed_limit when each starts: 0 skips it), and, if /tmp/profile
# exists, profiled (scripts/profile_decode.py --compile --skip-parts).
# Runs in the background from a copy of the checkout (/tmp/repo). $1: the shared data.
set -u
cd /tmp/repo
source /tmp/gpu-bundle/env.sh
export SPLITSERVE_SHARED_DATA=$1
export W=/tmp/p27 GPUS=1 LANES=2 RUNS="" EVAL_JOBS="" SPEED=0 ABLATE=1 CURVE=0 \
  ABL="layers3 mla" SAMPLES=30000 STEPS=6875 POLL=10
S=scripts/tau_experiment.sh
echo "### $(date +%T) chain: data-in"
bash $S data-in /tmp/p27in || { echo "### chain: data-in failed"; exit 1; }
(cd $W && sha256sum -c /tmp/repo/docs/ablations/tau_h200_pass25/regen_sha256.txt) ||
  { echo "### chain: the file is not pass 25's"; exit 1; }
echo "### $(date +%T) chain: train $ABL"
bash $S ablate
T=$(python -c "from splitserve.target.embedded import ensure_smollm2; print(ensure_smollm2())" | tail -1)
mkdir -p $W/eval $W/speed $W/profile
evaluate() {  # an ablation run, once its process has ended: T=1, then greedy
  local name=$1 R=$W/ablate/$1 t
  while [ ! -f $R.pid ]; do sleep 5; done
  while kill -0 "$(cat $R.pid)" 2> /dev/null; do sleep 10; done
  [ -f $R/summary.json ] || { echo "### $(date +%T) chain: $name has no summary (failed or stopped)"; return; }
  (cd $R/checkpoints && sha256sum */*.safetensors */*.pt 2> /dev/null > $W/checksums-$name.txt)
  for t in 1 0; do
    echo "### $(date +%T) chain: eval $name t$t"
    python -m serving.evaluate --no-baseline --no-plot --max-new-tokens 128 --batch 32 \
      --checkpoint $R --target "$T" --temperature $t --bench gsm8k,mtbench,humaneval --limit 200 \
      --out $W/eval/$name-t$t > $W/eval/$name-t$t.log 2>&1 || echo "### chain: eval $name t$t failed"
  done
}
evaluate layers3  # three layers step faster: it ends first
evaluate mla
echo "### $(date +%T) chain: waiting for the two exports"
while [ ! -f /tmp/p25x/OK ] || [ ! -f /tmp/p26x/OK ]; do sleep 5; done
for d in p25 p26; do
  n=$(cat /tmp/speed_limit 2> /dev/null || echo 200)
  [ "$n" != 0 ] || { echo "### $(date +%T) chain: $d not timed (/tmp/speed_limit 0)"; continue; }
  echo "### $(date +%T) chain: timed $d, $n items"
  python -m serving.evaluate --checkpoint /tmp/${d}x --target "$T" --bench gsm8k \
    --max-new-tokens 128 --no-plot --limit $n --compile --verify-widths 8 \
    --out $W/speed/$d > $W/speed/$d.log 2>&1 || echo "### $(date +%T) chain: timed $d failed"
done
for d in p25 p26; do
  [ -f /tmp/profile ] || break
  echo "### $(date +%T) chain: profile $d"
  python scripts/profile_decode.py --checkpoint /tmp/${d}x --target "$T" --compile --skip-parts \
    --out $W/profile/$d.json > $W/profile/$d.log 2>&1 || echo "### $(date +%T) chain: profile $d failed"
done
echo "### $(date +%T) chain done"
