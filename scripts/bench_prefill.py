"""What teacher forcing costs a target worker: the static backend's prefill of dataset answers,
fresh-row causal attention against the masked attention over the cache it replaced, in one run.

    python scripts/bench_prefill.py --out docs/results/runtime_h200/prefill_h200.json
        [--samples 2048] [--group 32] [--max-length 1024] [--sharegpt 1] [--layer-ids 1,15,28]

A target worker with target.regenerate=false (every ablation run on a regenerated file) renders
each conversation with its loss mask, prefills `prefill_group` (32) of them right-padded in one
forward, and copies each row's captured states out. Before this script's change that forward
attended over the whole cache (max_length + 1 keys) through an additive mask; a fresh row's keys
are the forward's own, so it now attends causally over them (`StaticDecoder.forward(fresh=True)`).

Reported, on the embedded SmolLM2 and samples 0..N-1 of the training prompt stream (GSM8K, plus
ShareGPT at the given weight) with the datasets' own answers, cut to --max-length, each path on
a backend of its own (three: fresh and masked rendering ahead, fresh inline):
- per group, the median prefill (`Regenerator.prefill`, states stored) on each path, the two
  paths alternating first from group to group, beside the floor of its weight products (2 x
  non-embedding parameters x padded tokens, at this device's bf16 matmul rate measured here on
  one 8192^3 product; attention's products left out);
- the largest difference between the two paths' captured states (the first group's);
- the kernels (or, on CPU, the operators) that took the most time in one group's prefill on
  each path, from torch.profiler: which SDPA kernel each path ran;
- the whole backend (`produce_batch`: render, prefill, copies) over all N samples, samples/s,
  --repeats rounds of masked ahead, fresh ahead (the default) and fresh inline
  (target.render_ahead=0), the order rotated from round to round; the medians and every run.
(The first version ran the loops once each in one order and the group timings one path after
the other; its figures were dropped. This version's runs are docs/results/runtime_h200's
`prefill` rows, 2026-12-02 and 2026-12-03; the first one's kernel list also held the operators
that launched them.)
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from benchlib import sync, timed, write_report

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not
from bench_regen import prompt_conversations  # noqa: E402  (scripts/)

from serving import cli  # noqa: E402
from splitserve.target.backends import TargetSetup, make_backend  # noqa: E402
from splitserve.target.config import TargetConfig, resolve_dtype  # noqa: E402
from splitserve.target.embedded import ensure_smollm2  # noqa: E402


def masked(net) -> None:
    """Make `net` (a StaticDecoder) take the masked path even where its caller asks for a fresh
    one: the code before this script's change, for the comparison."""
    forward = net.forward
    net.forward = lambda *a, fresh=False, **k: forward(*a, **k)


def matmul_rate(device, dtype) -> float:
    """FLOP/s of one 8192^3 product in `dtype` (the median of 5, after 2 warm-ups)."""
    n = 8192 if device.type == "cuda" else 512
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    return 2 * n**3 / timed(lambda: a @ b, 5, device)


def prefill_s(backend, group, device) -> float:
    """Seconds of one group's prefill into rows 0..len-1, states stored."""
    sync(device)
    t0 = time.perf_counter()
    backend.engine.prefill(list(range(len(group))), group)
    sync(device)
    return time.perf_counter() - t0


def top_kernels(backend, group, device, n: int = 8) -> list[dict]:
    """The n device events (CUDA: kernels, copies) or operators (CPU) with the most self time in
    one group's prefill."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        prefill_s(backend, group, device)

    def self_us(e) -> float:
        return e.self_device_time_total if cuda else e.self_cpu_time_total

    events = list(prof.key_averages())
    if cuda:  # device events only (kernels, copies): an operator's device time repeats theirs
        events = [e for e in events if e.device_type == DeviceType.CUDA]
    events = sorted(events, key=self_us, reverse=True)[:n]
    return [
        {"name": e.key[:160], "self_us": round(self_us(e), 1), "calls": e.count} for e in events
    ]


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
    ap.add_argument("--repeats", type=cli.POSITIVE, default=3, help="rounds of the three loops")
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
    layer_ids = [int(x) for x in args.layer_ids.split(",")]

    def backend(render_ahead: int):
        cfg = TargetConfig(
            backend="static", regenerate=False, generate_batch=args.group, render_ahead=render_ahead
        )
        setup = TargetSetup(
            ensure_smollm2(), cfg, layer_ids, device, seed=0,
            max_length=args.max_length, max_prompt_tokens=args.max_length,
        )  # fmt: skip
        return make_backend(setup)

    backends = {"masked": backend(64), "fresh": backend(64), "inline": backend(0)}
    masked(backends["masked"].engine.net)
    model = backends["fresh"].model
    rendered = [backends["fresh"].teacher_forced(c)[0] for c in conversations]
    groups = [rendered[k : k + args.group] for k in range(0, len(rendered), args.group)]
    padded = sum(len(g) * max(x.numel() for x in g) for g in groups[1:])
    real = sum(x.numel() for g in groups[1:] for x in g)
    # every per-token product: the layers' (the LM head runs at one position a row)
    inner = sum(p.numel() for name, p in model.named_parameters() if "embed" not in name)
    rate = matmul_rate(device, dtype)

    paths = ("fresh", "masked")
    seconds: dict[str, list[float]] = {path: [] for path in paths}
    states = {}
    for k, group in enumerate(groups):  # the first group a warm-up for both
        for path in paths if k % 2 else paths[::-1]:
            t = prefill_s(backends[path], group, device)
            if k:
                seconds[path].append(t)
            else:
                engine = backends[path].engine
                states[path] = [engine.states(r, ids.numel()) for r, ids in enumerate(group)]
    differences = [
        (a - b).abs().max().item() / max(b.abs().max().item(), 1e-30)
        for fa, ma in zip(states["fresh"], states["masked"], strict=True)
        for a, b in zip(fa, ma, strict=True)
        if a is not None
    ]
    kernels = {path: top_kernels(backends[path], groups[1], device) for path in paths}

    loops = ["masked", "fresh", "inline"]
    runs = []
    for r in range(args.repeats):
        for name in loops[r % 3 :] + loops[: r % 3]:
            wall = produce_all(backends[name], conversations, device)
            runs.append(
                {"round": r, "loop": name, "samples_per_s": round(len(conversations) / wall, 1)}
            )
            print(json.dumps(runs[-1]), flush=True)

    def loop_rate(name: str) -> float:
        return statistics.median(x["samples_per_s"] for x in runs if x["loop"] == name)

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
        "prefill_fresh_ms": round(1e3 * statistics.median(seconds["fresh"]), 3),
        "prefill_masked_ms": round(1e3 * statistics.median(seconds["masked"]), 3),
        "states_max_rel_difference": max(differences),
        "top_kernels": kernels,
        "produce_fresh_ahead_samples_per_s": loop_rate("fresh"),
        "produce_fresh_inline_samples_per_s": loop_rate("inline"),
        "produce_masked_ahead_samples_per_s": loop_rate("masked"),
        "produce_runs": runs,
    }
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
