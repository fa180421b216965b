"""What teacher forcing costs a target worker: the static backend's prefill of dataset answers,
fresh-row causal attention against the masked attention over the cache it replaced, in one run.

    python scripts/bench_prefill.py --out prefill.json [--samples 2048] [--group 32]
        [--max-length 1024] [--sharegpt 1] [--layer-ids 1,15,28]

A target worker with target.regenerate=false (every ablation run on a regenerated file) renders
each conversation with its loss mask, prefills `prefill_group` (32) of them right-padded in one
forward, and copies each row's captured states out. Before this script's change that forward
attended over the whole cache (max_length + 1 keys) through an additive mask; a fresh row's keys
are the forward's own, so it now attends causally over them (`StaticLlama.forward(fresh=True)`).

Reported, on the embedded SmolLM2 and samples 0..N-1 of the training prompt stream (GSM8K, plus
ShareGPT at the given weight) with the datasets' own answers, cut to --max-length:
- per group, the median prefill (`Regenerator.prefill`, states stored) on each path, beside the
  floor of its matrix products (2 x non-embedding parameters x padded tokens, at this device's
  bf16 matmul rate measured here on one 8192^3 product);
- the largest difference between the two paths' captured states (bf16 rounding: the kernels differ);
- the whole backend (`produce_batch`: render, prefill, copies) over all N samples, samples/s,
  fresh with rendering ahead (the default), fresh inline (target.render_ahead=0), and masked.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from benchlib import sync, write_report

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not
from bench_regen import prompt_conversations  # noqa: E402  (scripts/)

from serving import cli  # noqa: E402
from splitserve.target.backends import TargetSetup, make_backend  # noqa: E402
from splitserve.target.chat import render_with_loss_mask  # noqa: E402
from splitserve.target.config import TargetConfig, resolve_dtype  # noqa: E402
from splitserve.target.embedded import ensure_smollm2  # noqa: E402


def masked(net) -> None:
    """Make `net` (a StaticLlama) take the masked path even where its caller asks for a fresh
    one: the code before this script's change, for the comparison."""
    forward = net.forward
    net.forward = lambda *a, fresh=False, **k: forward(*a, **k)


def matmul_rate(device, dtype) -> float:
    """FLOP/s of one 8192^3 product in `dtype` (the median of 5, after 2 warm-ups)."""
    n = 8192 if device.type == "cuda" else 512
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    times = []
    for i in range(7):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times)


def group_prefills(backend, groups, device) -> tuple[list[float], list]:
    """Seconds of each group's prefill (the first group left out: warm-up) and the first
    group's stored states (every row's, cut to its length)."""
    engine = backend.engine
    seconds, states = [], []
    for k, group in enumerate(groups):
        sync(device)
        t0 = time.perf_counter()
        engine.prefill(list(range(len(group))), group)
        sync(device)
        if k:
            seconds.append(time.perf_counter() - t0)
        else:
            states = [engine.states(r, ids.numel()) for r, ids in enumerate(group)]
    return seconds, states


def produce_all(backend, conversations, device) -> float:
    """Wall seconds of the worker's path over every conversation."""
    sync(device)
    t0 = time.perf_counter()
    out = backend.produce_batch(list(range(len(conversations))), conversations)
    sync(device)
    assert len(out) == len(conversations)
    return time.perf_counter() - t0


def build_parser():
    ap = cli.script_parser(__file__, __doc__)
    ap.add_argument("--out", type=Path, required=True, help="JSON report")
    ap.add_argument("--samples", type=cli.POSITIVE, default=2048, help="conversations")
    ap.add_argument("--group", type=cli.POSITIVE, default=32, help="target.generate_batch")
    ap.add_argument("--max-length", type=cli.POSITIVE, default=1024, help="data.max_length")
    ap.add_argument("--sharegpt", type=int, default=1, help="ShareGPT weight beside GSM8K's 1")
    ap.add_argument("--layer-ids", default="1,15,28", help="captured target layers")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.samples < 2 * args.group:  # the first group is a warm-up, left out of the timing
        ap.error(f"--samples {args.samples} needs to be at least 2 x --group ({2 * args.group})")
    device = torch.device(args.device)
    dtype = resolve_dtype("auto", device)
    conversations = prompt_conversations(args.samples, args.sharegpt)

    def backend(render_ahead: int):
        cfg = TargetConfig(
            backend="static", regenerate=False, generate_batch=args.group, render_ahead=render_ahead
        )
        layer_ids = [int(x) for x in args.layer_ids.split(",")]
        setup = TargetSetup(
            ensure_smollm2(), cfg, layer_ids, device, seed=0,
            max_length=args.max_length, max_prompt_tokens=args.max_length,
        )  # fmt: skip
        return make_backend(setup)

    fast = backend(64)
    cut = args.max_length
    rendered = [render_with_loss_mask(fast.tokenizer, c)[0][:cut] for c in conversations]
    groups = [rendered[k : k + args.group] for k in range(0, len(rendered), args.group)]
    padded = sum(len(g) * max(x.numel() for x in g) for g in groups[1:])
    real = sum(x.numel() for g in groups[1:] for x in g)
    net = fast.engine.net
    inner = sum(
        p.numel() for name, p in fast.model.named_parameters() if "embed" not in name
    )  # every per-token product: the layers' (the LM head runs at one position a row)
    rate = matmul_rate(device, dtype)

    fresh_s, fresh_states = group_prefills(fast, groups, device)
    masked(net)
    masked_s, masked_states = group_prefills(fast, groups, device)
    differences = [
        (a - b).abs().max().item() / max(b.abs().max().item(), 1e-30)
        for fa, ma in zip(fresh_states, masked_states, strict=True)
        for a, b in zip(fa, ma, strict=True)
        if a is not None
    ]
    masked_wall = produce_all(fast, conversations, device)
    del fast, net
    fresh_wall = produce_all(backend(64), conversations, device)
    inline_wall = produce_all(backend(0), conversations, device)

    n = len(groups) - 1
    floor_ms = 1e3 * 2 * inner * padded / n / rate
    report = {
        "command": cli.command_line(ap, argv),
        "device": (
            torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
        ),
        "torch": torch.__version__,
        "dtype": str(dtype),
        "samples": len(conversations),
        "groups_timed": n,
        "tokens_per_sample": round(real / sum(len(g) for g in groups[1:]), 1),
        "padded_tokens_per_group": round(padded / n, 1),
        "matmul_tflops": round(rate / 1e12, 1),
        "prefill_floor_ms": round(floor_ms, 3),
        "prefill_fresh_ms": round(1e3 * statistics.median(fresh_s), 3),
        "prefill_masked_ms": round(1e3 * statistics.median(masked_s), 3),
        "states_max_rel_difference": max(differences),
        "produce_fresh_ahead_samples_per_s": round(len(conversations) / fresh_wall, 1),
        "produce_fresh_inline_samples_per_s": round(len(conversations) / inline_wall, 1),
        "produce_masked_ahead_samples_per_s": round(len(conversations) / masked_wall, 1),
    }
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
