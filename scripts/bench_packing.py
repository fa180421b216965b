"""Benchmark: draft forward+backward (packed blocks + chunked loss) against context length.

With the number of anchors fixed, time and memory should grow about linearly with the context
length (one pass over the injected context, plus attention of anchors x gamma queries to it),
never quadratically. Writes JSON; also, with --check, compares the flex and sdpa attention
backends (outputs and gradients) on the same batch.

    python scripts/bench_packing.py --out docs/results/splits/bench_packing.json
        [--target-shape smollm2_135m] [--lengths 1024 4096 16384 32768] [--anchors 512] [--check]

Random weights and random target states: this measures cost, not quality.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from benchlib import sync  # noqa: E402  (scripts/)

from draft_models import (  # noqa: E402
    DraftConfig,
    FrozenTargetHead,
    SequenceSample,
    TargetSpec,
    build_draft,
    distillation_loss,
    pack_sequences,
)
from splitserve.target.config import resolve_dtype  # noqa: E402

CONF = Path(__file__).resolve().parents[1] / "conf"


def load_target(name: str) -> TargetSpec:
    return TargetSpec(**yaml.safe_load((CONF / "target_shape" / f"{name}.yaml").read_text()))


def make_sample(
    length: int, num_features: int, hidden: int, vocab: int, device, dtype, seed: int
) -> SequenceSample:
    g = torch.Generator(device="cpu").manual_seed(seed)
    mask = torch.ones(length, dtype=torch.bool)
    mask[: length // 10] = False  # a prompt, then the assistant turn
    return SequenceSample(
        input_ids=torch.randint(0, vocab, (length,), generator=g),
        loss_mask=mask,
        aux_hidden=torch.randn(length, num_features * hidden, generator=g).to(device, dtype),
        final_hidden=torch.randn(length, hidden, generator=g).to(device, dtype),
    )


def random_draft(target: TargetSpec, cfg: DraftConfig, device, dtype):
    """(draft, frozen head): random weights (seed 0) over a random tied embedding, for cost."""
    g = torch.Generator().manual_seed(0)
    embed = (torch.randn(target.vocab_size, target.hidden_size, generator=g) * 0.02).to(
        device, dtype
    )
    head = FrozenTargetHead(embed, embed)
    torch.manual_seed(0)
    return build_draft(cfg, target, head).to(device, dtype), head


def step(model, batch, backend):
    out = model(batch, backend=backend)
    w2 = model.markov_head.markov_w2.weight if model.sequential_head is not None else None
    res = distillation_loss(out, batch, model.target_head, model.cfg.loss, w2)
    res.loss.backward()
    return out, res


def measure(model, batch, backend, device, repeats):
    step(model, batch, backend)  # warm-up (compiles flex on GPU)
    model.zero_grad(set_to_none=True)
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(repeats):
        step(model, batch, backend)
        model.zero_grad(set_to_none=True)
    sync(device)
    seconds = (time.perf_counter() - start) / repeats
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None
    return seconds, peak


def check_backends(model, batch):
    """Outputs and gradients of flex vs sdpa on the same batch (fp32)."""
    results = {}
    for backend in ("sdpa", "flex"):
        model.zero_grad(set_to_none=True)
        out, res = step(model, batch, backend)
        results[backend] = (
            out.hidden.detach(),
            {n: p.grad.detach().clone() for n, p in model.named_parameters()},
        )
    (h0, g0), (h1, g1) = results["sdpa"], results["flex"]
    return {
        "max_abs_hidden_diff": float((h0 - h1).abs().max()),
        "max_rel_grad_diff": max(
            float((g0[n] - g1[n]).norm() / (g0[n].norm() + 1e-12)) for n in g0
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--target-shape", default="smollm2_135m")
    ap.add_argument("--num-layers", type=int, default=2)
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--anchors", type=int, default=512)
    ap.add_argument(
        "--sequences", type=int, default=1, help="sequences of that length packed per batch"
    )
    ap.add_argument("--block-size", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backend", default="auto", choices=["auto", "flex", "sdpa"])
    ap.add_argument(
        "--check", action="store_true", help="compare flex and sdpa outputs/gradients first"
    )
    args = ap.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = resolve_dtype("auto", device)
    target = load_target(args.target_shape)
    cfg = DraftConfig(num_layers=args.num_layers, block_size=args.block_size)
    model, head = random_draft(target, cfg, device, dtype)
    nfeat = len(model.cfg.target_layer_ids)
    report = {
        "device": torch.cuda.get_device_name()
        if device.type == "cuda"
        else platform.processor() or "cpu",
        "torch": torch.__version__,
        "dtype": str(dtype),
        "target_shape": args.target_shape,
        "draft_parameters": model.trainable_parameter_count(),
        "anchors": args.anchors,
        "block_size": args.block_size,
        "sequences_per_batch": args.sequences,
        "backend": args.backend,
        "runs": [],
    }
    if args.check:
        if device.type != "cuda":
            raise SystemExit("--check needs a GPU: flex_attention has no backward on CPU")
        model32 = build_draft(cfg, target, head.to(dtype=torch.float32)).to(device)
        s = make_sample(
            2048, nfeat, target.hidden_size, target.vocab_size, device, torch.float32, 1
        )
        b = pack_sequences(
            [s],
            num_anchors=64,
            block_size=args.block_size,
            num_slots=model32.cfg.num_slots,
            mask_token_id=model32.cfg.mask_token_id,
            seed=0,
        ).to(device)
        report["backend_check"] = check_backends(model32, b)
        print("backend check", report["backend_check"], flush=True)
    for length in args.lengths:
        seqs = [
            make_sample(length, nfeat, target.hidden_size, target.vocab_size, device, dtype, i)
            for i in range(args.sequences)
        ]
        batch = pack_sequences(
            seqs,
            num_anchors=args.anchors,
            block_size=args.block_size,
            num_slots=model.cfg.num_slots,
            mask_token_id=model.cfg.mask_token_id,
            seed=0,
        ).to(device)
        seconds, peak = measure(model, batch, args.backend, device, args.repeats)
        run = {
            "context_length": length,
            "blocks": batch.num_blocks,
            "step_seconds": seconds,
            "peak_mib": peak,
        }
        report["runs"].append(run)
        print(json.dumps(run), flush=True)
    Path(args.out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
