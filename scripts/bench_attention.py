"""The target's verify attention on its own: which kernel a decode-shaped block (W queries over a
cache-length bucket of E keys, GQA, one request) should use.

Why: a verify block's few queries are latency-bound, whatever kernel runs them (their keys are
read in well under a microsecond). This times the ways the same masked attention can be
computed, each as a CUDA graph of `--layers` back-to-back calls (as in the step), and checks
each against an fp32 reference. Variants:
- `sdpa`: a boolean mask, torch picks the kernel; the same call forced to `cudnn`, `efficient`
  or `math`; and with an additive mask (`sdpa_bias`: what `StaticDecoder` runs since 2026-12-02);
- `folded`: the masked softmax written out, each KV head's query group folded into the query
  axis (two batched GEMMs, one masked softmax), eager and torch.compile'd;
- `flex`: compiled flex_attention with a mask read from the positions tensor.
A variant that wins here need not win inside a step: the compiled fold (6.4-7.8 us alone) made
the compiled decode step slower (tried 2026-12-02, not kept). The kept variants' figures:
docs/results/runtime_h200 (`verify_widths.attention`).

    python scripts/bench_attention.py --out docs/results/runtime_h200/attention_h200.json

On CPU it runs (two replays, no compiled variants) to check the script, not to measure."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from benchlib import back_to_back_ms, write_report
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not
from serving import cli  # noqa: E402

BACKENDS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}


def folded(q, k, v, visible):
    """q [B, Hq, W, D], k/v [B, Hk, E, D], visible [B, 1, W, E] -> [B, Hq, W, D]."""
    b, hq, w, d = q.shape
    hk = k.shape[1]
    g = hq // hk
    qf = q.reshape(b, hk, g * w, d)  # the group's heads are adjacent (repeat_interleave order)
    scores = torch.matmul(qf, k.transpose(-1, -2)).float() * d**-0.5
    mask = visible.expand(b, g, w, -1).reshape(b, 1, g * w, -1)
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1).to(v.dtype)
    return torch.matmul(probs, v).view(b, hq, w, d)


def variants(hq: int, hk: int, compile: bool):
    """name -> attention(q, k, v, visible, bias); the compiled fold only with `compile`."""

    def sdpa(q, k, v, visible, bias):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=visible, enable_gqa=hq != hk)

    def forced(name):
        def run(q, k, v, visible, bias):
            with sdpa_kernel(BACKENDS[name]):
                return sdpa(q, k, v, visible, bias)

        return run

    def sdpa_bias(q, k, v, visible, bias):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=hq != hk)

    out = {"sdpa": sdpa, **{f"sdpa_{n}": forced(n) for n in BACKENDS}, "sdpa_bias": sdpa_bias}
    out["folded"] = lambda q, k, v, visible, bias: folded(q, k, v, visible)
    if compile:
        compiled = torch.compile(folded, dynamic=False)
        out["folded_compiled"] = lambda q, k, v, visible, bias: compiled(q, k, v, visible)
    return out


def flex_variant(pos: torch.Tensor, w: int, e: int, hq: int, hk: int, device):
    """Compiled flex_attention whose mask reads `pos` [B, W] (a buffer the graph's replays may
    change), with every key tile kept (the mask decides inside)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def mask_mod(b, h, qi, ki):
        return ki <= pos[b, qi]

    block_mask = create_block_mask(mask_mod, pos.shape[0], None, w, e, device=device)
    attend = torch.compile(flex_attention, dynamic=False)

    def run(q, k, v, visible, bias):
        return attend(q, k, v, block_mask=block_mask, enable_gqa=hq != hk)

    return run


def main() -> None:
    ap = argparse.ArgumentParser(
        prog=cli.script_prog(__file__), description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--extents", default="256,512,1024,2048")
    ap.add_argument("--widths", default="1,8")
    ap.add_argument("--heads", type=int, default=9)
    ap.add_argument("--kv-heads", type=int, default=3)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=30, help="calls per graph (the target's depth)")
    ap.add_argument("--replays", type=int, default=200)
    args = ap.parse_args()
    on_gpu = torch.cuda.is_available()
    device = torch.device("cuda" if on_gpu else "cpu")
    dtype = torch.bfloat16 if on_gpu else torch.float32
    replays = args.replays if on_gpu else 2
    hq, hk, d = args.heads, args.kv_heads, args.head_dim
    rows = []
    for e in map(int, args.extents.split(",")):
        for w in map(int, args.widths.split(",")):
            gen = torch.Generator(device).manual_seed(0)
            q = torch.randn(1, hq, w, d, device=device, dtype=dtype, generator=gen)
            k = torch.randn(1, hk, e, d, device=device, dtype=dtype, generator=gen)
            v = torch.randn(1, hk, e, d, device=device, dtype=dtype, generator=gen)
            pos = (e // 2 + torch.arange(w, device=device))[None]  # half the bucket filled
            visible = torch.arange(e, device=device)[None, None, None] <= pos[:, None, :, None]
            bias = torch.zeros(visible.shape, dtype=dtype, device=device)
            bias.masked_fill_(~visible, float("-inf"))
            ref = folded(q.float(), k.float(), v.float(), visible)
            runs = variants(hq, hk, compile=on_gpu)
            if on_gpu:
                runs["flex"] = flex_variant(pos, w, e, hq, hk, device)
            for name, fn in runs.items():
                row = {"extent": e, "width": w, "variant": name}
                try:
                    row.update(measure(fn, (q, k, v, visible, bias), ref, args.layers, replays))
                except Exception as err:  # a kernel that refuses this shape: say so, go on
                    row["error"] = f"{type(err).__name__}: {str(err)[:200]}"
                rows.append(row)
                print(row, flush=True)
    write_report(
        args.out,
        {
            "device": torch.cuda.get_device_name() if on_gpu else "cpu (not a measurement)",
            "torch": torch.__version__,
            "command": cli.command_line(ap, None),
            "shape": {"heads": hq, "kv_heads": hk, "head_dim": d, "dtype": str(dtype)},
            "layers_per_graph": args.layers,
            "replays": replays,
            "rows": rows,
        },
    )


def measure(fn, inputs, ref, layers: int, replays: int) -> dict:
    """us per call of `fn` replayed in a CUDA graph of `layers` calls (eager on CPU), and its
    largest error against the fp32 reference."""
    out = fn(*inputs)
    err = (out.float() - ref).abs().max().item()
    device = out.device
    if device.type == "cuda":
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                fn(*inputs)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(layers):
                fn(*inputs)

        def run():
            graph.replay()
    else:

        def run():
            for _ in range(layers):
                fn(*inputs)

    us = 1000 * back_to_back_ms(run, replays, device) / layers
    return {"us_per_call": round(us, 3), "max_abs_err": err}


if __name__ == "__main__":
    main()
