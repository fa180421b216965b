#!/bin/bash
# Follow pass 24's chain for S seconds (default 540), every 30 s: the chain's last line, each
# stage's last pipeline line and metrics line, each timed run's progress; stops when done.
end=$((SECONDS + ${1:-540}))
while :; do
  echo "== $(date +%T) $(tail -n 1 /tmp/chain.log)"
  for w in /tmp/a17 /tmp/a18; do
    [ -f $w/pipeline.log ] || continue
    echo "$w: $(grep '^### ' $w/pipeline.log | tail -n 1)"
    tail -q -n 1 $w/ablate/*/metrics.jsonl 2>/dev/null | cut -c1-170
  done
  for f in /tmp/speed/*.log; do
    [ -f "$f" ] && echo "$(basename $f): $(tail -c 300 $f | tr '\r' '\n' | grep -v '^$' | tail -n 1 | cut -c1-160)"
  done
  grep -q 'chain done\|left no' /tmp/chain.log && break
  [ $SECONDS -ge $end ] && { echo "still running"; break; }
  sleep 30
done
