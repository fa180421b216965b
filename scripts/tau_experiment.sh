#!/usr/bin/env bash
# Issue 13's equal-budget experiment on one machine (docs/ablations/tau_h200.md), in phases so
# each fits one device call:
#
#   bash scripts/tau_experiment.sh regen        # the target's answers, once (a process per GPU;
#   bash scripts/tau_experiment.sh wait regen S #   background; a file too short for SAMPLES,
#                                               #   e.g. from data-in, is extended)
#   bash scripts/tau_experiment.sh train        # DSpark, DFlash, EAGLE-3 on them (background)
#   bash scripts/tau_experiment.sh wait runs S  # until the three runs end, or S seconds
#   bash scripts/tau_experiment.sh eval         # tau by benchmark, greedy and T=1, and DSpark's
#   bash scripts/tau_experiment.sh wait eval S  #   budget curve (background; reports as done)
#   bash scripts/tau_experiment.sh ablate       # DSpark's ablations on the same file (background)
#   bash scripts/tau_experiment.sh wait ablate S
#   bash scripts/tau_experiment.sh eval-ablate  # the baseline and each ablation job, greedy,
#   bash scripts/tau_experiment.sh wait eval-ablate S  # each as soon as its run has ended
#   bash scripts/tau_experiment.sh report-ablate DIR  # serving.ablation_report, one per axis
#   bash scripts/tau_experiment.sh taus         # the tau of every report written so far
#   bash scripts/tau_experiment.sh sps          # the target's verify steps/s by width (idle GPU)
#   bash scripts/tau_experiment.sh speed        # single-stream speedups; STS, SPS, schedulers
#   bash scripts/tau_experiment.sh pack OUT     # export DSpark, checksums, results archive
#   bash scripts/tau_experiment.sh snap OUT     # the small results so far (no weights)
#   bash scripts/tau_experiment.sh data-out OUT # the regenerated file, gzipped in parts of 15 MB
#   bash scripts/tau_experiment.sh data-in DIR  #   (what a device call brings back), and back
#                                               #   into W/regen.jsonl, which `regen` keeps or extends
#
#   bash scripts/tau_experiment.sh pipeline     # all of the above in one background job, in
#   bash scripts/tau_experiment.sh follow S     #   order of worth (below); follow polls it
#
# pipeline: the SPS table on idle GPUs, regen, the main runs, speed (the GPUs idle again), the
# main evaluation with the budget curve, the ablations with their evaluations (each run's as
# soon as it ends, beside the next run's training), report-ablate, pack
# into $W/pack. What is cut short by the device's time is what matters least; `pack` run by
# hand packs whatever exists, and `follow S OUT` leaves the small results so far in OUT (`snap`).
# GPUS: run k (of RUNS, or of ABL in ABLATIONS' order) trains on GPU k mod GPUS, its target and
# its trainer both there; a GPU's runs go one after another, or LANES of them at once (lane
# k mod (GPUS * LANES)). A run's own target costs its
# trainer nothing measurable over 5,000 samples (0.21-0.23 s/step on one H200, pass 5, as with a
# GPU per trainer on an x4; longer runs slowed down, likely from pass 8's credit bug), while two
# runs on a GPU are time-sliced (three runs on two GPUs: 0.63-0.69 s/step, pass 3). The main
# evaluations, then the budget curve, run one at a time in the order given, each over all GPUs
# (PROCS processes): the one that matters most is done first; so do the ablations' evaluations
# (ABL_PROCS processes).
# Background phases run under setsid (they outlive the call that started them while the machine
# stays warm: keep calls back to back, an idle machine is released after ~30 s); `wait` polls
# them. `pipeline` runs from a copy of the code in W/src: each device call replaces the
# checkout's files, and a process that starts then (a run, an evaluation) can find a module
# missing (pass 21); the shared data are read where they are (SPLITSERVE_SHARED_DATA).
# Measured on two H200s (docs/ablations/tau_h200.md): regen 90-96 samples/s per GPU;
# training ~76 samples/s over the two GPUs whether 3 or 10 runs share them (time-sliced: three
# runs of 750 steps take ~9.5 min, ten 2.2 s/step); a trainer with a GPU of its own 0.21-0.23
# s/step (pass 4, four H200s; 0.24-0.26 s for 16,000-sample runs on one H200, pass 6);
# evaluation at batch 1 ~2.0-2.2 answers/s with 2 processes on one H200 (pass 5), at BATCH=32
# 21-40 answers/s with one process (pass 6: the six main evaluations and the curve in 240 s);
# speed ~130-150 s. Each serving.evaluate call also spends ~17 s starting (pass 5).
#
# Every draft sees the same samples: the data are regenerated once by `splitserve.regenerate`
# with the recipe's target settings (+recipe=smol_gpu: three sampling settings, answers up to
# 512 tokens, sequences up to 1,024) and every run trains on that file with
# target.regenerate=false (its target only prefills, to capture hidden states).
# Environment: W (work dir), SAMPLES (the budget), GPUS, LANES, PROCS (decoding processes per
# evaluation), BATCH (requests each of them decodes at once; tau and acceptance are batch 1's,
# in bf16 up to rounding; the timed `speed` runs stay at batch 1), LIMIT (items per benchmark),
# CURVE_LIMIT, TOKENS (new tokens per answer),
# SPEED_LIMIT (GSM8K items of each timed single-stream run), SPEED_FLAGS (their runtime flags),
# EVAL_JOBS (the main evaluations, draft-tT, run in that order; default: T=1 of each of RUNS,
# then greedy; "" for none), RUNS
# (the main runs `train` starts), ABLATE and SPEED (0: the pipeline skips the ablations / the
# SPS table and the speed phase), CURVE (0:
# no budget curve), ABL (the ablations `ablate` runs), ABL_LIMIT and ABL_PROCS (items and
# processes of each ablation evaluation), STEPS (a run's steps; default SAMPLES / MICRO: more
# walk the file, which holds SAMPLES, more than once), EXTRA (overrides added to every command,
# e.g. to shrink it on CPU; a path in it must be absolute: the pipeline runs from W/src;
# regeneration gets it too, so `regen` refuses to extend a file when it sets data.shuffle_seed),
# REGEN_EXTRA (to regeneration only, e.g. a smaller prompt pool), BASE (report-ablate's
# baseline; default W/runs/dspark), POLL (seconds between `wait`'s and `follow`'s looks;
# default 30). W and BASE may be relative to the checkout; they are made absolute.
set -euo pipefail
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."
W=$(realpath -m "${W:-/tmp/tau}")  # absolute: the pipeline's phases run from W/src
[ -z "${BASE:-}" ] || BASE=$(realpath -m "$BASE")
SAMPLES=${SAMPLES:-16000}
MICRO=${MICRO:-16}
GPUS=${GPUS:-2}
LANES=${LANES:-1}  # runs training at once on each GPU (time-sliced: two on one H200 were no
#   faster than one after the other, pass 27)
BATCH=${BATCH:-32}  # requests each decoding process decodes at once (serving.batch_decoder)
PROCS=${PROCS:-$GPUS}  # decoding processes per evaluation (GPUs round-robin)
LIMIT=${LIMIT:-200}  # GSM8K 200 of its test set, MT-Bench all 80, HumanEval all 164
TOKENS=${TOKENS:-128}
CURVE_LIMIT=${CURVE_LIMIT:-100}  # GSM8K items per earlier DSpark checkpoint
ABL_LIMIT=${ABL_LIMIT:-40}  # GSM8K and MT-Bench items per ablation job
ABL_PROCS=${ABL_PROCS:-$GPUS}  # decoding processes per ablation evaluation
SPEED_LIMIT=${SPEED_LIMIT:-25}
# the timed runs' runtime flags (serving.evaluate, serving.profile_sps): graphs of compiled code,
# as every batch-1 figure of the table since pass 13 was timed ("" for plain graphs)
SPEED_FLAGS=${SPEED_FLAGS---compile}
ABLATE=${ABLATE:-1}  # 0: the pipeline leaves the ablations out
SPEED=${SPEED:-1}    # 0: the pipeline leaves the speed phase out
RUNS=${RUNS-dspark dflash eagle3}  # the main runs `train` starts (dspark is the ablations' baseline;
#   RUNS="": none, e.g. ablations compared with an earlier pass's baseline, BASE below)
# the main evaluations in order of worth: T=1 of every run (the goal's macro tau), then greedy
EVAL_JOBS=${EVAL_JOBS-$(for t in 1 0; do for r in $RUNS; do printf '%s ' "$r-t$t"; done; done)}
CURVE=${CURVE:-1}    # 0: `eval` leaves out DSpark's budget curve
ABL=${ABL:-rope_partial rope_interleaved mla layers1 layers2 layers3 block16}  # `ablate` runs these
EVAL_HELD=${EVAL_HELD:-64}  # prompts held out of training (data.hold_out=prompts: every row of
#   them, about one per sampling setting on a file past one walk of the prompt pool; the
#   12 % margin below covers them): its eval, and STS fit/test prompts. A run compared with a
#   draft trained before 2026-12-04 (rows) takes EXTRA=data.hold_out=rows, and so does
#   extending a file written then: regenerate --extends refuses another prompt order
EXTRA=${EXTRA:-}
REGEN_EXTRA=${REGEN_EXTRA:-}
POLL=${POLL:-30}
STEPS=${STEPS:-$((SAMPLES / MICRO))}  # a run's steps; more than SAMPLES / MICRO walks its file again
# regenerate leaves out samples whose prompt is longer than data.max_prompt_tokens (1,348 of
# the first 16,032 of +recipe=smol_gpu's stream, 8.4 %): ask for 12 % more than a run takes
NEED=$((SAMPLES + EVAL_HELD))  # the samples a run takes (its budget and the held-out ones)
REGEN_SAMPLES=${REGEN_SAMPLES:-$((NEED * 112 / 100))}
PY=${PY:-python}
mkdir -p "$W"
[[ $GPUS =~ ^[1-9][0-9]*$ ]] || { echo "error: GPUS=$GPUS: a positive number of GPUs"; exit 1; }
[[ $LANES =~ ^[1-9][0-9]*$ ]] || { echo "error: LANES=$LANES: a positive number of runs per GPU"; exit 1; }
NLANES=$((GPUS * LANES))  # run k trains in lane k mod NLANES, on GPU k mod GPUS
[[ $PROCS =~ ^[1-9][0-9]*$ ]] || { echo "error: PROCS=$PROCS: a positive number"; exit 1; }
[[ $BATCH =~ ^[1-9][0-9]*$ ]] || { echo "error: BATCH=$BATCH: a positive number"; exit 1; }
[[ $STEPS =~ ^[1-9][0-9]*$ ]] || { echo "error: STEPS=$STEPS: a positive number of steps"; exit 1; }
[[ $POLL =~ ^[1-9][0-9]*$ ]] || { echo "error: POLL=$POLL: a positive number of seconds"; exit 1; }

running() {  # pid file: its process is alive
  [ -f "$1" ] && kill -0 "$(cat "$1")" 2> /dev/null
}

waitall() {  # wait for every pid given; fail if any failed
  local rc=0
  for p in "$@"; do wait "$p" || rc=1; done
  return $rc
}

common=(+recipe=smol_gpu target.regenerate=false
  "data.sources=[{kind:jsonl_chat,path:$W/regen.jsonl,limit:null,weight:1}]"
  data.eval_prompts=$EVAL_HELD train.micro_batch=$MICRO train.steps=$STEPS
  train.warmup_steps=$((STEPS * 4 / 100)) train.checkpoint_every=$(((STEPS + 3) / 4))
  train.eval_every=$(((STEPS + 3) / 4)) train.keep_checkpoints=4 split.target_procs=1
  split.trainer_procs=1 log.wandb_mode=disabled log.progress=false $EXTRA)
# name:overrides of each ablation job (the baseline's value of the axis is in the comment)
ABLATIONS=(rope_partial:draft.rope=partial rope_interleaved:draft.rope=interleaved  # full
  mla:draft.attention=ling3_mla                                                   # qwen3
  layers1:draft.num_layers=1 layers2:draft.num_layers=2 layers3:draft.num_layers=3 # 5
  block16:draft.block_size=16)                                                    # 7

detach() {  # name (W/name.log and W/name.pid), then a subcommand of this script: run it under
  # setsid in the background (it outlives the calling device command), its pid kept for `wait`
  local name=$1
  shift
  setsid nohup bash "$SELF" "$@" > "$W/$name.log" 2>&1 &
  echo $! > "$W/$name.pid"
}

snapshot() {  # DIR: a copy of this checkout's code for a background job (no git, docs, tests,
  # local data or bundles; nor W, if it lies inside the checkout)
  local dir=$1 rel
  local skip=(--exclude=./.git --exclude=./.gpu --exclude=./.data --exclude=./.venv
    --exclude=./docs --exclude=./tests)
  rel=$(realpath -m --relative-to=. "$W")
  [ "$rel" != . ] || { echo "error: W=$W is the checkout itself; give it a folder of its own"; exit 1; }
  [[ $rel == ..* || $rel == /* ]] || skip+=("--exclude=./$rel")
  rm -rf "$dir.partial"
  mkdir -p "$dir.partial"
  tar -cf - "${skip[@]}" . | tar -xf - -C "$dir.partial"
  rm -rf "$dir"
  mv "$dir.partial" "$dir"
}

evaluate_one() {  # log name (W/name.log), then serving.evaluate's flags: one evaluation, in the
  # foreground (the chains run them one after another); a failure is logged, the chain goes on
  local name=$1
  shift
  echo "### $(date +%T) $name"
  $PY -m serving.evaluate --no-baseline --no-plot --max-new-tokens $TOKENS --batch $BATCH "$@" \
    > "$W/$name.log" 2>&1 || echo "### $(date +%T) $name failed"
}

launch() {  # group, name, GPU, port base, overrides: a run on one GPU, in the background
  local group=$1 name=$2 gpu=$3 port=$4
  shift 4
  CUDA_VISIBLE_DEVICES=$gpu setsid nohup $PY -m splitserve.train "${common[@]}" "$@" \
    split.master_port=$port hydra.run.dir="$W/$group/$name" > "$W/$group/$name.log" 2>&1 &
  echo $! > "$W/$group/$name.pid"
}

jobs_of() {  # runs | ablate: the group's runs, one "name|port|overrides" line each, in order
  local k=0 job
  case $1 in
  runs)
    for r in $RUNS; do
      case $r in
      dspark) echo "dspark|29500|" ;;
      dflash) echo "dflash|29510|draft=dflash" ;;  # the recipe's depth: 5 since pass 26 (the
        # table's DFlash, passes 21-22, has 3: RUNS=dflash EXTRA=draft.num_layers=3 trains it)
      eagle3) echo "eagle3|29520|draft=eagle3 draft.num_layers=1" ;;
      esac
    done
    ;;
  ablate)
    for job in "${ABLATIONS[@]}"; do
      [[ " $ABL " == *" ${job%%:*} "* ]] || continue
      echo "${job%%:*}|$((29600 + 10 * k))|${job#*:}"
      k=$((k + 1))
    done
    ;;
  esac
}

check_abl() {  # every name in ABL is an ablation (jobs_of would drop an unknown one silently)
  local name
  for name in $ABL; do
    [ "$name" != layers5 ] || {  # passes 24 and 25's job, over the 3-layer default of then
      echo "error: ABL: layers5 is the baseline since +recipe=smol_gpu trains 5 layers (pass 26): runs/dspark, or BASE=DIR; layers3 trains the former default"
      exit 1
    }
    [[ " ${ABLATIONS[*]%%:*} " == *" $name "* ]] ||
      { echo "error: ABL: unknown ablation $name (allowed: ${ABLATIONS[*]%%:*})"; exit 1; }
  done
}

start_lanes() {  # runs | ablate: LANES background lanes per GPU, as many as there are runs
  local group=$1 n l
  mkdir -p "$W/$group"
  n=$(jobs_of "$group" | wc -l)
  for l in $(seq 0 $((NLANES - 1))); do
    [ "$l" -lt "$n" ] || break
    detach "$group/lane$l" lane "$group" "$l"
  done
  echo "started: $n runs of $STEPS steps x $MICRO samples on $((n < GPUS ? n : GPUS)) GPUs" \
    "(run k in lane k mod $NLANES, on GPU k mod $GPUS; a lane's runs one after another)"
}

case "${1:-}" in
regen)  # in the background: `wait regen S` polls it
  mkdir -p "$W/regen"
  export REGEN_START=0
  if [ -f "$W/regen.jsonl" ]; then  # e.g. brought from an earlier session with data-in
    n=$(wc -l < "$W/regen.jsonl")
    if [ "$n" -ge "$NEED" ]; then
      echo "kept: $W/regen.jsonl exists ($n samples), not regenerated"
      exit 0
    fi
    # short for this budget: extend it from its last sample id on (the static backend is
    # batch-invariant, so the result is the file a whole regeneration writes; in bf16 on a
    # GPU, not bit for bit: splitserve/regenerate.py)
    last=$(tail -n 1 "$W/regen.jsonl" | { grep -o '"g": [0-9]*' || true; } | tail -n 1 | cut -d' ' -f2)
    [ -n "$last" ] || { echo "error: the last line of $W/regen.jsonl has no sample id g"; exit 1; }
    REGEN_START=$((last + 1))
    if [ "$REGEN_START" -ge "$REGEN_SAMPLES" ]; then
      echo "warning: a run takes $NEED samples (SAMPLES + EVAL_HELD); $W/regen.jsonl has $n, ids up to $((REGEN_START - 1)) >= REGEN_SAMPLES=$REGEN_SAMPLES: kept as it is"
      exit 0
    fi
    # the prompt stream's order is data.shuffle_seed's: ids from REGEN_START on in another
    # order would repeat prompts the file has (a seed meant for training: pass 25's Next;
    # also as +/++ overrides)
    if [[ " $EXTRA $REGEN_EXTRA " =~ [[:space:]+]data\.shuffle_seed= ]]; then
      echo "error: EXTRA or REGEN_EXTRA sets data.shuffle_seed: extending $W/regen.jsonl would draw ids $REGEN_START.. in another prompt order and repeat its prompts; extend it without it (regen, wait regen), then train with it"
      exit 1
    fi
    echo "extending: $W/regen.jsonl has $n samples, ids 0..$((REGEN_START - 1)); it must come from the same overrides (regenerate --extends checks its prompts)"
  fi
  stale=("$W"/regen[0-9]*.jsonl*)  # shards of a regeneration that failed: out of the merge
  if [ -e "${stale[0]}" ]; then
    mkdir -p "$W/regen/stale-$$"
    mv "${stale[@]}" "$W/regen/stale-$$/"
    echo "moved aside: ${#stale[@]} shard files of an earlier regeneration -> $W/regen/stale-$$"
  fi
  detach regen/regen regen-fg
  echo "started: samples $REGEN_START..$((REGEN_SAMPLES - 1)) over $GPUS GPUs"
  ;;
regen-fg)
  pids=()
  extends=()  # an extension: regenerate checks the file came from this prompt stream
  [ "${REGEN_START:-0}" -eq 0 ] || extends=(--extends "$W/regen.jsonl")
  for k in $(seq 0 $((GPUS - 1))); do
    CUDA_VISIBLE_DEVICES=$k $PY -m splitserve.regenerate --out "$W/regen$k.jsonl" \
      --samples $REGEN_SAMPLES --start "${REGEN_START:-0}" ${extends[@]+"${extends[@]}"} \
      --shard "$k/$GPUS" +recipe=smol_gpu $EXTRA $REGEN_EXTRA > "$W/regen$k.log" 2>&1 &
    pids+=($!)
  done
  waitall "${pids[@]}" || { tail -n 20 "$W"/regen[0-9]*.log; exit 1; }
  # one file in sample-id order (an extended file's lines first): the last lines, whose
  # EVAL_HELD prompts training holds out (with every row of them), are the highest ids
  $PY -c "import json, sys; rows = [x.rstrip('\n') + '\n' for f in sys.argv[1:] for x in open(f)]
rows.sort(key=lambda x: json.loads(x)['g']); sys.stdout.writelines(rows)" \
    $(ls "$W/regen.jsonl" 2> /dev/null) "$W"/regen[0-9]*.jsonl > "$W/regen.jsonl.partial"
  mv "$W/regen.jsonl.partial" "$W/regen.jsonl"
  rm -f "$W"/regen[0-9]*.jsonl  # merged
  # to check a later regeneration's file against this one (the same code writes the same file)
  (cd "$W" && sha256sum regen.jsonl) > "$W/regen_sha256.txt"
  tail -q -n 1 "$W"/regen[0-9]*.log
  wc -l "$W/regen.jsonl"
  ;;
train)
  [ -f "$W/regen.jsonl" ] || { echo "error: $W/regen.jsonl is missing (run regen first)"; exit 1; }
  ! running "$W/regen/regen.pid" || { echo "error: regeneration is still running (wait regen)"; exit 1; }
  n=$(wc -l < "$W/regen.jsonl")
  # fewer would repeat samples: the run's stream wraps around its file (under
  # data.hold_out=prompts the held-out prompts' other rows leave training too, about one per
  # walk of the prompt pool: regen's 12 % margin holds them, a file cut to NEED may not)
  [ "$n" -ge "$NEED" ] || {
    echo "error: $W/regen.jsonl has $n samples; a run takes $NEED (SAMPLES + EVAL_HELD): run regen to extend it"
    exit 1
  }
  mkdir -p "$W/runs"
  for r in $RUNS; do
    [[ " dspark dflash eagle3 " == *" $r "* ]] ||
      { echo "error: RUNS: unknown run $r (allowed: dspark dflash eagle3)"; exit 1; }
  done
  start_lanes runs
  ;;
lane)  # group, lane l: the group's runs k = l, l + NLANES, ... one after another on
  # GPU l mod GPUS (with LANES=1, lane l is GPU l)
  group=${2:?lane needs a group} l=${3:?lane needs a lane number}
  gpu=$((l % GPUS))
  mapfile -t jobs < <(jobs_of "$group")
  for k in "${!jobs[@]}"; do
    [ $((k % NLANES)) = "$l" ] || continue
    IFS='|' read -r name port overrides <<< "${jobs[$k]}"
    echo "### $(date +%T) $name on GPU $gpu"
    launch "$group" "$name" "$gpu" "$port" $overrides
    wait "$(cat "$W/$group/$name.pid")" || echo "### $(date +%T) $name failed"
  done
  ;;
ablate)
  # the issue's DSpark ablations on the same file and budget, one axis changed per job; the
  # main DSpark run (runs/dspark: rope full, qwen3 attention, 5 layers, block 7) is the baseline
  check_abl
  start_lanes ablate
  ;;
wait)
  group=${2:?wait needs a group: regen, runs, ablate, eval or eval-ablate}
  end=$((SECONDS + ${3:-540}))
  while :; do
    alive=0
    for f in "$W/$group"/*.pid; do
      running "$f" && alive=$((alive + 1))
    done
    if [ "$group" = regen ] && [ "$alive" != 0 ]; then
      echo "$(date +%T) $(cat "$W"/regen[0-9]*.jsonl* 2> /dev/null | wc -l) samples written"
    elif [ "$group" = regen ]; then
      echo "$(date +%T) $(wc -l < "$W/regen.jsonl" 2> /dev/null || echo 0) samples in regen.jsonl"
    elif [ "$group" = runs ] || [ "$group" = ablate ]; then
      for f in "$W/$group"/*.pid; do
        d=$(basename "$f" .pid)
        [[ $d == lane* ]] && continue  # a GPU's chain of runs, not a run
        last=$(tail -n 1 "$W/$group/$d/metrics.jsonl" 2> /dev/null | cut -c1-120 || true)
        echo "$(date +%T) $d: $last"
      done
    else
      n=$( (find "$W/eval" "$W/runs" "$W/ablate" -path '*/eval*/*.json' 2> /dev/null || true) | wc -l)
      echo "$(date +%T) $n reports written (all evaluations), $alive running"
    fi
    [ "$alive" = 0 ] && break
    [ $SECONDS -ge $end ] && { echo "still running: $alive"; exit 0; }
    sleep "$POLL"
  done
  for f in "$W/$group"/*.log; do
    [ -f "$f" ] || continue  # none: e.g. regen kept a file brought by data-in
    echo "== $f"
    tail -n 4 "$f" | cut -c1-400
  done
  ;;
eval)
  mkdir -p "$W/eval"
  for job in $EVAL_JOBS; do  # draft-tT
    [[ $job =~ ^(dspark|dflash|eagle3)-t[0-9.]+$ ]] ||
      { echo "error: EVAL_JOBS: $job is not <dspark|dflash|eagle3>-t<temperature>"; exit 1; }
  done
  detach eval/chain eval-fg
  echo "started: the evaluations one after another ($EVAL_JOBS, then the budget curve)"
  ;;
eval-fg)  # `eval`'s chain: each main evaluation over all GPUs, then DSpark's budget curve
  for job in $EVAL_JOBS; do
    evaluate_one "eval/$job" --out "$W/eval/$job" --checkpoint "$W/runs/${job%-t*}" \
      --temperature ${job##*-t} --bench gsm8k,mtbench,humaneval --limit $LIMIT --procs $PROCS
  done
  # the budget curve: DSpark's earlier checkpoints on GSM8K, greedy (the last one is dspark-t0)
  ckpts=("$W"/runs/dspark/checkpoints/step-*)
  [ "$CURVE" = 1 ] || ckpts=()
  for c in "${ckpts[@]:0:${#ckpts[@]}-1}"; do
    name=curve-$(basename "$c")
    evaluate_one "eval/$name" --out "$W/eval/$name" --checkpoint "$c" --bench gsm8k \
      --limit $CURVE_LIMIT --procs $PROCS
  done
  ;;
eval-ablate)
  # every ablation job and the baseline, greedy, GSM8K and MT-Bench, into each run's own
  # eval/step-N-t0 (what serving.ablation_report reads)
  check_abl
  mkdir -p "$W/eval-ablate"
  detach eval-ablate/chain eval-ablate-fg
  echo "started: the baseline's and every ablation's evaluation, one after another"
  ;;
eval-ablate-fg)  # `eval-ablate`'s chain, each over ABL_PROCS processes, one at a time: the
  # first run to have ended, in the order the lanes train them (ABLATIONS', whatever ABL's:
  # pass 16's ABL put mla first, which trained last, and the chain waited for it before
  # evaluating the two runs that had ended), so with GPUS > 1 a run that ends on one GPU is
  # not held behind one still training on another: a run still training is waited for, even
  # when its lane is gone (its evaluation then runs beside the next run's training, on the
  # same GPU); a run that ended without a summary (failed), or that no lane will start, is
  # skipped
  lanes_alive() {
    local f
    for f in "$W"/runs/lane*.pid "$W"/ablate/lane*.pid; do
      running "$f" && return 0
    done
    return 1
  }
  ended() {  # run dir: its process was started and has exited (with or without a summary)
    [ -f "$1.pid" ] && ! running "$1.pid"
  }
  # the baseline first, when this pipeline trains it (RUNS="": an earlier pass's, BASE)
  chain=()
  [[ " $RUNS " != *" dspark "* ]] || chain+=("$W/runs/dspark")
  for n in $(jobs_of ablate | cut -d'|' -f1); do chain+=("$W/ablate/$n"); done
  pending=("${chain[@]}")
  while [ ${#pending[@]} -gt 0 ]; do
    # a run's own process is what is waited for: pass 14 stopped the lane (so that no further
    # run would start) while layers1 trained, and its evaluation was skipped
    pick=-1
    for i in "${!pending[@]}"; do
      run=${pending[$i]}
      if [ -f "$run/summary.json" ] || ended "$run" ||
        { ! running "$run.pid" && ! lanes_alive; }; then
        pick=$i
        break
      fi
    done
    [ $pick -ge 0 ] || { sleep 5; continue; }
    run=${pending[$pick]}
    pending=("${pending[@]:0:pick}" "${pending[@]:pick+1}")
    [ -f "$run/summary.json" ] || { echo "### $(date +%T) $run: no summary, skipped"; continue; }
    evaluate_one "eval-ablate/$(basename "$run")" --checkpoint "$run" --bench gsm8k,mtbench \
      --limit $ABL_LIMIT --procs $ABL_PROCS
  done
  ;;
report-ablate)
  out=${2:?report-ablate needs an output directory}
  mkdir -p "$out"
  # BASE: the baseline's run dir, or its results copied from an earlier pass (overrides and
  # evaluations, e.g. docs/ablations/tau_h200_pass14/runs/dspark)
  base=${BASE:-$W/runs/dspark}
  a="$W/ablate"
  axis() {  # report name, then the axis' run dirs in table order: those that ran (an ablation
    # run in a later session, ABL, is left out); an axis with no ablation run is skipped
    local name=$1 d ran=()
    shift
    for d in "$@"; do [ -d "$d" ] && ran+=("$d"); done
    if [ "${#ran[@]}" -lt 2 ]; then echo "report-ablate: $name: no ablation run, skipped"; return 0; fi
    # one axis failing (e.g. a run that saved nothing) leaves the others' reports
    $PY -m serving.ablation_report "${ran[@]}" --out "$out/$name" ||
      echo "report-ablate: $name failed"
  }
  [ -d "$base" ] || { echo "error: $base is missing: the baseline did not run (RUNS=dspark, or BASE=DIR)"; exit 1; }
  axis rope_h200 "$base" "$a/rope_partial" "$a/rope_interleaved"
  axis attention_h200 "$base" "$a/mla"
  axis layers_h200 "$a/layers1" "$a/layers2" "$a/layers3" "$base"
  axis block_h200 "$base" "$a/block16"
  ;;
taus)
  for f in "$W"/eval/*/*.json "$W"/speed/*/*.json; do
    [ -f "$f" ] || continue
    $PY -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[1], round(r['tau'],3), r['turns'], r.get('speedup'))" "$f"
  done
  ;;
speed)
  mkdir -p "$W/speed"
  one() {  # name, GPU, extra flags: serving.evaluate alone on that GPU, with target-only
    CUDA_VISIBLE_DEVICES=$2 $PY -m serving.evaluate --checkpoint "$W/runs/$3" --bench gsm8k \
      --limit $SPEED_LIMIT --max-new-tokens $TOKENS --no-plot --out "$W/speed/$1" $SPEED_FLAGS "${@:4}" \
      > "$W/speed/$1.log" 2>&1
  }
  failed() { tail -n 20 "$W"/speed/*.log; exit 1; }
  # DSpark's calibration on the last GPU beside the first fixed runs, then the rest of the main
  # runs' fixed schedules: one process per GPU at a time
  CUDA_VISIBLE_DEVICES=$((GPUS - 1)) $PY -m serving.calibrate --checkpoint "$W/runs/dspark" \
    --out "$W/speed/sts.json" --report "$W/speed/sts_report.json" --max-new-tokens $TOKENS \
    > "$W/speed/calibrate.log" 2>&1 &
  pids=($!) g=0 free=$((GPUS - 1))  # GPUs 0 .. free-1 take this round's fixed runs
  for run in $RUNS; do
    if [ $g = $free ]; then waitall "${pids[@]}" || failed; pids=() g=0 free=$GPUS; fi
    one "$run-fixed" $g "$run" &
    pids+=($!) g=$((g + 1))
  done
  waitall "${pids[@]}" || failed
  [ -f "$W/speed/sps_verify.json" ] || bash "$SELF" sps || failed
  # the prefix scheduler's table: whole decode steps of this draft by verify width (the target's
  # verify alone is a fraction of a step here; see serving/profile_sps.py)
  CUDA_VISIBLE_DEVICES=0 $PY -m serving.profile_sps --checkpoint "$W/runs/dspark" $SPEED_FLAGS \
    --out "$W/speed/sps.json" > "$W/speed/profile_sps_steps.log" 2>&1 || failed
  one dspark-threshold 0 dspark --scheduler threshold --sts "$W/speed/sts.json" & a=$!
  [ "$GPUS" -gt 1 ] || { waitall $a || failed; }  # one GPU: timed runs one at a time
  one dspark-prefix $((1 % GPUS)) dspark --scheduler prefix --sps "$W/speed/sps.json" \
    --sts "$W/speed/sts.json" & b=$!
  waitall $a $b || failed
  cat "$W/speed/calibrate.log" "$W/speed/profile_sps.log" "$W/speed/profile_sps_steps.log"
  ;;
sps)  # the target's verify step rate by width on an idle GPU (SGLang's kind of table)
  mkdir -p "$W/speed"
  CUDA_VISIBLE_DEVICES=0 $PY -m serving.profile_sps --out "$W/speed/sps_verify.json" $SPEED_FLAGS \
    > "$W/speed/profile_sps.log" 2>&1
  ;;
pipeline)
  running "$W/pipeline.pid" &&
    { echo "error: a pipeline is running in $W (pid $(cat "$W/pipeline.pid")); follow it"; exit 1; }
  mkdir -p "$W"
  snapshot "$W/src"
  export SPLITSERVE_SHARED_DATA=${SPLITSERVE_SHARED_DATA:-$(cd .. && pwd)/shared/data}
  SELF="$W/src/scripts/tau_experiment.sh" detach pipeline pipeline-fg
  echo "started: the whole experiment ($STEPS steps x $MICRO samples per run, a file of" \
    "$SAMPLES samples); follow it with: follow S"
  ;;
pipeline-fg)
  step() { echo "### $(date +%T) $*"; "$@" || echo "### $(date +%T) failed: $*"; }
  [ "$SPEED" = 1 ] && step bash "$SELF" sps
  step bash "$SELF" regen
  step bash "$SELF" wait regen 3600
  [ -f "$W/regen.jsonl" ] || { echo "error: regeneration wrote no $W/regen.jsonl"; exit 1; }
  echo "### $(date +%T) bash $SELF train"
  bash "$SELF" train || { echo "### $(date +%T) failed: train (nothing trained)"; exit 1; }
  step bash "$SELF" wait runs 7200
  [ "$SPEED" = 1 ] && step bash "$SELF" speed
  if [ -n "${EVAL_JOBS// /}" ] || [ "$CURVE" = 1 ]; then  # else nothing to evaluate (and no
    # 30 s poll of an empty chain: pass 24's two stages each lost one)
    step bash "$SELF" eval
    step bash "$SELF" wait eval 7200
  fi
  if [ "$ABLATE" = 1 ]; then  # last: they matter least
    step bash "$SELF" ablate
    step bash "$SELF" eval-ablate  # each run's evaluation as soon as it ends
    step bash "$SELF" wait ablate 7200
    step bash "$SELF" wait eval-ablate 7200
    step bash "$SELF" report-ablate "$W/ablate-report"
  fi
  mkdir -p "$W/pack"
  step bash "$SELF" pack "$W/pack"
  echo "### $(date +%T) pipeline done"
  ;;
follow)  # print the pipeline's progress every POLL s until it ends or S seconds pass; then, if
  # OUT is given, `snap OUT` (so a machine lost later still leaves the results so far)
  end=$((SECONDS + ${2:-540}))
  while running "$W/pipeline.pid"; do
    { grep '^### ' "$W/pipeline.log" || true; } | tail -n 1  # none yet at the start
    tail -n 2 "$W/pipeline.log" | cut -c1-200
    [ $SECONDS -ge $end ] && { echo "still running"; break; }
    sleep "$POLL"
  done
  running "$W/pipeline.pid" || tail -n 40 "$W/pipeline.log" | cut -c1-300
  [ -z "${3:-}" ] || bash "$SELF" snap "$3"
  ;;
data-out)  # OUT: W/regen.jsonl as OUT/regen.jsonl.gz.partN, each under the 16 MB a device call
  # brings back
  out=${2:?data-out needs an output directory}
  [ -f "$W/regen.jsonl" ] || { echo "error: $W/regen.jsonl is missing"; exit 1; }
  mkdir -p "$out"
  gzip -c "$W/regen.jsonl" | split -b 15m -d -a 1 - "$out/regen.jsonl.gz.part"
  n=$(ls "$out"/regen.jsonl.gz.part* | wc -l)
  [ "$n" -le 8 ] || echo "warning: $n parts; a device call brings back at most 8 files"
  ls -la "$out"/regen.jsonl.gz.part*
  ;;
data-in)  # DIR: the parts data-out wrote -> W/regen.jsonl (refused if one exists)
  src=${2:?data-in needs the directory of the parts}
  [ ! -f "$W/regen.jsonl" ] || { echo "error: $W/regen.jsonl exists; not overwritten"; exit 1; }
  ls "$src"/regen.jsonl.gz.part* > /dev/null || exit 1
  mkdir -p "$W"
  cat "$src"/regen.jsonl.gz.part* | gunzip > "$W/regen.jsonl.partial"
  mv "$W/regen.jsonl.partial" "$W/regen.jsonl"
  echo "data-in: $(wc -l < "$W/regen.jsonl") samples in $W/regen.jsonl"
  ;;
snap)  # OUT: the small results so far (reports, metrics, logs; no weights) as OUT/snap.tar.gz
  out=${2:?snap needs an output directory}
  mkdir -p "$out"
  (cd "$W" && find . -maxdepth 5 \( -name '*.json' -o -name '*.jsonl' -o -name '*.log' \
    -o -name '*.txt' -o -name 'overrides.yaml' \) -size -8M ! -name 'regen*.jsonl' \
    ! -path './export/*' -print0 | tar -czf "$out/snap.tar.gz" --null -T -)
  echo "snap: $(tar -tzf "$out/snap.tar.gz" | wc -l) files, $(du -h "$out/snap.tar.gz" | cut -f1)"
  ;;
pack)
  out=${2:?pack needs an output directory}
  mkdir -p "$out"
  # DSpark's export (SGLang serves DSpark drafts only; the baselines keep their checkpoints)
  if [ -d "$W/runs/dspark" ]; then
    $PY -m serving.export --checkpoint "$W/runs/dspark" --out "$W/export/dspark" \
      --max-shard-mb 15 > "$W/export.log" 2>&1
  else
    echo "no $W/runs/dspark (RUNS without dspark): nothing exported" > "$W/export.log"
  fi
  weights=$(cd "$W" && ls runs/*/checkpoints/step-*/draft/model*.safetensors \
    ablate/*/checkpoints/step-*/draft/model*.safetensors export/dspark/* 2> /dev/null || true)
  (cd "$W" && { [ -z "$weights" ] || sha256sum $weights; } > checksums.txt)
  mkdir -p "$W/speed" "$W/eval"  # pack what exists
  tar -czf "$out/results.tar.gz" -C "$W" checksums.txt eval speed export.log \
    $(cd "$W" && ls runs/*.log runs/*/metrics.jsonl runs/*/.hydra/overrides.yaml regen*.log regen/regen.log regen_sha256.txt 2> /dev/null) \
    $(cd "$W" && ls runs/*/checkpoints/step-*/draft/draft_config.json 2> /dev/null) \
    $(cd "$W" && ls -d runs/dspark/eval ablate/*.log ablate/*/metrics.jsonl ablate/*/eval \
      ablate/*/.hydra/overrides.yaml ablate-report 2> /dev/null)
  [ ! -d "$W/export/dspark" ] || cp "$W"/export/dspark/* "$out/"  # for train.init_from
  ls -la "$out"
  ;;
*)
  sed -n '2,/follow S/p' "$0"
  exit 2
  ;;
esac
