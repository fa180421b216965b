"""Every Triton kernel of the project compiles for the device machine's GPU (sm_90, an H100 or
H200) on this CPU: Triton's own front end, its LLVM passes and its bundled ptxas, ahead of time,
as the first launch on a GPU would compile it (TRITON_INTERPRET off, a fresh cache), in the
constexpr variants the launchers use (one shape each). The interpreter
(test_kernels_interpreted.py) checks arithmetic but not typing: a kernel variable given two
types compiled nowhere but on the GPU (2026-12-06). What this cannot check (speed, a GPU's
rounding) stays with the device machine's GPU tests."""

import os
import subprocess
import sys

import pytest
from conftest import ROOT

COMPILE = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from draft_models import loss_kernels
from splitserve.target.runtime import attention_kernels, moe_kernels, sampling_kernels as sk
from splitserve.target.runtime import sampling_triton

def build(name, fn, signature, constexprs, warps):
    sig = {**signature, **{k: "constexpr" for k in constexprs}}
    kernel = triton.compile(
        ASTSource(fn, sig, constexprs=constexprs),
        target=GPUTarget("cuda", 90, 32), options={"num_warps": warps},
    )
    print(name, len(kernel.asm["cubin"]))

P = lambda names, t: {n: t for n in names.split()}  # noqa: E731

for nucleus in (False, True):
    build(f"sample_kernel/{nucleus}", sampling_triton.sample_kernel, {
        **P("logits", "*bf16"), "stride": "i32", **P("u temperature top_p", "*fp32"),
        "out": "*i64", "path": "*i8", "values": "*fp32", "ids": "*i32", **P("V capacity", "i32"),
    }, {"NUCLEUS": nucleus, "BLOCK": sk.BLOCK, "PROBES": sk.PROBES,
        "SEARCH_PASSES": sk.SEARCH_PASSES}, 8)

partial_kernel, merge_kernel = attention_kernels.kernels()
for window in (False, True):  # head dim 128, 4 query heads a key head, width 1
    build(f"partial_kernel/{window}", partial_kernel, {
        **P("q kc vc", "*bf16"), **P("rows pos", "*i64"), **P("m_out l_out acc_out", "*fp32"),
        **P("sq_b sq_w sq_h sc_r sc_h sc_l Hk W chunk", "i32"), "scale": "fp32",
        "window": "i32",
    }, {"G": 4, "D": 128, "BLOCK_R": 16, "BLOCK_K": 64, "WINDOW": window}, 4)
build("merge_kernel", merge_kernel, {
    **P("m_in l_in acc_in", "*fp32"), "o": "*bf16", **P("so_b so_w so_h Hk W splits", "i32"),
}, {"G": 4, "D": 128, "BLOCK_R": 16}, 4)

pair_gemv, route_kernel, norm_router_kernel = moe_kernels.kernels()
route = {"TOP": 8, "RENORM": True, "BLOCK_E": 128, "BLOCK_TOP": 8}
for has_scale, gated, routed in (  # gate_up; down; + SiLU; gate_up routed in the kernel
    (False, False, False), (True, False, False), (True, True, False), (False, False, True),
):  # fmt: skip
    build(f"pair_gemv/{has_scale}/{gated}/{routed}", pair_gemv, {
        **P("x w", "*bf16"), "expert": "*i64", "scale": "*bf16", "logits": "*bf16",
        "out": "*bf16", **P("K N row_div E", "i32"),
    }, {"HAS_SCALE": has_scale, "GATED": gated, "ROUTED": routed, "BLOCK_N": 32,
        "BLOCK_K": 128, **route}, 4)
build("route_kernel", route_kernel, {
    "logits": "*bf16", "weight": "*bf16", "expert": "*i64", "E": "i32",
}, route, 4)
build("norm_router_kernel", norm_router_kernel, {  # hidden 2,048, 128 experts
    **P("x a norm_w router x_out h_out logits_out", "*bf16"), **P("H E", "i32"), "eps": "fp32",
}, {"BLOCK_H": 2048, "BLOCK_EC": 4}, 4)

for fkl, grad in ((False, True), (True, True), (False, False)):  # no gradient: G is OUT
    build(f"loss_rows/{fkl}/{grad}", loss_kernels._rows_kernel, {
        **P("ZD ZT", "*bf16"), "LAB": "*i64", **P("CCE CDI OUT", "*fp32"),
        "G": "*bf16" if grad else "*fp32", **P("R V s_zd s_zt s_g", "i32"),
    }, {"FKL": fkl, "GRAD": grad, "BLOCK": 2048}, 8)
"""

KERNELS = [
    "sample_kernel/False", "sample_kernel/True", "partial_kernel/False", "partial_kernel/True",
    "merge_kernel", "pair_gemv/False/False/False", "pair_gemv/True/False/False",
    "pair_gemv/True/True/False", "pair_gemv/False/False/True",
    "route_kernel", "norm_router_kernel", "loss_rows/False/True", "loss_rows/True/True",
    "loss_rows/False/False",
]  # fmt: skip


@pytest.mark.slow
def test_every_triton_kernel_compiles_for_sm90_ahead_of_time(triton_site, tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},
        "PYTHONPATH": os.pathsep.join([str(triton_site), str(ROOT)]),
        "TRITON_CACHE_DIR": str(tmp_path / "cache"),  # compiled here, not found in a cache
    }
    proc = subprocess.run(
        [sys.executable, "-c", COMPILE], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    built = dict(line.split() for line in proc.stdout.splitlines())
    assert list(built) == KERNELS and all(int(n) > 5_000 for n in built.values()), built
