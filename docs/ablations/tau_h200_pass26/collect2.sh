#!/bin/bash
# The fifth shard, the extended file's parts, the timed run and the chain's log.
W=/tmp/p26
mkdir -p $OUT/d && cp $W/pack/model-00005-of-00005.safetensors $OUT/ && cp $W/dataout/* $OUT/d/
tar -czf $OUT/speed.tar.gz -C $W speed -C / tmp/chain.log
ls -la $OUT $OUT/d
