#!/bin/bash
# Bring back (at most 8 files): the results and the export's small files as one tarball, the
# export's shards, the file's parts.
W=/tmp/p25
cd $W && tar -czf $OUT/p25.tar.gz --exclude='*.safetensors' \
  regen_sha256.txt regen regen0.log ablate/layers5.log ablate/layers5/metrics.jsonl \
  ablate/layers5/summary.json ablate/layers5/.hydra eval export.log export_SHA256SUMS \
  export/layers5 /tmp/chain.log
tar -tzf $OUT/p25.tar.gz | wc -l; ls -la $OUT/p25.tar.gz
mkdir -p $OUT/w $OUT/d
cp $W/export/layers5/*.safetensors $OUT/w/ 2>/dev/null; cp $W/dataout/* $OUT/d/ 2>/dev/null
ls -la $OUT/w $OUT/d
