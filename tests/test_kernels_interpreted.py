"""The runtime's Triton kernels (decode attention, the MoE pair GEMV, the sampler) run on this
CPU under Triton's interpreter: their GPU tests' arithmetic checks and the static runtime with
them, in fp32, in a subprocess that has Triton on its path (the `triton_site` fixture; the
project's venv carries no Triton). What this cannot check (speed, bf16 rounding on a GPU, CUDA
graphs, torch.compile) stays with the device machine."""

import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT

KERNEL_TESTS = {  # file: tests that run interpreted (the rest need CUDA graphs or compile)
    # every case of the kernel against fp32 but 256 rows; the static runtime of 5 families
    # with the kernel against SDPA
    "tests/test_gpu_attention.py": 8 + 5,
    # the pair GEMV against fp32 at 1, 8 and 16 tokens; the router with and without
    # renormalisation; the add, norm and router kernel; the GEMVs routing inside at 1 and 2
    # tokens; a Qwen3-MoE runtime with and without them
    "tests/test_gpu_moe.py": 3 + 2 + 1 + 2 + 1,
    # the sampler against PyTorch's, with and without a nucleus; each path of the nucleus; tiny
    # temperatures and top_p near 1; masked logits; ties at the edge; no token of probability 0
    "tests/test_gpu_sampling.py": 2 + 5,
}


@pytest.mark.slow
def test_the_triton_kernels_equal_fp32_arithmetic_interpreted(triton_site):
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join([str(triton_site), str(ROOT)]),
    }
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *KERNEL_TESTS]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    tail = proc.stdout[-3000:] + proc.stderr[-1000:]
    assert proc.returncode == 0, tail
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed and int(passed.group(1)) == sum(KERNEL_TESTS.values()), tail
