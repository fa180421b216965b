"""Where the Triton kernel tests run: on a CUDA device in bf16 (the device machine), or on CPU
tensors in fp32 under Triton's interpreter (TRITON_INTERPRET=1, set by
tests/test_kernels_interpreted.py in a subprocess that has Triton on its path). The interpreter
checks a kernel's indexing, masks and arithmetic, not its speed or a GPU's rounding."""

import os

import pytest
import torch

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
CUDA = torch.device("cuda")
DEVICE = torch.device("cpu") if INTERPRETED else CUDA
DTYPE = torch.float32 if INTERPRETED else torch.bfloat16
TOL = dict(atol=1e-4, rtol=1e-4) if INTERPRETED else dict(atol=2e-2, rtol=2e-2)  # a kernel
STEP_TOL = dict(atol=1e-4, rtol=1e-4) if INTERPRETED else dict(atol=3e-2, rtol=3e-2)  # a model
on_gpu_only = pytest.mark.skipif(
    INTERPRETED, reason="a CUDA device's path (graphs, compile or the static runtime)"
)


def kernels_run(module) -> bool:
    """The kernels of `module` can run here: interpreted where Triton imports, else on CUDA."""
    if not INTERPRETED:
        return module.available()
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
