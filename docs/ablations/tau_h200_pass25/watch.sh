#!/bin/bash
# Follow pass 25's chain for S seconds (default 540), every 20 s; stops when it is done.
end=$((SECONDS + ${1:-540}))
while :; do
  echo "== $(date +%T) $(grep '^### ' /tmp/chain.log | tail -n 1)"
  ls /tmp/p25/regen[0-9]*.jsonl > /dev/null 2>&1 && echo "regen: $(cat /tmp/p25/regen[0-9]*.jsonl | wc -l) written"
  tail -n 1 /tmp/p25/ablate/layers5/metrics.jsonl 2>/dev/null | cut -c1-200
  for f in /tmp/p25/eval/*.log; do
    [ -f "$f" ] && echo "$(basename $f): $(tail -c 300 $f | tr '\r' '\n' | grep -v '^$' | tail -n 1 | cut -c1-160)"
  done
  grep -q 'chain done\|chain: .*failed\|no summary' /tmp/chain.log && { tail -n 5 /tmp/chain.log; break; }
  [ $SECONDS -ge $end ] && { echo "still running"; break; }
  sleep 20
done
