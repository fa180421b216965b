"""Target backends, registered by name: `hf` (transformers, runs anywhere), `static` (Llama-family
targets on the static-cache runtime: CUDA graphs on a GPU, eager on CPU) and `sglang` (production,
GPU; unverified here). Importing this package registers the built-ins."""

from . import hf, sglang, static  # noqa: E402,F401  (registration on import)
from .base import (
    TargetBackend,
    TargetSetup,
    backend_class,
    backend_names,
    make_backend,
    register_backend,
)

__all__ = [
    "TargetBackend",
    "TargetSetup",
    "backend_class",
    "backend_names",
    "make_backend",
    "register_backend",
]
