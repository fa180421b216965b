"""The draft trainer alone at production draft shapes, fed synthetic target hidden states.

    python scripts/bench_trainer.py --out docs/results/throughput_h200/trainer.json \
        [--shapes qwen3_8b,llama31_8b,ling3_flash,smollm2] [--seq 2048,4096] [--blocks 7,16]

No target model is needed: a step's cost depends on the shapes of what the target sends (its
chosen layers' states [L, m*H] and final normed states [L, H], random here) and of its frozen
embedding and LM head (random, [V, H]), not on their values. Per (shape, sequence length, block
size): the real trainer (splitserve.trainer.DraftTrainer: DeepSpeed, the chunked loss, the
configured ZeRO stage) takes --steps optimizer steps of --grad-accums micro-batches of
--micro-batch samples of --seq tokens
(the last 3/4 of each an answer), and the script reports:
- model FLOPs per sample, counted from the packed batch's shapes: the fusion layer over every
  context token, each draft layer's k/v projections over context and block tokens and its
  q/o/MLP over block tokens (x3 for forward and backward), attention over the keys each block
  query may see (its anchor's context and its block; x3), the frozen LM head's forward and input
  gradient and the target's own logits from its final states (x3) and the Markov head (x3) over
  the supervised label rows;
- samples/s, tokens/s (context tokens), MFU against this device's bf16 matmul rate measured in
  the same run (an 8192^3 matmul), peak memory; each step timed alone (its metrics read before
  the next is queued), and `pipelined_*`: steps queued one ahead, as the training loop runs them;
- one instrumented step's time per phase (pack, forward, loss, backward, optimizer), each
  between device synchronisations, and their sum against the plain step;
- `shares`: one profiled step's time split into each phase's device work, attention's (forward
  and backward) and the host's alone (no kernel running), by splitserve.profiling.step_shares.
"""

from __future__ import annotations

import gc
import itertools
import os
import platform
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchlib import sync, timed, write_report  # noqa: E402

from draft_models import (  # noqa: E402
    DraftConfig,
    FrozenTargetHead,
    SequenceSample,
    TargetSpec,
    packed_attention,
)
from serving import cli  # noqa: E402
from splitserve.config import TrainConfig  # noqa: E402
from splitserve.profiling import is_kernel, is_range, step_shares  # noqa: E402

# target shapes a draft is trained for (public configs); the draft takes its width from them
SHAPES = {
    "smollm2": dict(hidden_size=576, num_layers=30, vocab_size=49152, num_attention_heads=9,
                    num_key_value_heads=3, head_dim=64, intermediate_size=1536),
    "qwen3_8b": dict(hidden_size=4096, num_layers=36, vocab_size=151936, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, intermediate_size=12288),
    "llama31_8b": dict(hidden_size=4096, num_layers=32, vocab_size=128256,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                       intermediate_size=14336),
    # Ling-3.0-flash: hidden 2560, vocab 157184; its draft is Qwen3-shaped (recipes/ling3)
    "ling3_flash": dict(hidden_size=2560, num_layers=42, vocab_size=157184,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                        intermediate_size=6144),
}  # fmt: skip
TINY = dict(hidden_size=64, vocab_size=512, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, intermediate_size=128)  # fmt: skip


def spec_of(name: str, tiny: bool) -> TargetSpec:
    return TargetSpec(model_type="qwen3", **{**SHAPES[name], **(TINY if tiny else {})})


def matmul_rate(device, dtype) -> float:
    """FLOP/s of one large matmul in `dtype` on `device` (the MFU denominator)."""
    n = 8192 if device.type == "cuda" else 512
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    return 2 * n**3 / timed(lambda: a @ b, 20, device)


def synthetic_samples(n: int, length: int, spec: TargetSpec, layers: int, device, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        mask = torch.zeros(length, dtype=torch.bool)
        mask[length // 4 :] = True  # a prompt, then the answer
        out.append(
            SequenceSample(
                input_ids=torch.randint(0, spec.vocab_size, (length,), generator=g),
                loss_mask=mask,
                aux_hidden=torch.randn(
                    length, layers * spec.hidden_size, device=device, dtype=dtype
                ),
                final_hidden=torch.randn(length, spec.hidden_size, device=device, dtype=dtype),
            )  # fmt: skip
        )
    return out


def model_flops(draft, batch) -> float:
    """Training FLOPs of one packed micro-batch (see the module docstring)."""
    linear = lambda m, rows: 2 * rows * m.in_features * m.out_features  # noqa: E731
    ctx = int(batch.ctx_input_ids.numel())
    n, s = batch.block_input_ids.shape
    blk = n * s
    rows = int(batch.label_mask.sum())
    fwd_train = linear(draft.fc, ctx)
    attn = 0.0
    keys = float((batch.block_anchor.float() + s).sum()) * s  # keys each block query sees
    for layer in draft.layers:
        a = layer.self_attn
        fwd_train += linear(a.k_proj, ctx + blk) + linear(a.v_proj, ctx + blk)
        fwd_train += linear(a.q_proj, blk) + linear(a.o_proj, blk)
        fwd_train += sum(
            linear(m, blk) for m in layer.mlp.modules() if isinstance(m, torch.nn.Linear)
        )
        attn += 4 * keys * a.num_heads * a.head_dim
    head = 2 * rows * draft.target_head.hidden_size * draft.target_head.vocab_size
    markov = 0.0
    seq = getattr(draft, "markov_head", None)
    if seq is not None and hasattr(seq, "markov_w2"):
        markov = linear(seq.markov_w2, rows)
    # the frozen head: the draft's logits forward and input gradient, and the target's logits
    # from its final states (the loss recomputes them, forward only)
    return 3 * fwd_train + 3 * attn + 3 * head + 3 * markov


def phases(trainer, samples, ids, device) -> dict:
    """One step split at device synchronisations: pack, forward, loss (the fused loss computes
    its gradients in its forward), backward, optimizer;
    `pack_host`: the host's part of pack, before it waits for the device (the pack phase varied
    from 5 to 59 ms between H100 runs of one code, 1.7 ms on CPU: this tells host from device)."""
    out = dict.fromkeys(("pack", "pack_host", "forward", "loss", "backward", "optimizer"), 0.0)
    b = trainer.cfg.micro_batch
    for i in range(0, len(samples), b):
        t = time.perf_counter()
        batch = trainer._pack(samples[i : i + b], ids[i : i + b])
        total = trainer._global_weight_total(batch)
        out["pack_host"] += time.perf_counter() - t
        sync(device)
        out["pack"] += time.perf_counter() - t
        t = time.perf_counter()
        fwd = trainer._forward(batch)
        sync(device)
        out["forward"] += time.perf_counter() - t
        t = time.perf_counter()
        res = trainer._loss_of(fwd, batch, total)
        sync(device)
        out["loss"] += time.perf_counter() - t
        t = time.perf_counter()
        trainer.engine.backward(res.loss)
        sync(device)
        out["backward"] += time.perf_counter() - t
        t = time.perf_counter()
        trainer.engine.step()
        sync(device)
        out["optimizer"] += time.perf_counter() - t
    return {k: round(1000 * v, 2) for k, v in out.items()}


def pipelined_step_s(trainer, samples, ids, steps: int, device) -> float:
    """Seconds a step over `steps` steps queued one ahead, as the training loop runs them: step
    N+1 is queued before step N's metrics are read (DraftTrainer.queue_step), so the host's
    packing and reads overlap the device's work. After the warm-up of `timed`."""
    sync(device)
    t0 = time.perf_counter()
    pending = None
    for _ in range(steps):
        queued = trainer.queue_step(samples, ids)
        if pending is not None:
            pending.metrics()
        pending = queued
    pending.metrics()
    sync(device)
    return (time.perf_counter() - t0) / steps


def profiled(run, device):
    """torch.profiler over one call of `run` and its wall time in microseconds."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    with profile(activities=acts) as prof:
        t = time.perf_counter()
        run()
        sync(device)
        wall_us = (time.perf_counter() - t) * 1e6
    return prof, wall_us


def heaviest_ops(prof, device, top: int = 8) -> list[dict]:
    """The heaviest kernels of a profile (on CPU, operators by their own time): where a
    step's time goes."""
    cuda = device.type == "cuda"
    own = (lambda e: e.self_device_time_total) if cuda else (lambda e: e.self_cpu_time_total)
    # on a GPU the kernels alone: an operator's own device time is its kernels' (listing both
    # counted them twice); ranges (the trainer's splitserve.*, torch's Optimizer.step#...)
    # span their operators and would count them twice too
    keep = is_kernel if cuda else (lambda e: not is_range(e))
    ops = [e for e in prof.key_averages() if keep(e)]
    rows = sorted(ops, key=own, reverse=True)
    return [
        {"op": e.key[:80], "calls": e.count, "self_ms": round(own(e) / 1e3, 3)} for e in rows[:top]
    ]


def optimizer_kernels(trainer, samples, ids, accum: int = 1, top: int = 8) -> list[dict]:
    """The optimizer step's heaviest operators, from one profiled step (the last of `accum`
    micro-batches of `samples`, where it updates)."""
    for i in range(accum):
        res = trainer._loss(trainer._pack(samples, ids), None)
        trainer.engine.backward(res.loss)
        if i < accum - 1:
            trainer.engine.step()  # accumulates only
    return heaviest_ops(profiled(trainer.engine.step, trainer.device)[0], trainer.device, top)


def measure(name, seq, block, precision, zero, accum, compiled, args, device, dtype, peak) -> dict:
    """One configuration: `accum` micro-batches of args.micro_batch samples per optimizer step;
    `compiled`: train.compile_layers (its compilation falls in the two warm-up steps)."""
    from torch._dynamo.utils import counters

    from splitserve.trainer import DraftTrainer

    spec = spec_of(name, args.tiny)
    layers = 3
    draft_cfg = DraftConfig(num_layers=args.layers, block_size=block, markov_rank=args.markov_rank,
                            num_target_layer_ids=layers)  # fmt: skip
    g = torch.Generator().manual_seed(0)
    head = FrozenTargetHead(
        torch.randn(spec.vocab_size, spec.hidden_size, generator=g).to(device, dtype),
        torch.randn(spec.vocab_size, spec.hidden_size, generator=g).to(device, dtype),
    )
    cfg = TrainConfig(
        steps=args.steps + 2,
        micro_batch=args.micro_batch,
        grad_accum=accum,
        num_anchors=args.anchors,
        warmup_steps=1,
        zero_stage=zero,
        precision=precision,
        compile_layers=compiled,
    )
    if compiled:  # from nothing: past dynamo's recompile limit a region would run eager
        torch._dynamo.reset()
        counters.clear()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    trainer = DraftTrainer(draft_cfg, spec, head, cfg, device=device, dp_world=1)
    per_step = args.micro_batch * accum  # samples an optimizer step takes
    samples = synthetic_samples(per_step, seq, spec, layers, device, dtype, seed=1)
    ids = list(range(per_step))
    b = args.micro_batch  # every micro-batch has the same shapes: count the first
    flops = model_flops(trainer.draft, trainer._pack(samples[:b], ids[:b])) / b
    step_s = timed(lambda: trainer.train_step(samples, ids), args.steps, device)
    ahead_s = pipelined_step_s(trainer, samples, ids, args.steps, device)
    split = phases(trainer, samples, ids, device)
    # one whole optimizer step profiled: packing, forward, loss, backward, update
    prof, prof_wall_us = profiled(lambda: trainer.train_step(samples, ids), device)
    out = {
        "shape": name,
        "seq": seq,
        "block": block,
        "precision": precision,
        "zero_stage": zero,
        "optimizer": type(trainer.engine.optimizer).__name__,
        "micro_batch": args.micro_batch,
        "grad_accum": accum,
        "compile_layers": compiled,
        "whole_tiles": packed_attention.WHOLE_TILES,
        "anchors": args.anchors,
        "draft_params_m": round(sum(p.numel() for p in trainer.draft.parameters()) / 1e6, 1),
        "tflop_per_sample": round(flops / 1e12, 4),
        "flop_per_sample": float(f"{flops:.6g}"),
        "step_ms": round(1000 * step_s, 2),
        "samples_per_s": round(per_step / step_s, 3),
        "tokens_per_s": round(per_step * seq / step_s, 1),
        "mfu": round(flops * per_step / step_s / peak, 4),
        # steps queued one ahead, as the training loop runs them (the rows above: one at a time)
        "pipelined_step_ms": round(1000 * ahead_s, 2),
        "pipelined_samples_per_s": round(per_step / ahead_s, 3),
        "pipelined_mfu": round(flops * per_step / ahead_s / peak, 4),
        "phases_ms": split,
        "phases_sum_over_step": round(
            sum(v for k, v in split.items() if k != "pack_host") / (1000 * step_s), 3
        ),
        # shares of the profiled step's time: each phase's device work, attention's, the host's
        "shares": step_shares(prof.events(), prof_wall_us, device.type == "cuda"),
    }
    if compiled:  # graphs dynamo made for the regions (0: they ran eager)
        out["compiled_graphs"] = counters["stats"]["unique_graphs"]
    if args.profile_optimizer:
        out["optimizer_kernels"] = optimizer_kernels(trainer, samples[:b], ids[:b], accum)
    if args.profile_step:
        out["step_ops"] = heaviest_ops(prof, device, top=20)
    if device.type == "cuda":
        out["peak_gb"] = round(torch.cuda.max_memory_allocated(device) / 1e9, 2)
        out["held_before_gb"] = round(before / 1e9, 2)  # left by earlier shapes (should be ~0)
    trainer.engine.destroy()  # DeepSpeed's hook registry would keep the engine (and its GPU
    # memory) alive after this function returns
    print(f"{name} s{seq} b{block} {precision} z{zero} a{accum}{' compiled' if compiled else ''}: "
          f"{out['samples_per_s']} samples/s, "
          f"MFU {out['mfu']:.3f}, {out['tflop_per_sample']} TFLOP/sample", flush=True)  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    ap = cli.script_parser(__file__, __doc__)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--seq", default="2048,4096", help="tokens per sample")
    ap.add_argument("--blocks", default="7,16", help="DSpark block sizes")
    ap.add_argument("--layers", type=int, default=5, help="draft layers")
    ap.add_argument("--anchors", type=int, default=512, help="anchors per sample")
    ap.add_argument("--markov-rank", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--grad-accums", default="1",
                    help="micro-batches per optimizer step (train.grad_accum): the optimizer's "
                         "cost spread over more samples")  # fmt: skip
    ap.add_argument("--zero-stages", default="1", help="ZeRO stages (train.zero_stage)")
    ap.add_argument("--precisions", default="bf16", help="train.precision: bf16, amp")
    ap.add_argument("--compile-layers", default="off",
                    help="train.compile_layers: off, on or off,on (keys end _c)")  # fmt: skip
    ap.add_argument("--whole-tiles", default="on",
                    help="flex attention skips the mask rule in whole tiles (packed_attention."
                         "WHOLE_TILES): on, off or on,off (keys end _p where off)")  # fmt: skip
    ap.add_argument("--steps", type=int, default=6, help="timed steps (after two warm-up)")
    ap.add_argument("--profile-optimizer", action="store_true",
                    help="list the optimizer step's heaviest device operators")  # fmt: skip
    ap.add_argument("--profile-step", action="store_true",
                    help="list a whole step's 20 heaviest device operators")  # fmt: skip
    ap.add_argument("--tiny", action="store_true", help="shrunk shapes (a CPU smoke run)")
    args = ap.parse_args(argv)
    unknown = [s for s in args.shapes.split(",") if s not in SHAPES]
    if unknown:
        ap.error(f"--shapes: unknown {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    from splitserve.config import PRECISIONS

    bad = [p for p in args.precisions.split(",") if p not in PRECISIONS]
    if bad:
        ap.error(f"--precisions: unknown {', '.join(bad)}; known: {', '.join(PRECISIONS)}")
    accums = args.grad_accums.split(",")
    if not all(a.isdigit() and int(a) >= 1 for a in accums):
        ap.error(f"--grad-accums: whole numbers >= 1, comma-separated; got {args.grad_accums!r}")
    switches = {"off": False, "on": True}
    for flag, value in (
        ("--compile-layers", args.compile_layers),
        ("--whole-tiles", args.whole_tiles),
    ):
        if not set(value.split(",")) <= switches.keys():
            ap.error(f"{flag}: off, on or off,on; got {value!r}")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)
    peak = matmul_rate(device, dtype)
    report = {
        "command": cli.command_line(ap, argv),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else platform.node(),
        "torch": torch.__version__,
        "dtype": str(dtype).removeprefix("torch."),
        "matmul_tflops": round(peak / 1e12, 1),
        "trainer": {},
    }
    for name in args.shapes.split(","):
        for seq in (int(x) for x in args.seq.split(",")):
            for block, precision, zero, accum, compiled, whole in itertools.product(
                (int(x) for x in args.blocks.split(",")),
                args.precisions.split(","),
                (int(x) for x in args.zero_stages.split(",")),
                (int(x) for x in args.grad_accums.split(",")),
                (switches[x] for x in args.compile_layers.split(",")),
                (switches[x] for x in args.whole_tiles.split(",")),
            ):
                key = f"{name}_s{seq}_b{block}_{precision}_z{zero}"
                key += f"_a{accum}" if accum != 1 else ""  # one micro-batch a step: keys as before
                key += "_c" if compiled else ""
                key += "" if whole else "_p"
                packed_attention.WHOLE_TILES = whole
                try:
                    report["trainer"][key] = measure(
                        name,
                        seq,
                        block,
                        precision,
                        zero,
                        accum,
                        compiled,
                        args,
                        device,
                        dtype,
                        peak,
                    )
                except torch.OutOfMemoryError as exc:
                    report["trainer"][key] = {"error": f"out of memory: {str(exc)[:200]}"}
                gc.collect()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                write_report(args.out, report)  # after each: a cut run keeps what it measured
    best = {}
    for key, r in report["trainer"].items():
        if "mfu" in r:
            shape = r["shape"]
            if shape not in best or r["mfu"] > best[shape]["mfu"]:
                best[shape] = {k: r[k] for k in ("mfu", "samples_per_s", "tokens_per_s")}
                best[shape].update(peak_gb=r.get("peak_gb"), config=key)
    report["best"] = best
    write_report(args.out, report)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
