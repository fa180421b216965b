"""What the draft's packed flex attention costs per new batch shape, compilation included.

    python scripts/bench_flex_compile.py --out docs/results/runtime_h200/flex_compile.json \
        [--batches 5]

Packs `--batches` random batches shaped like a training micro-batch (16 sequences of 150-511
context tokens, 96 anchors each, blocks of 8: Q = 12,288 queries, K ~ 17-18k keys, bf16, 9 query
and 3 key heads of 64) and times, per batch, building the attention plan's BlockMask plus the
forward, and the backward. Every batch has a new K, so the first rows show what compilation
costs before the first training step and whether a new shape compiles again.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from draft_models.packed_attention import AttentionPlan, TokenIndex  # noqa: E402
from serving import cli  # noqa: E402


def packed_batch(g: torch.Generator, device, seqs=16, anchors=96, block=8):
    ctx, blocks, b = [], [], 0
    for s in range(seqs):
        n = int(torch.randint(150, 512, (1,), generator=g))
        minus = torch.full((n,), -1)
        ctx.append((torch.full((n,), s), torch.arange(n), minus, minus))
        for a in torch.randint(1, n - 1, (min(anchors, n - 2),), generator=g).tolist():
            slot = torch.arange(block)
            blocks.append((torch.full((block,), s), a + slot, torch.full((block,), b), slot))
            b += 1

    def index(parts):
        return TokenIndex(*(torch.cat(f).to(device) for f in zip(*parts, strict=True)))

    q = index(blocks)
    return q, index(ctx).cat(q)


def main(argv=None) -> None:
    p = cli.script_parser(__file__, __doc__)
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--batches", type=int, default=5, help="batches, each of a new shape")
    args = p.parse_args(argv)
    if args.batches < 1:
        p.error("--batches must be >= 1")
    if not torch.cuda.is_available():
        p.error("needs a GPU (flex attention is compiled only there)")
    device = torch.device("cuda")
    g = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(args.batches):
        q_index, k_index = packed_batch(g, device)
        shape = dict(device=device, dtype=torch.bfloat16, requires_grad=True)
        q = torch.randn(len(q_index), 9, 64, **shape)
        k, v = (torch.randn(len(k_index), 3, 64, **shape) for _ in range(2))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = AttentionPlan(q_index, k_index, backend="flex")(q, k, v, 0.125)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        out.float().sum().backward()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        rows.append(
            {"Q": len(q_index), "K": len(k_index), "mask_and_forward_s": round(t1 - t0, 3),
             "backward_s": round(t2 - t1, 3)}
        )  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    name = torch.cuda.get_device_name(device)
    result = {"device": name, "torch": torch.__version__, "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
