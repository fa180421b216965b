#!/bin/bash
# Follow pass 22's chain for S seconds (default 540): its stage, the latest pipeline line and
# step line of each stage every 30 s; stops early when the chain is done.
end=$((SECONDS + ${1:-540}))
while :; do
  echo "== $(date +%T) $(tail -n 1 /tmp/chain.log)"
  for w in /tmp/e18 /tmp/f18; do
    [ -f $w/pipeline.log ] || continue
    grep '^### ' $w/pipeline.log | tail -n 1
    tail -q -n 1 $w/runs/*/metrics.jsonl 2>/dev/null | cut -c1-170
  done
  grep -q 'chain done' /tmp/chain.log && break
  [ $SECONDS -ge $end ] && { echo "still running"; break; }
  sleep 30
done
