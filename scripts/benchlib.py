"""Timing helpers the GPU benchmark scripts share: device sync, a median timer, a target engine's
step at a context, the device's copy bandwidth (the memory floor every step figure is reported
beside), a model's weight bytes, and the report's JSON written and printed."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, repeats: int, device) -> float:
    """Median seconds of fn() over `repeats` calls after two warm-up calls."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _step_fn(engine, width: int, context: int, vocab: int, device):
    """A closure running one forward of `width` tokens at positions context.. after a prompt of
    `context` tokens on a target engine (splitserve.target.runtime), leaving the same state."""
    g = torch.Generator().manual_seed(0)
    engine.begin(context + width + 1)
    engine.forward(torch.randint(0, vocab, (context,), generator=g).to(device), 0)
    ids = torch.randint(0, vocab, (width,), generator=g).to(device)

    def one():
        engine.forward(ids, context)
        engine.accept(width, width - 1)  # keep nothing but the anchor: the same state each time

    return one


def step_ms(engine, width: int, context: int, vocab: int, repeats: int, device) -> float:
    """Median ms of that step (see _step_fn)."""
    ms = 1000 * timed(_step_fn(engine, width, context, vocab, device), repeats, device)
    engine.close()
    return ms


def step_kernels(engine, width: int, context: int, vocab: int, device) -> dict:
    """kernel_table of that step (see _step_fn)."""
    table = kernel_table(_step_fn(engine, width, context, vocab, device), device)
    engine.close()
    return table


def back_to_back_ms(fn, repeats: int, device) -> float:
    """Mean milliseconds of fn() run `repeats` times back to back after one warm-up call, with
    no sync between calls (graph replays: what a device does with nothing waiting on the host)."""
    fn()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync(device)
    return 1000 * (time.perf_counter() - t0) / repeats


def busy_rows(engine, context: int) -> None:
    """Every row of a Regenerator live at position `context`, for profiling its step after a
    run: then every row is idle at position 0 (attention over one key), so a profile would time a
    step far cheaper than a full batch mid-run; the replays move the rows on from `context`."""
    engine.live.fill_(True)
    engine.pos.fill_(min(int(context), engine.max_len - 1))


def copy_bandwidth(device) -> float:
    """Bytes per second of a device-to-device copy (read + written), 1 GiB (64 MiB on CPU)."""
    n = (1 << 30) // 2 if torch.device(device).type == "cuda" else (1 << 26)
    src = torch.empty(n, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    seconds = timed(lambda: dst.copy_(src), 10, device)
    return 2 * src.numel() * src.element_size() / seconds


def weight_bytes(model) -> int:
    """Bytes of a model's parameters, tied weights counted once."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def write_report(out: Path, report: dict) -> None:
    """`report` as JSON to `out` (its folder made) and to stdout."""
    text = json.dumps(report, indent=1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)


def kernel_table(replay, device, replays: int = 20) -> dict:
    """Kernels per call of `replay` (a graph replay, a step) from torch.profiler over `replays`
    calls: count, summed duration, the 15 largest."""
    from collections import defaultdict

    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            replay()
        sync(device)
    by_name: dict[str, list[float]] = defaultdict(list)
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            by_name[e.name].append(e.time_range.elapsed_us() / 1000)
    count = sum(len(v) for v in by_name.values())
    total = sum(sum(v) for v in by_name.values())
    top = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:15]
    return {
        "per_replay": count / replays,
        "sum_ms": total / replays,
        "top": [
            {"name": n[:120], "count": len(v) / replays, "ms": sum(v) / replays} for n, v in top
        ],
    }


def add_runtime_switches(parser, before_help: str | None = None) -> None:
    """--sdpa (SDPA over the masked cache instead of the Triton decode attention),
    --sdpa-in-compile, --grouped-in-compile, --compile-regen, --sync-regen, --torch-sampler,
    --unfused-moe, --unfused-router, --prefill-tokens and, with a help text, --before (the
    static runtime as before 2026-12-05)."""
    from serving import cli

    sdpa = "SDPA over the masked cache, not the Triton decode attention"
    parser.add_argument("--sdpa", action="store_true", help=sdpa)
    inside = "SDPA inside torch.compile'd steps, not the decode attention (before 2026-12-06)"
    parser.add_argument("--sdpa-in-compile", action="store_true", help=inside)
    grouped = "MoE grouped GEMMs in torch.compile'd steps, not the pair GEMV (before 2026-12-06)"
    parser.add_argument("--grouped-in-compile", action="store_true", help=grouped)
    regen = "regeneration replays a torch.compile'd step (no faster on one H100, 2026-12-06)"
    parser.add_argument("--compile-regen", action="store_true", help=regen)
    sync = "regeneration reads each step's tokens before launching the next (as before 2026-12-05)"
    parser.add_argument("--sync-regen", action="store_true", help=sync)
    sampler = "the PyTorch sampler (a sort for the nucleus), not the Triton one (before 2026-12-06)"
    parser.add_argument("--torch-sampler", action="store_true", help=sampler)
    unfused = "MoE routing and SiLU as separate kernels beside the pair GEMV (before 2026-12-06)"
    parser.add_argument("--unfused-moe", action="store_true", help=unfused)
    router = "the MoE's add, norm, router and routing as 4 kernels, not 1 (before 2026-12-07)"
    parser.add_argument("--unfused-router", action="store_true", help=router)
    chunk = (
        "padded tokens per refill prefill forward (default: the Regenerator's; 0: a refill "
        "group in one forward, as --before sets it)"
    )
    parser.add_argument("--prefill-tokens", type=cli.int_at_least(0), default=None, help=chunk)
    if before_help:
        parser.add_argument("--before", action="store_true", help=before_help)


def apply_runtime_switches(args, before: bool = False) -> None:
    """StaticDecoders and Regenerators built from now on follow the switches; `before` is the
    runtime as before 2026-12-05 whatever the others say (grouped-GEMM experts at every width,
    SDPA, no compiled kernels, the synchronous regeneration loop, no compiled regeneration
    step, the PyTorch sampler; idle rows resting at position 0, 4546875, stay): a same-machine
    before/after."""
    from splitserve.target.runtime import sampling
    from splitserve.target.runtime.regen import PREFILL_TOKENS, Regenerator
    from splitserve.target.runtime.static_model import StaticDecoder

    StaticDecoder.use_pair_gemv = not before
    StaticDecoder.use_decode_kernel = not (args.sdpa or before)
    StaticDecoder.kernels_in_compile = not (args.sdpa_in_compile or before)
    StaticDecoder.gemv_in_compile = not (args.grouped_in_compile or before)
    StaticDecoder.fused_moe = not (args.unfused_moe or before)
    StaticDecoder.fused_router = not (args.unfused_router or args.unfused_moe or before)
    Regenerator.compile_step = args.compile_regen and not before
    Regenerator.one_ahead = not (args.sync_regen or before)
    sampling.use_kernel = not (args.torch_sampler or before)
    chunk = PREFILL_TOKENS if args.prefill_tokens is None else args.prefill_tokens
    Regenerator.prefill_tokens = 0 if before else chunk
