"""Packing onto a GPU (skipped without one; run on the device machine:
`python -m pytest -q tests/test_gpu_packing.py`): the batch equals the one packed on the host,
packing samples received in pinned host memory never waits for the device, and compiled flex
attention over a packed batch's BlockMask (partial and full tiles) equals SDPA, forward and
backward."""

from dataclasses import fields

import pytest
import torch
from conftest import random_sample, replace_sample
from test_packing import multi_tile_index

from draft_models import pack_sequences
from draft_models.packing import host_tokens

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
CUDA = torch.device("cuda")
ARGS = dict(num_anchors=24, block_size=7, num_slots=8, mask_token_id=5, seed=3)


def _samples():
    """Uneven lengths, one sample with no assistant token (packs to nothing), bf16 states."""
    out = [random_sample(n, seed=i, assistant_from=n // 3) for i, n in enumerate((90, 41, 300))]
    out.append(random_sample(12, seed=9, assistant_from=12))
    return [
        replace_sample(
            s, aux_hidden=s.aux_hidden.bfloat16(), final_hidden=s.final_hidden.bfloat16()
        )
        for s in out
    ]


def _pinned(samples):
    """The samples with their hidden states in pinned host memory, as the trainer's receiver
    leaves them."""
    return [
        replace_sample(
            s, aux_hidden=s.aux_hidden.pin_memory(), final_hidden=s.final_hidden.pin_memory()
        )
        for s in samples
    ]


def _assert_same(a, b):
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        pairs = zip(x.fields(), y.fields(), strict=True) if f.name == "ctx_index" else [(x, y)]
        for u, v in pairs:
            assert v.is_cuda and u.dtype == v.dtype, f.name
            assert torch.equal(u, v.cpu()), f.name


def test_pack_on_the_gpu_equals_pack_on_the_host():
    samples = _samples()
    ids = [11, 12, 13, 14]
    host = pack_sequences(samples, sample_ids=ids, **ARGS)
    # as the trainer does: tokens read on the host, hidden states moved from pinned memory
    pinned = _pinned(samples)
    tokens = host_tokens(pinned)
    on_gpu = pack_sequences(
        [s.hidden_to(CUDA) for s in pinned], sample_ids=ids, tokens=tokens, **ARGS
    )
    _assert_same(host, on_gpu)
    # samples wholly on the GPU (an NCCL link): the tokens are read back once
    _assert_same(host, pack_sequences([s.to_device(CUDA) for s in samples], sample_ids=ids, **ARGS))


def test_packing_pinned_samples_never_waits_for_the_device():
    samples = _pinned(_samples())
    tokens = host_tokens(samples)
    torch.cuda.synchronize()
    busy = torch.randn(4096, 4096, device=CUDA)
    for _ in range(20):  # queued work a synchronising pack would have to wait for
        busy = busy @ busy / 64
    torch.cuda.set_sync_debug_mode("error")
    try:
        batch = pack_sequences(
            [s.hidden_to(CUDA) for s in samples], sample_ids=[1, 2, 3, 4], tokens=tokens, **ARGS
        )
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert batch.num_blocks > 0 and batch.label_rows.is_cuda


def _on(device, index):
    """A TokenIndex moved to `device`."""
    return type(index)(*(f.to(device) for f in index.fields()))


@pytest.mark.parametrize(
    "window,block_causal", [(None, False), (8, False), (512, False), (None, True)]
)
def test_compiled_flex_over_partial_and_full_tiles_equals_sdpa_with_gradients(window, block_causal):
    """The training path (AttentionPlan "flex": flex compiled on CUDA over the BlockMask built
    from tile bounds, where full tiles skip the rule) against "sdpa" (the rule as a dense mask,
    one sequence at a time), fp32: outputs and the gradients of q, k and v. Inductor's CPU
    flex has no backward, so the backward's tile lists are checked here only."""
    from draft_models.packed_attention import AttentionPlan

    q_index, k_index = (_on(CUDA, i) for i in multi_tile_index())
    g = torch.Generator(device=CUDA).manual_seed(0)
    q = torch.randn(len(q_index), 4, 64, generator=g, device=CUDA)
    k, v = torch.randn(2, len(k_index), 2, 64, generator=g, device=CUDA)
    w = torch.randn(len(q_index), 4, 64, generator=g, device=CUDA)
    outs = {}
    for backend in ("flex", "sdpa"):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        plan = AttentionPlan(
            q_index, k_index, window=window, block_causal=block_causal, backend=backend
        )
        o = plan(*leaves, 0.125)
        (o * w).sum().backward()
        outs[backend] = [o.detach()] + [t.grad for t in leaves]
    for got, want in zip(outs["flex"], outs["sdpa"], strict=True):
        torch.testing.assert_close(got, want, rtol=2e-4, atol=2e-4)
