"""The vocabulary-wide part of the DSpark objective: per row, from the draft's and the target's
logits, the loss terms, the metrics and (in training) the gradient with respect to the logits.

Two interchangeable kernels (`LossConfig.kernel`), held equal by tests:
- "torch": eager elementwise ops. Each op reads and writes the whole [rows, vocab] tensor in
  fp32, about twenty passes per chunk; on an H200 the loss then took 75 % of a training step and
  11x its matmuls (docs/results/runtime_h200, loss_kernel).
- "triton": one program per row streams the bf16 logits three times (max and normaliser, then
  the sums, then the gradient) and keeps everything else in registers. Triton comes with CUDA
  builds of torch; on CPU (and where triton is missing) "auto" picks "torch".

Inputs: z_d, z_t [rows, V] logits (any float dtype; computed in fp32), labels [rows] (int64),
coef_ce, coef_distill [rows] fp32 (each term's weight for the row, already scaled). Outputs:
ce, distill, c_star, top1 [rows] fp32 and, with `grad_dtype`, g = d loss / d z_d [rows, V]
(= coef_ce * (p_d - e_y) + coef_distill * d distill / d z_d).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .config import LOSS_KERNELS as KERNELS

try:  # CUDA builds of torch ship triton; CPU builds do not
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the torch build
    triton = None


def torch_terms(z_d, z_t, labels, coef_ce, coef_distill, divergence, grad_dtype):
    """The reference kernel, in eager torch ops."""
    logp_d = F.log_softmax(z_d.float(), dim=-1)
    logp_t = F.log_softmax(z_t.float(), dim=-1)
    p_d, p_t = logp_d.exp(), logp_t.exp()
    lab = labels[:, None]
    ce = -logp_d.gather(-1, lab).squeeze(-1)
    top1 = (logp_d.argmax(-1) == logp_t.argmax(-1)).float()
    diff = p_d - p_t
    l1 = diff.abs().sum(-1)
    g = None
    if divergence == "forward_kl":
        distill = (p_t * (logp_t - logp_d)).sum(-1)
        if grad_dtype is not None:
            g = p_d * p_t.sum(-1, keepdim=True) - p_t
    else:
        distill = l1
        if grad_dtype is not None:
            g = diff.sign_().mul_(p_d)  # s * p_d, in place of diff
            g.addcmul_(p_d, g.sum(-1, keepdim=True), value=-1.0)
    del logp_d, logp_t, diff
    c_star = (1.0 - 0.5 * l1).clamp(0.0, 1.0)
    if g is not None:
        g.mul_(coef_distill[:, None]).add_(p_d * coef_ce[:, None])
        g.scatter_add_(-1, lab, -coef_ce[:, None])
        g = g.to(grad_dtype)
    return ce, distill, c_star, top1, g


if triton is not None:

    @triton.jit
    def _rows_kernel(
        ZD, ZT, LAB, CCE, CDI, OUT, G, R, V, s_zd, s_zt, s_g,
        FKL: tl.constexpr, GRAD: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        """One row: OUT[0..3, row] = ce, distill, c*, top1; G[row] = d loss / d z_d."""
        row = tl.program_id(0).to(tl.int64)
        zd, zt = ZD + row * s_zd, ZT + row * s_zt
        offs = tl.arange(0, BLOCK)
        # sweep 1: running max and normaliser of both distributions, and their argmax (the
        # first index of the maximum, as torch.argmax)
        m_d = float("-inf")
        m_t = float("-inf")
        n_d = 0.0
        n_t = 0.0
        a_d = 0
        a_t = 0
        for start in range(0, V, BLOCK):
            idx = start + offs
            ok = idx < V
            xd = tl.load(zd + idx, mask=ok, other=float("-inf")).to(tl.float32)
            xt = tl.load(zt + idx, mask=ok, other=float("-inf")).to(tl.float32)
            bd = tl.max(xd, 0)
            bt = tl.max(xt, 0)
            i_d = tl.argmax(xd, 0)
            i_t = tl.argmax(xt, 0)
            a_d = tl.where(bd > m_d, start + i_d, a_d)
            a_t = tl.where(bt > m_t, start + i_t, a_t)
            new_d = tl.maximum(m_d, bd)
            new_t = tl.maximum(m_t, bt)
            n_d = n_d * tl.exp(m_d - new_d) + tl.sum(tl.exp(xd - new_d), 0)
            n_t = n_t * tl.exp(m_t - new_t) + tl.sum(tl.exp(xt - new_t), 0)
            m_d = new_d
            m_t = new_t
        lse_d = m_d + tl.log(n_d)
        lse_t = m_t + tl.log(n_t)
        # sweep 2: the sums over the vocabulary
        l1 = 0.0
        sp = 0.0  # <sign(p_d - p_t), p_d>: the TV gradient's centring term
        kl = 0.0
        st = 0.0  # sum p_t (1 up to rounding; the forward-KL gradient's scale, as in torch)
        for start in range(0, V, BLOCK):
            idx = start + offs
            ok = idx < V
            xd = tl.load(zd + idx, mask=ok, other=float("-inf")).to(tl.float32)
            xt = tl.load(zt + idx, mask=ok, other=float("-inf")).to(tl.float32)
            pd = tl.exp(xd - lse_d)
            pt = tl.exp(xt - lse_t)
            diff = pd - pt
            l1 += tl.sum(tl.abs(diff), 0)
            if FKL:
                kl += tl.sum(tl.where(ok, pt * ((xt - lse_t) - (xd - lse_d)), 0.0), 0)
                st += tl.sum(pt, 0)
            else:
                sgn = tl.where(diff > 0, 1.0, tl.where(diff < 0, -1.0, 0.0))
                sp += tl.sum(sgn * pd, 0)
        lab = tl.load(LAB + row)
        ce = lse_d - tl.load(zd + lab).to(tl.float32)
        tl.store(OUT + row, ce)
        if FKL:
            tl.store(OUT + R + row, kl)
        else:
            tl.store(OUT + R + row, l1)
        tl.store(OUT + 2 * R + row, tl.minimum(tl.maximum(1.0 - 0.5 * l1, 0.0), 1.0))
        tl.store(OUT + 3 * R + row, (a_d == a_t).to(tl.float32))
        if GRAD:
            c_ce = tl.load(CCE + row)
            c_di = tl.load(CDI + row)
            g_row = G + row * s_g
            for start in range(0, V, BLOCK):
                idx = start + offs
                ok = idx < V
                xd = tl.load(zd + idx, mask=ok, other=float("-inf")).to(tl.float32)
                pd = tl.exp(xd - lse_d)
                if FKL:
                    xt = tl.load(zt + idx, mask=ok, other=float("-inf")).to(tl.float32)
                    gd = pd * st - tl.exp(xt - lse_t)
                else:
                    xt = tl.load(zt + idx, mask=ok, other=float("-inf")).to(tl.float32)
                    diff = pd - tl.exp(xt - lse_t)
                    sgn = tl.where(diff > 0, 1.0, tl.where(diff < 0, -1.0, 0.0))
                    gd = pd * (sgn - sp)
                g = c_di * gd + c_ce * (pd - tl.where(idx == lab, 1.0, 0.0))
                tl.store(g_row + idx, g.to(G.dtype.element_ty), mask=ok)


def triton_terms(z_d, z_t, labels, coef_ce, coef_distill, divergence, grad_dtype):
    """The Triton kernel (CUDA tensors); same contract as `torch_terms`."""
    if triton is None:
        raise RuntimeError("loss.kernel=triton needs triton (it comes with CUDA builds of torch)")
    if not z_d.is_cuda:
        raise ValueError(f"loss.kernel=triton runs on CUDA tensors, got {z_d.device}")
    rows, v = z_d.shape
    z_d, z_t = z_d.contiguous(), z_t.contiguous()
    out = torch.empty((4, rows), dtype=torch.float32, device=z_d.device)
    g = None if grad_dtype is None else torch.empty((rows, v), dtype=grad_dtype, device=z_d.device)
    if rows:
        with torch.cuda.device(z_d.device):  # Triton launches on the current device
            _rows_kernel[(rows,)](
                z_d, z_t, labels.contiguous(), coef_ce.float().contiguous(),
                coef_distill.float().contiguous(), out, out if g is None else g, rows, v,
                z_d.stride(0), z_t.stride(0), 0 if g is None else g.stride(0),
                FKL=divergence == "forward_kl", GRAD=g is not None, BLOCK=2048, num_warps=8,
            )  # fmt: skip
    return out[0], out[1], out[2], out[3], g


def pick(kernel: str, device: torch.device) -> Callable:
    """The kernel `LossConfig.kernel` names; "auto": Triton on CUDA when triton imports."""
    if kernel not in KERNELS:
        raise ValueError(f"loss.kernel={kernel!r}: expected one of {', '.join(KERNELS)}")
    if kernel == "auto":
        kernel = "triton" if device.type == "cuda" and triton is not None else "torch"
    return triton_terms if kernel == "triton" else torch_terms
