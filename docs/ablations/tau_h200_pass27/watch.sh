#!/bin/bash
# Follow pass 27's chain for S seconds (default 540), every 20 s; stops when it is done, or when
# the chain's log has $2.
end=$((SECONDS + ${1:-540}))
while :; do
  echo "== $(date +%T) $(grep '^### ' /tmp/chain.log | tail -n 1)"
  for r in layers3 mla; do
    m=/tmp/p27/ablate/$r/metrics.jsonl
    [ -f $m ] && python3 -c "
import json, statistics, sys
rows = [json.loads(l) for l in open('$m') if '\"step_s\"' in l]
if rows:
    last = [r['step_s'] for r in rows[-100:]]
    print('$r: step', rows[-1]['step'], 'median step_s (last 100)', round(statistics.median(last), 4),
          'sim_tau', round(rows[-1].get('sim_tau', 0), 3))
"
  done
  for f in /tmp/p27/eval/*.log /tmp/p27/speed/*.log /tmp/p27/profile/*.log; do
    [ -f "$f" ] && echo "$(basename $f): $(tail -c 300 $f | tr '\r' '\n' | grep -v '^$' | tail -n 1 | cut -c1-160)"
  done
  grep -q 'chain done\|chain: .*failed\|not pass 25' /tmp/chain.log && { tail -n 5 /tmp/chain.log; break; }
  [ -n "${2:-}" ] && grep -q "$2" /tmp/chain.log && { echo "reached: $2"; break; }
  [ $SECONDS -ge $end ] && { echo "still running"; break; }
  sleep 20
done
