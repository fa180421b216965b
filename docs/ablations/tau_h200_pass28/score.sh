#!/bin/bash
# Pass 28, after run.sh: the fitted STS (sts.json, fold 1) scored on the prompts it will be
# served on: GSM8K's first 50 test items (those the next pass times the schedulers on) and
# MT-Bench's 80 first turns; every prompt tested, nothing fitted. fp32 on CPU.
set -euo pipefail
D=docs/ablations/tau_h200_pass28
T=$(python -c "from splitserve.target.embedded import ensure_smollm2; print(ensure_smollm2())" | tail -1)
for b in gsm8k:50 mtbench:80; do
  python -m serving.calibrate --checkpoint .data/p26 --target "$T" --score $D/sts.json \
    --prompts ${b%:*} --limit ${b#*:} --report $D/scored/${b%:*}.json
done
