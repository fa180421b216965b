"""Typed loading of Hydra/YAML config nodes into the config dataclasses.

An unknown key or a value of the wrong type raises ValueError naming the key, instead of being
silently ignored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

T = TypeVar("T")


def load_dataclass(cls: type[T], node: Any, where: str, base: Any = None) -> T:
    """Merge `base` (defaults over the dataclass's own) and then `node` (dict or DictConfig) onto
    the dataclass schema and return an instance."""
    schema = OmegaConf.structured(cls)
    if isinstance(node, DictConfig):  # plain values: a typed node would carry unknown keys through
        node = OmegaConf.to_container(node, resolve=True)
    try:
        merged = OmegaConf.merge(schema, base or {}, node if node is not None else {})
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        name = f"{where}.{key}" if where else key
        raise ValueError(f"bad config key {name}: {str(exc).splitlines()[0]}") from None


def read_json(path: str | Path, what: str) -> Any:
    """Parsed JSON of `path`; a missing file or bad JSON raises an error naming `what` and the
    file."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} {path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
