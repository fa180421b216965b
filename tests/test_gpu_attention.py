"""The Triton decode attention (splitserve/target/runtime/attention_kernels.py) against fp32
arithmetic, and the static runtime with it against the runtime without it (skipped without a GPU
and Triton; run on the device machine: `python -m pytest -q tests/test_gpu_attention.py`). The
kernel tests also run on CPU tensors in fp32 under Triton's interpreter
(tests/test_kernels_interpreted.py)."""

import pytest
import torch
from interpreted import DEVICE, DTYPE, INTERPRETED, STEP_TOL, TOL, kernels_run, on_gpu_only

from splitserve.target.runtime import attention_kernels

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not kernels_run(attention_kernels), reason="needs a CUDA device and Triton"),
]


def reference(q, kc, vc, rows, pos, scale, window):
    """fp32 masked softmax over each row's cache: [B, W, Hq, D]."""
    b, w, hq, d = q.shape
    hk, length = kc.shape[1], kc.shape[2]
    k = kc[rows].float().repeat_interleave(hq // hk, 1)  # [B, Hq, L, D]
    v = vc[rows].float().repeat_interleave(hq // hk, 1)
    s = torch.einsum("bwhd,bhld->bhwl", q.float(), k) * scale
    key = torch.arange(length, device=DEVICE)
    seen = key[None, None, :] <= pos[:, :, None]  # [B, W, L]
    if window:
        seen &= key[None, None, :] > pos[:, :, None] - window
    s = s.masked_fill(~seen[:, None], float("-inf"))
    return torch.einsum("bhwl,bhld->bwhd", s.softmax(-1), v)


@pytest.mark.parametrize(
    "rows,width,heads,kv_heads,dim,length,window",
    [
        (1, 1, 32, 8, 128, 600, 0),  # batch-1 decode, GQA 4: many key splits
        (1, 8, 32, 8, 128, 600, 0),  # a verify block of 8
        (1, 16, 32, 4, 128, 300, 0),  # 16 x 8 = 128 query rows, the most a tile takes
        (3, 4, 8, 8, 64, 257, 0),  # no GQA, three rows, a length not a tile multiple
        (5, 1, 9, 3, 64, 1025, 0),  # SmolLM2's heads
        (2, 8, 8, 4, 256, 700, 100),  # Gemma's head dim, a sliding window
        (1, 16, 16, 4, 256, 300, 0),  # head dim 256 at its most rows (64)
        # a regeneration batch: one split per program (minutes interpreted; below, its small kin)
        pytest.param(256, 1, 32, 8, 128, 1025, 0, marks=on_gpu_only),
        (36, 1, 8, 8, 32, 70, 0),  # 36 rows x 8 key heads >= 264 programs: one split each
    ],
)
def test_decode_attention_equals_fp32(rows, width, heads, kv_heads, dim, length, window):
    g = torch.Generator(device=DEVICE).manual_seed(0)
    bf = dict(device=DEVICE, dtype=DTYPE)
    kc = torch.randn(rows + 2, kv_heads, length, dim, generator=g, **bf)
    vc = torch.randn(rows + 2, kv_heads, length, dim, generator=g, **bf)
    q = torch.randn(rows, width, heads, dim, generator=g, **bf)
    cache_rows = torch.randperm(rows + 2, generator=g, device=DEVICE)[:rows]  # scattered rows
    # each row at its own length (some short, one at the end of the cache)
    last = torch.randint(width, length, (rows,), generator=g, device=DEVICE)
    last[0] = length - 1
    pos = last[:, None] - width + 1 + torch.arange(width, device=DEVICE)[None]
    scale = dim**-0.5
    assert width * heads // kv_heads <= attention_kernels.max_rows(dim)
    got = attention_kernels.decode_attention(q, kc, vc, cache_rows, pos, scale, window or None)
    want = reference(q, kc, vc, cache_rows, pos, scale, window)
    torch.testing.assert_close(got.float(), want, **TOL)
    # splits sized from a shorter `length` (a step's extent bucket) cover the same keys
    extent = int(last.max()) + 1
    short = attention_kernels.decode_attention(q, kc, vc, cache_rows, pos, scale, window, extent)
    torch.testing.assert_close(short.float(), want, **TOL)
    # keys past a row's newest query never count: garbage there changes nothing
    kc2 = kc.clone()
    for i, r in enumerate(cache_rows.tolist()):
        kc2[r, :, int(last[i]) + 1 :] = 1e4
    again = attention_kernels.decode_attention(q, kc2, vc, cache_rows, pos, scale, window or None)
    torch.testing.assert_close(again, got, atol=0, rtol=0)


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen3", "gemma3_text", "qwen3_moe"])
def test_static_steps_with_the_kernel_equal_steps_without(model_type, monkeypatch):
    """Tiny targets (bf16 on CUDA, fp32 interpreted): verify steps of widths 1, 4 and 8 after a
    prompt, with the kernel and with SDPA over the masked cache: the same logits, states and
    greedy tokens."""
    from test_static_families import family_target

    from splitserve.target.runtime.static_model import StaticDecoder

    monkeypatch.setattr(StaticDecoder, "use_decode_kernel", True)  # whatever a benchmark set
    model = family_target(model_type, head_dim=16).to(DEVICE, DTYPE)  # the kernel's least
    seq = torch.randint(1, 96, (1, 40), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    nets = [StaticDecoder(model, max_rows=1, max_len=64, capture_ids=[0, 2]) for _ in range(2)]
    assert nets[0].decode_kernel or INTERPRETED  # (the runtime takes it on CUDA only)
    nets[0].decode_kernel, nets[1].decode_kernel = True, False
    for net in nets:
        net(seq[:, :20], torch.arange(20, device=DEVICE)[None], fresh=True)
    start = 20
    for width in (1, 4, 8, 1):
        ids, pos = seq[:, start : start + width], torch.arange(start, start + width, device=DEVICE)
        outs = [net(ids, pos[None]) for net in nets]
        for a, b in zip(*outs, strict=True):
            torch.testing.assert_close(a.float(), b.float(), **STEP_TOL)
        assert torch.equal(outs[0][0].argmax(-1), outs[1][0].argmax(-1))
        start += width
