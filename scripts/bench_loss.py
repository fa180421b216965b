"""Benchmark: the training objective's forms: the autograd reference and the fused objective
(closed-form gradients) with each of its vocabulary kernels (torch, triton).

On a trainer-shaped micro-batch (smol_gpu: 16 sequences, up to 512 anchors each, block 7, a
3-layer DSpark draft with its Markov head, SmolLM2's 49,152-token vocabulary), for each form
and chunk size: the whole step (draft forward, loss, backward), the loss alone (forward and
backward from the draft's outputs), and peak memory. The floor beside them, measured in the same
run: the loss's three unavoidable bf16 matmuls (draft logits, target logits, gradient to the
hidden states) at the same rows. Also each form's agreement with the first on this batch.

    python scripts/bench_loss.py --out docs/results/runtime_h200/loss_h200.json [--sequences 16]
        [--length 320] [--chunk-rows 256 1024 4096] [--repeats 5] [--forms reference,torch,triton]

Random weights and random target states: this measures cost, not quality.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from bench_packing import load_target, make_sample, random_draft  # noqa: E402  (scripts/)
from benchlib import sync, timed  # noqa: E402

from draft_models import (  # noqa: E402
    DraftConfig,
    LossConfig,
    distillation_loss,
    pack_sequences,
)
from draft_models.models import DraftOutput  # noqa: E402
from serving import cli  # noqa: E402
from splitserve.target.config import resolve_dtype  # noqa: E402

FORMS = ("reference", "torch", "triton")  # autograd; the fused objective with each kernel


def loss_of(model, out, batch, form, chunk_rows):
    w2 = model.markov_head.markov_w2.weight if model.sequential_head is not None else None
    kernel = "torch" if form == "reference" else form
    cfg = LossConfig(**{**vars(model.cfg.loss), "chunk_rows": chunk_rows, "kernel": kernel})
    return distillation_loss(out, batch, model.target_head, cfg, w2, fused=form != "reference")


def peak_mib(fn, device) -> float | None:
    if device.type != "cuda":
        fn()
        return None
    sync(device)
    torch.cuda.reset_peak_memory_stats()
    fn()
    sync(device)
    return torch.cuda.max_memory_allocated() / 2**20


def main() -> None:
    ap = cli.script_parser(__file__, __doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--target-shape", default="smollm2_135m")
    ap.add_argument("--num-layers", type=int, default=3)
    ap.add_argument("--markov-rank", type=int, default=128)
    ap.add_argument("--sequences", type=int, default=16)
    ap.add_argument("--length", type=int, default=320, help="tokens per sequence (10 %% prompt)")
    ap.add_argument("--anchors", type=int, default=512)
    ap.add_argument("--chunk-rows", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--forms",
        default=",".join(FORMS),
        help="of: reference (autograd), torch, triton (the fused objective's kernels; "
        "triton needs CUDA)",
    )
    args = ap.parse_args()
    forms = args.forms.split(",")
    if not forms or any(f not in FORMS for f in forms):
        ap.error(f"--forms: expected a comma-separated list of {', '.join(FORMS)}")

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if "triton" in forms and device.type != "cuda":
        forms.remove("triton")
        print("note: no CUDA device, so no triton form", file=sys.stderr)
    dtype = resolve_dtype("auto", device)
    target = load_target(args.target_shape)
    cfg = DraftConfig(num_layers=args.num_layers, markov_rank=args.markov_rank)
    model, head = random_draft(target, cfg, device, dtype)
    embed = head.lm_head_weight
    with torch.no_grad():  # a non-zero Markov projection, as after training starts
        model.markov_head.markov_w2.weight.normal_(0, 0.02)
    nfeat = len(model.cfg.target_layer_ids)
    seqs = [
        make_sample(args.length, nfeat, target.hidden_size, target.vocab_size, device, dtype, i)
        for i in range(args.sequences)
    ]
    batch = pack_sequences(
        seqs,
        num_anchors=args.anchors,
        block_size=model.cfg.block_size,
        num_slots=model.cfg.num_slots,
        mask_token_id=model.cfg.mask_token_id,
        seed=0,
    ).to(device, dtype=dtype)
    rows = int(batch.label_mask.sum())

    def step(form, chunk):
        model.zero_grad(set_to_none=True)
        loss_of(model, model(batch), batch, form, chunk).loss.backward()

    out = model(batch)
    leaves = {
        k: (None if v is None else v.detach().requires_grad_(True))
        for k, v in vars(out).items()
        if isinstance(v, torch.Tensor) or v is None
    }

    def loss_only(form, chunk):
        loss_of(model, DraftOutput(**leaves), batch, form, chunk).loss.backward()

    for form in forms:  # warm-up: flex attention compiles on GPU, Triton compiles its kernel
        step(form, args.chunk_rows[0])
    runs = []
    for form in forms:
        for chunk in args.chunk_rows:
            run = {
                "form": form,
                "chunk_rows": chunk,
                "step_ms": 1e3 * timed(lambda: step(form, chunk), args.repeats, device),  # noqa: B023
                "loss_ms": 1e3 * timed(lambda: loss_only(form, chunk), args.repeats, device),  # noqa: B023
                "step_peak_mib": peak_mib(lambda: step(form, chunk), device),  # noqa: B023
            }
            runs.append(run)
            print(json.dumps(run), flush=True)

    # the floor: the three bf16 matmuls every form must do, at the same rows
    h = torch.randn(rows, target.hidden_size, device=device, dtype=dtype)
    grad = torch.randn(rows, target.vocab_size, device=device, dtype=dtype)

    def matmuls():
        h @ embed.T
        h @ embed.T
        grad @ embed

    floor_ms = 1e3 * timed(matmuls, args.repeats, device)

    # agreement of each form with the first (in the run's dtype): loss, gradients, c*
    results = {}
    for form in forms:
        model.zero_grad(set_to_none=True)
        res = loss_of(model, model(batch), batch, form, args.chunk_rows[0])
        res.loss.backward()
        grads = {n: p.grad.float().clone() for n, p in model.named_parameters()}
        results[form] = (res, grads)
    b, gb = results[forms[0]]
    agreement = {
        f"{form}_vs_{forms[0]}": {
            "loss_rel_diff": abs(a.loss.item() - b.loss.item()) / abs(b.loss.item()),
            "max_grad_rel_diff": max(
                float((ga[n] - gb[n]).norm() / (gb[n].norm() + 1e-12)) for n in gb
            ),
            "c_star_max_abs_diff": max(abs(x - y) for x, y in zip(a.c_star, b.c_star, strict=True)),
        }
        for form, (a, ga) in results.items()
        if form != forms[0]
    }
    fastest = {f: min(r["step_ms"] for r in runs if r["form"] == f) for f in forms}
    report = {
        "device": torch.cuda.get_device_name()
        if device.type == "cuda"
        else platform.processor() or "cpu",
        "torch": torch.__version__,
        "dtype": str(dtype),
        "command": cli.command_line(ap, None),
        "target_shape": args.target_shape,
        "vocab": target.vocab_size,
        "draft_parameters": model.trainable_parameter_count(),
        "sequences": args.sequences,
        "length": args.length,
        "anchors": args.anchors,
        "blocks": batch.num_blocks,
        "rows": rows,
        "runs": runs,
        "loss_matmul_floor_ms": floor_ms,
        "step_ms_best": fastest,
        "agreement": agreement,
    }
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}), flush=True)
    Path(args.out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
