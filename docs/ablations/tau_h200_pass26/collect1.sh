#!/bin/bash
# The results (pack's archive; the pipeline's, chain's and regen's logs; the export's config,
# index and sha256 list) and four of the export's shards: six files.
W=/tmp/p26
(cd $W/pack && sha256sum config.json model* > $W/export_SHA256SUMS)
tar -czf $OUT/p26.tar.gz -C $W pipeline.log regen_sha256.txt export_SHA256SUMS \
  $(cd $W && ls regen*.log regen/*.log 2>/dev/null) runs/dspark/.hydra \
  pack/config.json pack/model.safetensors.index.json -C / tmp/chain.log
cp $W/pack/results.tar.gz $W/pack/model-0000[1-4]-of-00005.safetensors $OUT/
ls -la $OUT
