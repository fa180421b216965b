#!/bin/bash
# Pass 25 (issue 13): DSpark with five layers at 110,000 samples of training, for the T=1 goal
# against EAGLE-3 (pass 22: 2.010 macro at 110,000). Passes 17-24's files and weights are gone
# (kept outside git, lost with the checkout), so: a new file regenerated as pass 17's was
# (30,000 + 64 held out, +recipe=smol_gpu, generate_batch 512), then ONE stage of 6,875 steps x 16
# (110,000 samples, ~3.6 passes) of the layers5 ablation job, then T=1 and greedy on the whole
# sets (GSM8K 200, MT-Bench 80 x 2, HumanEval 164; batch 32), T=1 first; export; the file out.
# Runs in the background from a copy of the checkout (/tmp/repo). $1: the shared data.
set -u
cd /tmp/repo
source /tmp/gpu-bundle/env.sh
export SPLITSERVE_SHARED_DATA=$1
export W=/tmp/p25 GPUS=1 RUNS="" EVAL_JOBS="" SPEED=0 ABLATE=1 CURVE=0 ABL=layers5 \
  SAMPLES=30000 STEPS=6875 POLL=10 REGEN_EXTRA="target.generate_batch=512"
S=scripts/tau_experiment.sh
echo "### $(date +%T) chain: regen"
bash $S regen && bash $S wait regen 3600 || { echo "### chain: regen failed"; exit 1; }
echo "### $(date +%T) chain: train layers5"
bash $S ablate && bash $S wait ablate 7200
R=$W/ablate/layers5
[ -f $R/summary.json ] || { echo "### $(date +%T) chain: no summary (training failed)"; exit 1; }
T=$(python -c "from splitserve.target.embedded import ensure_smollm2; print(ensure_smollm2())" | tail -1)
mkdir -p $W/eval
for t in 1 0; do
  echo "### $(date +%T) chain: eval t$t"
  python -m serving.evaluate --no-baseline --no-plot --max-new-tokens 128 --batch 32 \
    --checkpoint $R --target "$T" --temperature $t --bench gsm8k,mtbench,humaneval --limit 200 \
    --out $W/eval/layers5-t$t > $W/eval/layers5-t$t.log 2>&1 || echo "### chain: eval t$t failed"
  if [ $t = 1 ]; then
    echo "### $(date +%T) chain: export, data-out"
    python -m serving.export --checkpoint $R --out $W/export/layers5 --max-shard-mb 15 > $W/export.log 2>&1
    (cd $W/export/layers5 && sha256sum * > /tmp/p25/export_SHA256SUMS)
    bash $S data-out $W/dataout
  fi
done
echo "### $(date +%T) chain done"
