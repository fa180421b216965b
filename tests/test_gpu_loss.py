"""The Triton loss kernel against the torch one (skipped without a GPU; run on the device
machine: `python -m pytest -q tests/test_gpu_loss.py`)."""

import pytest
import torch
from conftest import tiny_draft
from test_losses import _train_batch

from draft_models import DraftOutput, LossConfig, distillation_loss
from draft_models.loss_kernels import torch_terms, triton_terms

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
CUDA = torch.device("cuda")


def _logits(rows, vocab, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    z_d = (3 * torch.randn(rows, vocab, generator=g)).to(dtype)
    z_t = (z_d.float() + torch.randn(rows, vocab, generator=g)).to(dtype)  # close, not equal
    z_t[0] = z_d[0]  # identical rows: p_d == p_t, every sign 0, c* 1
    # ties: the maximum twice, in different tiles and in one tile; torch takes the first index
    z_d[1, 10] = z_d[1, vocab - 3] = z_d[1].max() + 1
    z_t[1, vocab - 3] = z_t[1].max() + 1
    z_d[2, 7] = z_d[2, 8] = z_d[2].max() + 1
    z_t[2, 8] = z_t[2].max() + 1
    labels = torch.randint(0, vocab, (rows,), generator=g)
    labels[3] = vocab - 1  # the last id, in the masked tail of the last tile
    coef = torch.rand(2, rows, generator=g)
    return [t.to(CUDA) for t in (z_d, z_t, labels, coef[0], coef[1])]


@pytest.mark.parametrize("divergence", ["tv", "forward_kl"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("grad", [True, False])
def test_triton_kernel_equals_torch_kernel(divergence, dtype, grad):
    """Terms, metrics and the logits' gradient, over a vocabulary that is no multiple of the
    kernel's tile (5,003), with identical rows, tied maxima and the last id as a label."""
    z_d, z_t, labels, c_ce, c_di = _logits(37, 5003, dtype, seed=1)
    grad_dtype = dtype if grad else None
    ref = torch_terms(z_d, z_t, labels, c_ce, c_di, divergence, grad_dtype)
    got = triton_terms(z_d, z_t, labels, c_ce, c_di, divergence, grad_dtype)
    for name, a, b in zip(("ce", "distill", "c_star"), got[:3], ref[:3], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=name)
    assert torch.equal(got[3], ref[3])  # top1, ties included
    assert got[2][0] == 1.0 and got[3][:3].tolist() == [1.0, 0.0, 0.0]
    if grad:
        scale = float(ref[4].float().abs().max())
        tol = 1e-6 if dtype == torch.float32 else 1e-2  # bf16: one rounding of g
        torch.testing.assert_close(got[4].float(), ref[4].float(), rtol=tol, atol=tol * scale)
    else:
        assert got[4] is None and ref[4] is None


@pytest.mark.parametrize(
    "variant,loss_fields",
    [("dspark", {}), ("dspark_rnn", {"divergence": "forward_kl"}), ("dflash", {}), ("eagle3", {})],
)
def test_objective_with_the_triton_kernel_equals_the_torch_kernel(variant, loss_fields):
    """The fused objective on a tiny draft's outputs (computed on CPU: the tiny heads are too
    narrow for compiled flex attention on CUDA), moved to the GPU as leaves: loss, parts,
    metrics and the gradient of every input (hidden states, Markov latents and W2, confidence
    logits) agree between the two kernels (fp32, uneven chunks)."""
    model = tiny_draft(variant)
    if model.sequential_head is not None:
        with torch.no_grad():
            model.markov_head.markov_w2.weight.normal_(0, 0.1)
    batch = _train_batch(model)
    out = model(batch)
    head = model.target_head.to(device=CUDA)
    batch = batch.to(CUDA, dtype=torch.float32)
    w2_cpu = model.markov_head.markov_w2.weight if model.sequential_head is not None else None
    results = []
    for kernel in ("triton", "torch"):
        leaves = {
            k: None if v is None else v.detach().to(CUDA).requires_grad_(True)
            for k, v in vars(out).items()
            if isinstance(v, torch.Tensor) or v is None
        }
        w2 = None if w2_cpu is None else w2_cpu.detach().to(CUDA).requires_grad_(True)
        cfg = LossConfig(
            **{**vars(model.cfg.loss), "chunk_rows": 5, "kernel": kernel, **loss_fields}
        )
        res = distillation_loss(DraftOutput(**leaves), batch, head, cfg, w2)
        res.loss.backward()
        grads = {k: v.grad for k, v in leaves.items() if v is not None and v.grad is not None}
        if w2 is not None:
            grads["w2"] = w2.grad
        results.append((res, grads))
    (tri, g_tri), (ref, g_ref) = results
    assert tri.loss.item() == pytest.approx(ref.loss.item(), rel=1e-5)
    assert tri.parts == pytest.approx(ref.parts, rel=1e-5)
    assert tri.c_star == pytest.approx(ref.c_star, rel=1e-5, abs=1e-6)
    assert tri.top1 == ref.top1
    assert g_tri.keys() == g_ref.keys() and "hidden" in g_ref
    for name, ref_grad in g_ref.items():
        atol = 1e-5 * float(ref_grad.abs().max())
        torch.testing.assert_close(g_tri[name], ref_grad, rtol=1e-4, atol=atol, msg=name)


def test_pruned_vocabulary_objective_with_the_triton_kernel_equals_the_torch_kernel():
    """A pruned draft (draft_vocab_size, K = 49 of 97 ids, some labels outside): the Triton
    kernel runs unchanged on [rows, K] logits; loss, parts and the gradients of the hidden
    states, Markov W2 and the draft's own head agree with the torch kernel's."""
    from test_draft_vocab import tiny_pruned

    model = tiny_pruned(list(range(0, 97, 2)))
    with torch.no_grad():
        model.markov_head.markov_w2.weight.normal_(0, 0.1)
    batch = _train_batch(model)
    out = model(batch)
    head = model.target_head.to(device=CUDA)
    batch = batch.to(CUDA, dtype=torch.float32)
    vocab = model.vocab.to(CUDA)
    results = []
    for kernel in ("triton", "torch"):
        hidden = out.hidden.detach().to(CUDA).requires_grad_(True)
        latent = out.seq_latent.detach().to(CUDA).requires_grad_(True)
        conf = out.confidence_logit.detach().to(CUDA).requires_grad_(True)
        w2 = model.markov_head.markov_w2.weight.detach().to(CUDA).requires_grad_(True)
        own = model.lm_head.weight.detach().to(CUDA).requires_grad_(True)
        cfg = LossConfig(**{**vars(model.cfg.loss), "chunk_rows": 5, "kernel": kernel})
        res = distillation_loss(
            DraftOutput(hidden, latent, conf), batch, head, cfg, w2, vocab=vocab, output_head=own
        )
        res.loss.backward()
        results.append((res, {"hidden": hidden.grad, "w2": w2.grad, "head": own.grad}))
    (tri, g_tri), (ref, g_ref) = results
    assert tri.loss.item() == pytest.approx(ref.loss.item(), rel=1e-5)
    assert tri.parts == pytest.approx(ref.parts, rel=1e-5)
    assert tri.top1 == ref.top1
    for name, ref_grad in g_ref.items():
        atol = 1e-5 * float(ref_grad.abs().max())
        torch.testing.assert_close(g_tri[name], ref_grad, rtol=1e-4, atol=atol, msg=name)
