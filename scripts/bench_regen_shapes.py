"""Regeneration on the static runtime at real target shapes (random weights), against its floor.

    python scripts/bench_regen_shapes.py --out F [--shapes qwen3_8b,llama31_8b] [--slots 256]
        [--prompt 512] [--new 512] [--samples 512] [--profile]

No weights or prompts are needed to time regeneration: a step reads the same bytes whatever the
weights hold, and with no end-of-answer token every answer runs to its budget. Per shape
(scripts/bench_families.py's public configs, bf16 on a GPU): the Regenerator (continuous refill,
captures of three layers, one CUDA graph per step) generates --new tokens for each of --samples
random prompts of --prompt/2..--prompt tokens, --slots at a time, sampled at temperature 1. It
reports new tokens/s and, over this device's copy bandwidth (benchlib.copy_bandwidth), two
floors: `floor_new_tokens_per_s` = slots / (the weights a step reads + the keys and values of
every row's real context, at the mean context of a decode step), and `padded_floor_...`, which
counts the whole cache every row owns (what a step attending over the padded cache reads). For a
mixture of experts the weights counted are one token's top-k experts: with many rows in flight a
step reads nearly every expert, so that floor is optimistic.
`--prefill-len N`: teacher forcing's rate too (a target worker given answers, target.regenerate
=false): groups of --prefill-group random sequences of N tokens prefilled as fresh rows.
`--profile`: the step graph replayed alone and its largest kernels. `--before`: the same run with
the runtime as it was before 2026-12-05 (benchlib.apply_runtime_switches):
`before_new_tokens_per_s`.
"""

from __future__ import annotations

import gc
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_families import SHAPES, TINY, build, step_bytes  # noqa: E402  (scripts/)
from benchlib import (  # noqa: E402
    add_runtime_switches,
    apply_runtime_switches,
    back_to_back_ms,
    busy_rows,
    copy_bandwidth,
    kernel_table,
    sync,
    timed,
    write_report,
)

from serving import cli  # noqa: E402
from splitserve.target.runtime.regen import Regenerator, Request  # noqa: E402


def requests(n: int, prompt: int, new: int, vocab: int) -> list[Request]:
    g = torch.Generator().manual_seed(0)
    lens = torch.randint(max(1, prompt // 2), prompt + 1, (n,), generator=g).tolist()
    return [
        Request(torch.randint(0, vocab, (p,), generator=g), budget=new, seed=i, temperature=1.0)
        for i, p in enumerate(lens)
    ]


def regenerate(model, args, device) -> dict:
    """One Regenerator over the shape's requests: its rate, steps and answers' lengths."""
    layers = model.config.num_hidden_layers
    t0 = time.perf_counter()
    engine = Regenerator(
        model, [1, layers // 2, layers - 2], slots=args.slots,
        max_len=args.prompt + args.new + 1, eos=(), nucleus=False,
    )  # fmt: skip
    sync(device)
    built = time.perf_counter() - t0
    reqs = requests(args.samples, args.prompt, args.new, model.config.vocab_size)
    t0 = time.perf_counter()
    out = engine.run(reqs)
    sync(device)
    wall = time.perf_counter() - t0
    new = sum(g.ids.numel() - g.prompt_len for g in out)
    row = {
        "samples": len(out),
        "build_s": round(built, 2),
        "wall_s": round(wall, 3),
        "new_tokens": new,
        "new_tokens_per_s": round(new / wall, 1),
        "decode_steps": engine.steps,
        "prefills": engine.prefills,
        "prefill_tokens": engine.prefill_tokens,  # a refill forward's budget (0: none)
        "ms_per_step_incl_prefills": round(1e3 * wall / engine.steps, 3),
        # a decode step at each new token: its row's context then is between prompt and end
        "mean_context": round(
            sum((g.ids.numel() - g.prompt_len) * (g.prompt_len + g.ids.numel()) / 2 for g in out)
            / max(new, 1),
            1,
        ),
        "max_len": engine.max_len,
    }
    if args.profile:  # every row live at the run's mean decode context
        busy_rows(engine, row["mean_context"])
        row["replay_ms"] = round(back_to_back_ms(engine.step, 30, device), 3)
        row["kernels"] = kernel_table(engine.step, device)
    return row


def prefill(model, args, device) -> dict:
    """Teacher forcing's cost (a target worker with target.regenerate=false): groups of
    --prefill-group sequences of --prefill-len tokens prefilled as fresh rows, states stored."""
    n, length = args.prefill_group, args.prefill_len
    engine = Regenerator(
        model, [1], slots=n, max_len=length + 1, eos=(), nucleus=False, graphs=False
    )
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, model.config.vocab_size, (length,), generator=g) for _ in range(n)]
    s = timed(lambda: engine.prefill(list(range(n)), prompts), 5, device)
    embed = model.get_input_embeddings().weight.numel()
    flops = 2 * (sum(p.numel() for p in model.parameters()) - embed) * n * length
    return {
        "prefill_len": length,
        "prefill_group": n,
        "prefill_samples_per_s": round(n / s, 2),
        "prefill_tflops": round(flops / s / 1e12, 4),  # weight products only, attention aside
    }


def measure(name: str, args, device, dtype, bandwidth: float) -> dict:
    _, model_type, config = SHAPES[name]
    model = build(model_type, {**config, **(TINY if args.tiny else {})}, device, dtype)
    row = {"shape": name, "slots": args.slots, **regenerate(model, args, device)}
    if args.before:  # the same regeneration as before 2026-12-05, on this machine
        apply_runtime_switches(args, before=True)
        try:
            before = regenerate(model, args, device)
        finally:
            apply_runtime_switches(args)
        row["before_new_tokens_per_s"] = before["new_tokens_per_s"]
        row["before_ms_per_step_incl_prefills"] = before["ms_per_step_incl_prefills"]
    per_position = step_bytes(model, 1)["kv"]
    weights = step_bytes(model, 0)["weights"]
    real = weights + args.slots * row["mean_context"] * per_position
    padded = weights + args.slots * row.pop("max_len") * per_position
    row.update(
        weight_bytes_per_step=weights,
        floor_step_ms=round(1e3 * real / bandwidth, 4),
        floor_new_tokens_per_s=round(args.slots * bandwidth / real, 1),
        padded_floor_new_tokens_per_s=round(args.slots * bandwidth / padded, 1),
    )
    row["share_of_floor"] = round(row["new_tokens_per_s"] / row["floor_new_tokens_per_s"], 3)
    row["samples_per_s"] = round(row["samples"] / row["wall_s"], 2)
    if args.prefill_len:
        row.update(prefill(model, args, device))
    print(f"{name}: {row['new_tokens_per_s']} new tokens/s, floor "
          f"{row['floor_new_tokens_per_s']} ({row['share_of_floor']:.3f})", flush=True)  # fmt: skip
    del model
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def main(argv: list[str] | None = None) -> int:
    ap = cli.script_parser(__file__, __doc__)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--shapes", default="qwen3_8b,llama31_8b")
    ap.add_argument("--slots", type=int, default=256, help="rows in flight")
    ap.add_argument("--prompt", type=int, default=512, help="longest prompt (shortest: half)")
    ap.add_argument("--new", type=int, default=512, help="new tokens per answer")
    ap.add_argument("--samples", type=int, default=512)
    ap.add_argument("--profile", action="store_true", help="the step alone and its kernels")
    add_runtime_switches(ap, "also as before 2026-12-05 (benchlib.apply_runtime_switches)")
    ap.add_argument(
        "--prefill-len",
        type=int,
        default=0,
        help="also time teacher forcing: prefills of this many tokens (0: off)",
    )
    ap.add_argument("--prefill-group", type=int, default=8, help="sequences per prefill")
    ap.add_argument("--tiny", action="store_true", help="shrunk shapes (a CPU smoke run)")
    args = ap.parse_args(argv)
    apply_runtime_switches(args)
    unknown = [s for s in args.shapes.split(",") if s not in SHAPES]
    if unknown:
        ap.error(f"--shapes: unknown {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    for flag in ("slots", "prompt", "new", "samples"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag} must be >= 1")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    report = {
        "command": cli.command_line(ap, argv),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else platform.node(),
        "torch": torch.__version__,
        "dtype": str(dtype).removeprefix("torch."),
        "copy_bandwidth_GBps": round(copy_bandwidth(device) / 1e9, 1),
        "regeneration": {},
    }
    bandwidth = report["copy_bandwidth_GBps"] * 1e9
    with torch.no_grad():
        for name in args.shapes.split(","):
            try:
                report["regeneration"][name] = measure(name, args, device, dtype, bandwidth)
            except torch.OutOfMemoryError as exc:
                report["regeneration"][name] = {"error": f"out of memory: {str(exc)[:200]}"}
            write_report(args.out, report)  # after each: a cut run keeps what it measured
    return 0


if __name__ == "__main__":
    sys.exit(main())
