#!/bin/bash
# Follow pass 23's chain for S seconds (default 540): the chain's last line, each timed run's
# progress and the EAGLE-3 stage's last pipeline and step lines, every 30 s; stops early when
# the chain is done.
end=$((SECONDS + ${1:-540}))
while :; do
  echo "== $(date +%T) $(tail -n 1 /tmp/chain.log)"
  for f in /tmp/speed/*.log; do
    [ -f "$f" ] && echo "$(basename $f): $(tail -c 300 $f | tr '\r' '\n' | grep -v '^$' | tail -n 1 | cut -c1-160)"
  done
  if [ -f /tmp/e206/pipeline.log ]; then
    grep '^### ' /tmp/e206/pipeline.log | tail -n 1
    tail -q -n 1 /tmp/e206/runs/*/metrics.jsonl 2>/dev/null | cut -c1-170
  fi
  grep -q 'chain done' /tmp/chain.log && break
  [ $SECONDS -ge $end ] && { echo "still running"; break; }
  sleep 30
done
