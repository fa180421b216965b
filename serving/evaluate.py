"""Measure what a draft delivers at decode time, against target-only decoding in the same run.

    python -m serving.evaluate --checkpoint RUN/checkpoints/step-N --bench gsm8k,mtbench,humaneval
        [--limit N] [--temperature T] [--max-new-tokens N] [--out DIR] [--no-baseline]
        [--procs N] [--batch N] [decoder flags as serving.generate]

Per benchmark it prints one row of a table (bench, items, tau, acceptance by position, speedup
when timed, identical outputs when checked; `--json`: the object below as one line instead) and
writes one JSON object: tau (mean tokens emitted per decode step, bonus included), conditional
acceptance by draft position (accepted / reached, where a position is reached when it was
verified and every earlier draft was accepted), the fraction of verified
draft tokens that were rejected, mean verify width, step time and tokens/s of speculative and of
target-only decoding (same target, same prompts, same process), and for greedy decoding how many
outputs equal the target-only output; `draft_step_ms` is the median time of one draft proposal;
`per_item` holds each item's emitted tokens and decode steps (for confidence intervals).
`acceptance.png` plots acceptance by position. The default --out is RUN/eval/step-N-tT
(EXPORT-eval/EXPORT-tT beside an exported draft directory or a draft/ folder alone, served with
--target). Each benchmark's JSON is written as soon as it is complete. The first prompt is decoded
once untimed first (CUDA-graph capture, allocations), and every prompt is prefilled untimed before
its timed decoding (first-use costs of its shapes, such as cuDNN's attention plan for a new prompt
length, fall on neither decoder); graphs first needed later (longer contexts, the shorter
verify widths at a request's end) are captured inside the timing, and their capture time is
measured and left out of `wall_s`, `step_ms` and tokens/s (as a server that captured its graphs
at start-up would decode), reported as `capture_s`. `--no-baseline` skips target-only decoding
(tau and acceptance only); `--procs N` decodes the items in N processes at once (GPUs
round-robin) and adds up their sums: tau and acceptance are the same as one process's, speeds
are not single-stream figures; `--batch N` decodes N items at once in each process
(serving.batch_decoder: each row emits what batch 1 would, token for token in exact arithmetic,
so tau and acceptance are batch 1's; in bf16 up to rounding, as any change of batch shape;
speeds are throughputs, `step_ms` is left out and `mean_verify_width` is the batch's one width).
`elapsed_s` and `answers_per_s` say how long the benchmark's decoding took (the slowest process,
warm-up included; start-up and model loading not). A target with random weights (a test mini,
target.kind=ling3_mini) is warned about: a draft's acceptance against it means nothing.
"""

from __future__ import annotations

import json
import os
import queue as queue_module
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from splitserve import checkpoint
from splitserve.target.chat import prompt_ids
from splitserve.target.runtime.graphs import capture_seconds

from . import cli
from .batch_decoder import BatchDecoder
from .benchmarks import load_bench
from .decoder import DecodeResult, SpeculativeDecoder
from .loading import add_decoding_args, add_model_args, decoder_from_args, random_weight_target


@dataclass
class Tally:
    """Running sums over every decode step of one benchmark."""

    gamma: int
    tokens: int = 0
    emitted: int = 0  # tokens emitted by decode steps (all but the prefill's first token)
    steps: int = 0
    wall_s: float = 0.0  # decoding, graph captures left out
    capture_s: float = 0.0  # graph captures inside the timed decoding
    verified: int = 0
    accepted: int = 0
    width_sum: int = 0
    reached: list[int] = field(default_factory=list)
    hits: list[int] = field(default_factory=list)
    # item index -> [tokens emitted by decode steps, decode steps], its turns summed: what a
    # paired bootstrap over items needs (serving/intervals.py)
    per_item: dict[int, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.reached, self.hits = [0] * self.gamma, [0] * self.gamma

    def speed(self) -> dict:
        return {
            "tokens": self.tokens,
            "steps": self.steps,
            "wall_s": self.wall_s,
            "capture_s": self.capture_s,
            "step_ms": 1000 * self.wall_s / max(1, self.steps),
            "tokens_per_s": self.tokens / self.wall_s,
        }

    def merged(self, others) -> Tally:
        """A new Tally holding this one's sums plus the others' (shards of one benchmark)."""
        out = Tally(self.gamma)
        for t in (self, *others):
            for f in ("tokens", "emitted", "steps", "wall_s", "capture_s", "verified", "accepted",
                      "width_sum"):  # fmt: skip
                setattr(out, f, getattr(out, f) + getattr(t, f))
            out.reached = [a + b for a, b in zip(out.reached, t.reached, strict=True)]
            out.hits = [a + b for a, b in zip(out.hits, t.hits, strict=True)]
            for i, (e, n) in t.per_item.items():
                out._add_item(i, e, n)
        return out

    def _add_item(self, item: int, emitted: int, steps: int) -> None:
        mine = self.per_item.setdefault(item, [0, 0])
        mine[0], mine[1] = mine[0] + emitted, mine[1] + steps

    def add(self, res: DecodeResult, wall_s: float, item: int | None = None) -> None:
        self.tokens += len(res.token_ids)
        self.steps += res.steps
        self.emitted += sum(res.accept_lengths)
        if item is not None:
            self._add_item(item, sum(res.accept_lengths), res.steps)
        self.wall_s += wall_s
        self.verified += sum(res.verified)
        self.accepted += sum(res.accepted)
        self.width_sum += sum(res.widths)
        for n_ver, n_acc in zip(res.verified, res.accepted, strict=True):
            for k in range(min(n_ver, n_acc + 1)):
                self.reached[k] += 1
                self.hits[k] += int(k < n_acc)


def _decode(decoder, prompts: list[list[int]], seeds: list[int], args, eos: int):
    """(results, wall seconds, of which capturing graphs) of decoding `prompts` with a batch-1
    decoder (one after another) or a BatchDecoder (R at a time). Each prompt is first prefilled
    untimed (a one-token request): first-use costs of a prompt's shapes in the eager prefill and
    the draft's commit (cuDNN builds an attention plan per new shape) fall outside the timing,
    for either decoder, whichever decodes a prompt first (the target-only decoder met the same
    prompt shapes right after the speculative one, so it alone was timed with them warm). A
    prompt as long as a verify width prefills through that width's graph, so its capture then
    happens there, untimed and outside `capture_s`."""

    def run(tokens: int):
        kw = {"temperature": args.temperature, "eos_token_id": eos}
        if isinstance(decoder, BatchDecoder):
            return decoder.generate(prompts, tokens, seeds=seeds, **kw)
        return [
            decoder.generate(p, tokens, seed=seed, **kw)
            for p, seed in zip(prompts, seeds, strict=True)
        ]

    run(1)  # the prefills, untimed
    sync = decoder.device.type == "cuda"
    if sync:
        torch.cuda.synchronize(decoder.device)
    captured = capture_seconds()
    t0 = time.perf_counter()
    results = run(args.max_new_tokens)
    if sync:
        torch.cuda.synchronize(decoder.device)
    return results, time.perf_counter() - t0, capture_seconds() - captured


def tally_bench(
    decoder: SpeculativeDecoder, tok, items: list[tuple[int, list[str]]], args, desc: str = ""
) -> dict:
    """Decode every (index, item) speculatively and, unless --no-baseline, target-only (item i
    is seeded with --seed + i, so a shard decodes its items as the whole run would), --batch
    items at a time (turn by turn: an answer is in the next turn's prompt). Returns the raw sums
    `report` needs, which add up across shards, and `elapsed_s`: the wall time of the decoding
    (warm-up and target-only decoding included; process start and model loading not)."""
    t0 = time.perf_counter()
    batch = getattr(args, "batch", 1)
    baseline = None
    if not args.no_baseline:
        baseline = SpeculativeDecoder(
            decoder.target,
            None,
            runtime=decoder.runtime,
            max_len=decoder.max_len,
            compile=decoder.compile,  # the baseline runs as the speculative decoder does
        )
    if batch > 1:
        decoder = BatchDecoder(decoder, batch)
        baseline = baseline and BatchDecoder(baseline, batch)
    decoders = {"spec": decoder, "base": baseline}
    tallies = {"spec": Tally(decoder.gamma), "base": Tally(1)}
    eos = tok.eos_token_id
    identical = turns = 0
    if items:  # untimed warm-up: the first prompt's graphs (and allocations) outside the timing
        warm = prompt_ids(tok, [{"role": "user", "content": items[0][1][0]}])
        for d in decoders.values():
            if d is not None:
                _decode(d, [warm], [0], args, None)
    bar = tqdm(total=len(items), desc=desc, unit="item", dynamic_ncols=True, disable=desc is None)
    for c in range(0, len(items), batch):
        chunk = items[c : c + batch]
        history = {name: [[] for _ in chunk] for name in decoders}
        for turn in range(max(len(item) for _, item in chunk)):
            active = [j for j, (_, item) in enumerate(chunk) if turn < len(item)]
            seeds = [args.seed + chunk[j][0] for j in active]
            out = {}
            for name, d in decoders.items():
                if d is None:
                    continue
                msgs = history[name]
                for j in active:
                    msgs[j].append({"role": "user", "content": chunk[j][1][turn]})
                prompts = [prompt_ids(tok, msgs[j]) for j in active]
                out[name], wall, captured = _decode(d, prompts, seeds, args, eos)
                tallies[name].wall_s += wall - captured
                tallies[name].capture_s += captured
                for j, res in zip(active, out[name], strict=True):
                    tallies[name].add(res, 0.0, item=chunk[j][0] if name == "spec" else None)
                    msgs[j].append(_assistant(tok, res))
            turns += len(active)
            if baseline is not None:
                identical += sum(
                    a.token_ids == b.token_ids
                    for a, b in zip(out["spec"], out["base"], strict=True)
                )
        bar.update(len(chunk))
    bar.close()
    return {"spec": tallies["spec"], "base": tallies["base"] if baseline is not None else None,
            "identical": identical, "turns": turns, "items": len(items),
            "elapsed_s": time.perf_counter() - t0}  # fmt: skip


def _assistant(tok, res: DecodeResult) -> dict:
    return {"role": "assistant", "content": tok.decode(res.token_ids, skip_special_tokens=True)}


def merge_sums(parts: list[dict]) -> dict:
    """The sums of several shards' `tally_bench` results."""
    out = {"spec": parts[0]["spec"].merged(p["spec"] for p in parts[1:])}
    bases = [p["base"] for p in parts]
    out["base"] = None if bases[0] is None else bases[0].merged(bases[1:])
    for key in ("identical", "turns", "items"):
        out[key] = sum(p[key] for p in parts)
    out["elapsed_s"] = max(p["elapsed_s"] for p in parts)  # the shards decode at once
    return out


def report(sums: dict, gamma: int, scheduler: str, args) -> dict:
    """The benchmark's report from its sums (see the module docstring)."""
    spec, base = sums["spec"], sums["base"]
    rep = {
        "items": sums["items"],
        "turns": sums["turns"],
        "temperature": args.temperature,
        "max_new_tokens": args.max_new_tokens,
        "block_size": gamma,
        "scheduler": scheduler,
        "tau": spec.emitted / max(1, spec.steps),
        "acceptance_by_position": [
            h / r if r else None for h, r in zip(spec.hits, spec.reached, strict=True)
        ],
        "reached_by_position": spec.reached,
        "wasted_verify_fraction": (spec.verified - spec.accepted) / spec.verified
        if spec.verified
        else 0.0,
        "mean_verify_width": spec.width_sum / max(1, spec.steps),
        # [item index, tokens emitted by decode steps, decode steps]: tau's parts per item
        "per_item": [[i, e, n] for i, (e, n) in sorted(spec.per_item.items())],
        "speculative": spec.speed(),
        "target_only": base.speed() if base is not None else None,
        "procs": args.procs,
        "batch": getattr(args, "batch", 1),
        # the benchmark's decoding wall time (the longest shard) and answers (turns) per second
        "elapsed_s": sums["elapsed_s"],
        "answers_per_s": sums["turns"] / sums["elapsed_s"],
    }
    rep["speedup"] = (
        rep["speculative"]["tokens_per_s"] / rep["target_only"]["tokens_per_s"]
        if base is not None
        else None
    )
    notes = []
    if args.procs > 1:
        notes.append(f"{args.procs} processes decoded at once on shared devices")
    if rep["batch"] > 1:
        notes.append(f"each decoded {rep['batch']} requests at once (throughput; no step time)")
        for key in ("speculative", "target_only"):
            if rep[key] is not None:  # wall time over every row's steps is no step's time
                rep[key]["step_ms"] = None
    if notes:
        rep["timing_note"] = (
            "; ".join(notes) + ": speeds and the speedup are not single-stream figures (run "
            "with --procs 1 --batch 1 for those)"
        )
    if args.temperature == 0 and base is not None:
        rep["identical_to_target_only"] = f"{sums['identical']}/{sums['turns']}"
    return rep


def run_bench(
    decoder: SpeculativeDecoder, tok, items: list[list[str]], args, desc: str = ""
) -> dict:
    """One benchmark in this process: its report, with the draft's proposal time."""
    sums = tally_bench(decoder, tok, list(enumerate(items)), args, desc)
    rep = report(sums, decoder.gamma, decoder.scheduler.mode, args)
    rep["draft_step_ms"] = _draft_step_ms(decoder, tok, items)
    return rep


def _draft_step_ms(decoder: SpeculativeDecoder, tok, items: list[list[str]]) -> float:
    return 1000 * decoder.draft_step_seconds(
        prompt_ids(tok, [{"role": "user", "content": items[0][0]}])
    )


def _shard_main(args, items: dict[str, list[list[str]]], shard: int, queue) -> None:
    """One of --procs processes: a decoder on GPU `shard` mod the GPU count (where the device is
    a GPU), decoding items shard, shard + procs, ... of each benchmark; puts each benchmark's
    sums on `queue` as soon as they are done, or the error that stopped it."""
    try:
        if args.device in ("auto", "cuda") and torch.cuda.is_available():
            args.device = f"cuda:{shard % torch.cuda.device_count()}"
        else:  # CPU decoders share the cores instead of each taking all of them
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.procs))
        decoder, tok = decoder_from_args(args)
        info = {"gamma": decoder.gamma, "scheduler": decoder.scheduler.mode}
        for bench, its in items.items():
            mine = list(enumerate(its))[shard :: args.procs]
            desc = f"{bench} (shard 1 of {args.procs})" if shard == 0 else None
            sums = tally_bench(decoder, tok, mine, args, desc)
            if shard == 0:
                sums["draft_step_ms"] = _draft_step_ms(decoder, tok, its)
            queue.put(("sums", shard, bench, sums, info))
    except (ValueError, FileNotFoundError, NotImplementedError) as exc:
        queue.put(("error", shard, str(exc), True))
    except BaseException:
        queue.put(("error", shard, traceback.format_exc(), False))
        raise


def run_sharded(items: dict[str, list[list[str]]], args, write) -> None:
    """Every benchmark over --procs processes at once; when all of them have finished a
    benchmark, its sums are added into one report and handed to `write(bench, report)` (tau and
    acceptance are exact; timings are under contention)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_shard_main, args=(args, items, k, queue), daemon=True)
        for k in range(args.procs)
    ]
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:  # started with SIGINT ignored: Ctrl-C is this process's to report, not N tracebacks
        for p in procs:
            p.start()
    finally:
        if main:
            signal.signal(signal.SIGINT, old)
    parts: dict[str, dict[int, dict]] = {b: {} for b in items}
    try:
        while any(len(got) < args.procs for got in parts.values()):
            try:
                msg = queue.get(timeout=5)
            except queue_module.Empty:
                # a process that ended before reporting every benchmark (the queue is drained)
                gone = [
                    k
                    for k, p in enumerate(procs)
                    if p.exitcode is not None and any(k not in got for got in parts.values())
                ]
                if gone:
                    raise RuntimeError(
                        f"decoding process {gone[0]} exited (code {procs[gone[0]].exitcode}) "
                        "before reporting every benchmark"
                    ) from None
                continue
            if msg[0] == "error":
                _, k, text, expected = msg
                raise (ValueError if expected else RuntimeError)(f"decoding process {k}: {text}")
            _, k, bench, sums, info = msg
            parts[bench][k] = sums
            if len(parts[bench]) == args.procs:
                shards = [parts[bench][j] for j in range(args.procs)]
                rep = report(merge_sums(shards), info["gamma"], info["scheduler"], args)
                rep["draft_step_ms"] = shards[0]["draft_step_ms"]
                write(bench, rep)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()


def plot_acceptance(reports: dict[str, dict], path: Path, title: str) -> dict:
    """Conditional acceptance by draft position, one line per benchmark. Positions no step ever
    reached (every earlier draft was never all accepted) are drawn as hollow markers at zero
    and labelled, so a short curve is not mistaken for missing data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    gamma = max(len(r["acceptance_by_position"]) for r in reports.values())
    unreached_labelled = False
    for bench, r in reports.items():
        ys = r["acceptance_by_position"]
        reached = [(k + 1, y) for k, y in enumerate(ys) if y is not None]
        line = ax.plot(
            [k for k, _ in reached],
            [y for _, y in reached],
            marker="o",
            label=f"{bench} (tau {r['tau']:.2f}, {r['turns']} answers)",
        )[0]
        missing = [k + 1 for k, y in enumerate(ys) if y is None]
        if missing:
            ax.plot(
                missing,
                [0.0] * len(missing),
                linestyle="none",
                marker="o",
                markersize=9,
                markerfacecolor="white",
                markeredgecolor=line.get_color(),
                label=None if unreached_labelled else "never reached (drawn at 0)",
            )
            unreached_labelled = True
    ax.set_xticks(range(1, gamma + 1))
    ax.set_xlabel("draft position k (1 = the first drafted token)")
    ax.set_ylabel("acceptance rate at k, given 1..k-1 accepted")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return {
        "xticks": [float(t) for t in ax.get_xticks()],
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "unreached": {
            b: [k + 1 for k, y in enumerate(r["acceptance_by_position"]) if y is None]
            for b, r in reports.items()
        },
    }


def table_lines(rep: dict, header: bool) -> list[str]:
    """A benchmark's row of the printed table (after the header, with `header`): the figures read
    at a glance; its JSON file holds the rest. Speedup only when timed against target-only
    decoding, identical outputs only when checked (greedy)."""
    cells = [("bench", f"{rep['bench']:<10}"), ("items", f"{rep['items']:>5}")]
    cells.append(("tau", f"{rep['tau']:5.2f}"))
    for k, a in enumerate(rep["acceptance_by_position"]):  # None: position never reached
        cells.append((f"acc@{k + 1}", f"{'-' if a is None else format(a, '.2f'):>5}"))
    if rep.get("speedup") is not None:
        cells.append(("speedup", f"{rep['speedup']:6.2f}x"))
    if "identical_to_target_only" in rep:
        cells.append(("identical", f"{rep['identical_to_target_only']:>9}"))
    row = "  ".join(value for _, value in cells)
    if not header:
        return [row]
    names = "  ".join(f"{name:<{len(v)}}" if not k else f"{name:>{len(v)}}"
                      for k, (name, v) in enumerate(cells))  # fmt: skip
    return [names, row]


def random_target_warning(kind: str) -> str:
    return (
        f"warning: the target has random weights (target.kind={kind}): its tau and acceptance "
        "say nothing about a trained target"
    )


def build_parser():
    """This CLI's flags (its --help)."""
    ap = cli.parser(
        "evaluate", "Evaluate a draft: tau, acceptance by position, speed vs target-only"
    )
    add_model_args(ap)
    add_decoding_args(ap)
    ap.add_argument(
        "--bench",
        default="gsm8k,mtbench,humaneval",
        help="comma-separated: gsm8k, mtbench, humaneval",
    )
    ap.add_argument("--limit", type=cli.POSITIVE, default=20, help="items per benchmark")
    ap.add_argument(
        "--temperature", type=cli.TEMPERATURE, default=0.0, help="0: greedy; else sampling"
    )
    ap.add_argument("--max-new-tokens", type=cli.POSITIVE, default=256, help="tokens per answer")
    ap.add_argument("--seed", type=cli.NON_NEGATIVE, default=0, help="sampling seed of item 0")
    ap.add_argument("--out", type=Path, help="output directory (default: RUN/eval/step-N-tT)")
    ap.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip target-only decoding (no speedup, no identity check): tau and acceptance only",
    )
    ap.add_argument(
        "--procs",
        type=cli.POSITIVE,
        default=1,
        help="decoding processes sharing the items (GPUs round-robin); >1: tau and acceptance "
        "are exact, speeds are not single-stream",
    )
    ap.add_argument(
        "--batch",
        type=cli.POSITIVE,
        default=1,
        help="requests decoded at once (static runtime; fixed or threshold schedule; one verify "
        "width): tau and acceptance are batch 1's (bf16: up to rounding), speeds are throughputs",
    )
    ap.add_argument(
        "--no-plot", action="store_true", help="skip acceptance.png (no matplotlib needed)"
    )
    ap.add_argument(
        "--json",
        action="store_true",
        help="print each benchmark's report as one JSON line (as written to its file) instead of "
        "the table",
    )
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    command = cli.command_line(ap, argv)
    benches = [b for b in args.bench.split(",") if b]
    reports: dict[str, dict] = {}

    def write(bench: str, rep: dict) -> None:
        """Each benchmark's report as soon as it is complete (a later failure loses none)."""
        rep = {"bench": bench, "checkpoint": str(ckpt), "command": command, **rep}
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{bench}.json").write_text(json.dumps(rep, indent=1))
        lines = [json.dumps(rep)] if args.json else table_lines(rep, header=not reports)
        print("\n".join(lines), flush=True)
        reports[bench] = rep

    try:
        items = {b: load_bench(b, args.limit) for b in benches}
        ckpt = checkpoint.resolve(args.checkpoint).resolve()
        # a draft alone (exported, or a draft/ folder): its reports beside it, not inside it
        alone = checkpoint.is_draft_only(ckpt)
        evals = ckpt.with_name(ckpt.name + "-eval") if alone else ckpt.parent.parent / "eval"
        out = args.out or evals / f"{ckpt.name}-t{args.temperature:g}"
        args.checkpoint = ckpt  # resolved once (a run directory: its newest checkpoint)
        random_kind = random_weight_target(ckpt, args.target)
        if random_kind is not None:  # before the decoding, and under the table
            print(random_target_warning(random_kind), file=sys.stderr)
        if args.procs == 1:
            decoder, tok = decoder_from_args(args)
            for bench in benches:
                write(bench, run_bench(decoder, tok, items[bench], args, bench))
        else:
            run_sharded(items, args, write)
    except (ValueError, FileNotFoundError, NotImplementedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line and 130 (a shell's code for SIGINT), no traceback
        done = f"{', '.join(reports)} written to {out}" if reports else "no benchmark finished"
        print(f"interrupted: {done}", file=sys.stderr)
        return 130
    notes = {r["timing_note"] for r in reports.values() if "timing_note" in r}
    if notes and not args.json:
        print(f"note: {notes.pop()}")
    if random_kind is not None and not args.json:
        print(random_target_warning(random_kind))  # under the figures it qualifies
    if not args.no_plot:
        plot_acceptance(
            reports,
            out / "acceptance.png",
            f"{ckpt.name if alone else ckpt.parent.parent.name + '/' + ckpt.name}, "
            f"T={args.temperature:g}",
        )
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
