#!/bin/bash
# Bring back pass 27's results so far as one tarball ($1: its name): the runs' small files
# (metrics, summaries, overrides, logs; no weights), the evaluations, the timed runs, the
# profiles, the checksums and the chain's log.
W=/tmp/p27
for r in $W/ablate/*/checkpoints; do  # the weights' sha256 (chain.sh's own list globbed one level short)
  (cd $r && sha256sum */draft/*.safetensors > $W/checksums-$(basename $(dirname $r)).txt)
done
cd $W && tar -czf $OUT/$1.tar.gz --exclude='*.safetensors' --exclude='*.pt' \
  $(ls -d ablate eval speed profile checksums-*.txt regen_sha256.txt 2> /dev/null) -C / tmp/chain.log
ls -la $OUT; tar -tzf $OUT/$1.tar.gz | wc -l
