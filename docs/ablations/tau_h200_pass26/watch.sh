#!/bin/bash
# Follow pass 26's chain for S seconds (default 540), every 20 s; stops when it is done.
end=$((SECONDS + ${1:-540}))
while :; do
  echo "== $(date +%T) $(grep '^### ' /tmp/chain.log | tail -n 1)"
  ls /tmp/p26/regen[0-9]*.jsonl > /dev/null 2>&1 && echo "regen: $(cat /tmp/p26/regen[0-9]*.jsonl | wc -l) written"
  grep '^### ' /tmp/p26/pipeline.log 2>/dev/null | tail -n 1
  tail -n 1 /tmp/p26/runs/dspark/metrics.jsonl 2>/dev/null | cut -c1-160
  for f in /tmp/p26/eval/*.log /tmp/p26/speed/*.log; do
    [ -f "$f" ] && echo "$(basename $f): $(tail -c 300 $f | tr '\r' '\n' | grep -v '^$' | tail -n 1 | cut -c1-160)"
  done
  grep -q 'chain done\|chain: .*failed\|chain: no \|not pass 25' /tmp/chain.log && { tail -n 5 /tmp/chain.log; break; }
  [ -n "${2:-}" ] && grep -q "$2" /tmp/chain.log && { echo "reached: $2"; break; }
  [ $SECONDS -ge $end ] && { echo "still running"; break; }
  sleep 20
done
