"""What the runtime's Triton kernels (attention_kernels, moe_kernels) share: whether they can run
here, and a once-only builder for their custom ops (registered as torch.ops.splitserve.*, which
CUDA graphs and torch.compile take whole)."""

import functools

import torch


@functools.cache
def available() -> bool:
    """Triton imports and a CUDA device is present (CPU installs carry no Triton)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()


def once(build):
    """`build()` runs on the first call only (it registers an op); later calls return its op.
    Call it outside torch.compile's tracing: a compiled step must find the op registered."""
    return functools.cache(build)
