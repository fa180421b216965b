"""Target backends, registered by name: `hf` (transformers, runs anywhere), `static` (the families
the static runtime runs, draft_models.families: CUDA graphs on a GPU, eager on CPU) and `sglang`
(production, GPU; unverified here); `auto` picks static or hf per target (resolve_backend).
Importing this package registers the built-ins."""

from . import hf, sglang, static  # noqa: E402,F401  (registration on import)
from .base import (
    AUTO,
    TargetBackend,
    TargetSetup,
    backend_class,
    backend_names,
    make_backend,
    register_backend,
    resolve_backend,
)

__all__ = [
    "AUTO",
    "resolve_backend",
    "TargetBackend",
    "TargetSetup",
    "backend_class",
    "backend_names",
    "make_backend",
    "register_backend",
]
