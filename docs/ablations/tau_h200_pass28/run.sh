#!/bin/bash
# Pass 28 (issue 13, item 5's STS; CPU only, no device lent): STS of pass 26's 5-layer export
# (.data/p26/, checked against tau_h200_pass26/export/SHA256SUMS) fitted on the smol_gpu
# recipe's held-out prompts less any found in the two files that draft trained on (pass 25's
# and pass 26's regenerated files, checked against their regen_sha256.txt), in fp32 on this
# machine's CPU; then the two halves swapped (fold 2: the list without its first prompt, so the
# prompts fold 1 tested on are fitted on). Run from the checkout: bash
# docs/ablations/tau_h200_pass28/run.sh (about 8 min a fold on 2 cores). Every output is
# new: an existing one stops the script before anything is overwritten.
set -euo pipefail
D=docs/ablations/tau_h200_pass28
X=${X:-/tmp/s32/train}  # the training files, decompressed
for f in $D/held_prompts.jsonl $D/held_prompts_fold2.jsonl $D/sts.json $D/fold2/sts.json; do
  [ ! -e "$f" ] || { echo "error: $f exists (move it aside to run again)"; exit 1; }
done
(cd .data/p26 && sha256sum -c ../../docs/ablations/tau_h200_pass26/export/SHA256SUMS)
mkdir -p $X
gunzip -c .data/regen_pass25/regen.jsonl.gz.part0 > $X/regen_pass25.jsonl
cat .data/regen_pass26/regen.jsonl.gz.part* | gunzip > $X/regen_pass26.jsonl
(cd $X && sed 's/regen.jsonl/regen_pass25.jsonl/' \
  "$OLDPWD"/docs/ablations/tau_h200_pass25/regen_sha256.txt | sha256sum -c)
(cd $X && sed 's/regen.jsonl/regen_pass26.jsonl/' \
  "$OLDPWD"/docs/ablations/tau_h200_pass26/regen_sha256.txt | sha256sum -c)
python scripts/held_out_prompts.py --out $D/held_prompts.jsonl \
  --exclude $X/regen_pass25.jsonl --exclude $X/regen_pass26.jsonl +recipe=smol_gpu
tail -n +2 $D/held_prompts.jsonl > $D/held_prompts_fold2.jsonl
T=$(python -c "from splitserve.target.embedded import ensure_smollm2; print(ensure_smollm2())" | tail -1)
python -m serving.calibrate --checkpoint .data/p26 --target "$T" \
  --prompts $D/held_prompts.jsonl --out $D/sts.json --report $D/sts_report.json
python -m serving.calibrate --checkpoint .data/p26 --target "$T" \
  --prompts $D/held_prompts_fold2.jsonl --out $D/fold2/sts.json --report $D/fold2/sts_report.json
