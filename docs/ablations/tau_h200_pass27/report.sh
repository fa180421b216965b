#!/bin/bash
# Pass 27: serving.ablation_report on the depth axis at 110,000 samples of training, greedy and
# T=1: the layers3 job against the 5-layer baseline (pass 25's draft), both one stage of 6,875
# steps x 16 over pass 25's file.
#   bash docs/ablations/tau_h200_pass27/report.sh   # PY: the Python to run (default python)
# The two runs' reports sit outside their run directories (eval/<name>-tT, the whole sets, as the
# chains wrote them): a job directory is made for each in a temporary folder from its committed
# overrides, metrics, summary and reports, laid out as ablation_report reads them.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-python}
P=docs/ablations/tau_h200_pass27
P25=docs/ablations/tau_h200_pass25
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
job() {  # job path, run dir, reports' prefix: a job directory $tmp/<job path>, both temperatures
  local d=$tmp/$1 t
  mkdir -p "$d/.hydra"
  cp "$2/.hydra/overrides.yaml" "$2/metrics.jsonl.gz" "$2/summary.json" "$d/"
  mv "$d/overrides.yaml" "$d/.hydra/"
  for t in 0 1; do
    mkdir -p "$d/eval/step-00006875-t$t"
    cp "$3-t$t"/*.json "$d/eval/step-00006875-t$t/"
  done
}
job ablate/layers3 $P/ablate/layers3 $P/eval/layers3
job runs/dspark $P25/runs/dspark $P25/eval/dspark
# the file's path names each run's own work directory (the same file: sha256 d7d1f2fc...); the
# baseline set 5 layers over the 3-layer default of then, the job 3 over the 5-layer default
same=(--ignore-override data.sources=)
for t in 0 1; do
  $PY -m serving.ablation_report "$tmp/ablate/layers3" "$tmp/runs/dspark" "${same[@]}" --temperature $t \
    --out $P/ablate-report/layers_110k_t$t
done
