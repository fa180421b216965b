#!/bin/bash
# Pass 24: serving.ablation_report on the depth axis at 110,000 samples of training (pass 18's
# 3-layer baseline against layers5, both in two stages over the same two files) and at 30,000
# (pass 17's baseline against layers5's first stage, on pass 17's file).
#   bash docs/ablations/tau_h200_pass24/report.sh   # PY: the Python to run (default python)
# Pass 18's baseline ran in the main pipeline, not as an ablation job, so its greedy reports sit
# outside its run directory (eval/dspark-t0, the whole sets; GSM8K's first 200 and MT-Bench's 80
# x 2 are the items eval-ablate decodes): a job directory is made for it in a temporary folder
# from its committed overrides, metrics and those two reports.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-python}
P=docs/ablations/tau_h200_pass24
P18=docs/ablations/tau_h200_pass18
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base=$tmp/runs/dspark
mkdir -p "$base/.hydra" "$base/eval/step-00005000-t0"
cp $P18/runs/dspark/.hydra/overrides.yaml "$base/.hydra/"
cp $P18/runs/dspark/metrics.jsonl.gz "$base/"
cp $P18/eval/dspark-t0/gsm8k.json $P18/eval/dspark-t0/mtbench.json "$base/eval/step-00005000-t0/"
# its parameter count: the architecture of pass 17's run (its first stage), whose summary has it
$PY -c "import json, sys; print(json.dumps({'draft_params': json.load(open(sys.argv[1]))['draft_params']}))" \
  docs/ablations/tau_h200_pass17/runs/dspark/summary.json > "$base/summary.json"
# the jobs' data paths and init_from name the same files under each run's work directory (the
# files' sha256 are in tau_h200.md, pass 24) and each run's own first stage: left out
same=(--ignore-override data.sources= --ignore-override train.init_from=)
$PY -m serving.ablation_report "$base" $P/stage2_110k/ablate/layers5 "${same[@]}" \
  --out $P/ablate-report/layers_110k
$PY -m serving.ablation_report docs/ablations/tau_h200_pass17/runs/dspark $P/stage1_30k/ablate/layers5 \
  "${same[@]}" --out $P/ablate-report/layers_30k
