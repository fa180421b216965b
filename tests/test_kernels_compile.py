"""The sampler's Triton code compiles for the device machine's GPU (sm_90, an H100 or H200) on
this CPU: Triton's own front end, its LLVM passes and its bundled ptxas, ahead of time, as the
first call on a GPU would compile it (TRITON_INTERPRET off, a fresh cache). The interpreter
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

from splitserve.target.runtime import sampling_kernels as sk, sampling_triton as st

signature = {
    "logits": "*bf16", "stride": "i32", "u": "*fp32", "temperature": "*fp32", "top_p": "*fp32",
    "out": "*i64", "path": "*i8", "values": "*fp32", "ids": "*i32", "V": "i32", "capacity": "i32",
    "NUCLEUS": "constexpr", "BLOCK": "constexpr", "PROBES": "constexpr",
    "SEARCH_PASSES": "constexpr",
}
for nucleus in (False, True):
    constexprs = {"NUCLEUS": nucleus, "BLOCK": sk.BLOCK, "PROBES": sk.PROBES,
                  "SEARCH_PASSES": sk.SEARCH_PASSES}
    kernel = triton.compile(
        ASTSource(st.sample_kernel, signature, constexprs=constexprs),
        target=GPUTarget("cuda", 90, 32), options={"num_warps": 8},
    )
    print("sample_kernel", nucleus, len(kernel.asm["cubin"]))
"""


@pytest.mark.slow
def test_the_sampler_compiles_for_sm90_ahead_of_time(triton_site, tmp_path):
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
    sizes = [line.split() for line in proc.stdout.splitlines() if line.startswith("sample_kernel")]
    assert [s[1] for s in sizes] == ["False", "True"] and all(int(s[2]) > 10_000 for s in sizes)
