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
    except IsADirectoryError:
        raise ValueError(f"{what} {path} is a directory, not a JSON file") from None
    except UnicodeDecodeError:
        raise ValueError(f"{what} {path}: not valid JSON (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{what} {path}: not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})"
        ) from None


def hydra_message(exc: BaseException) -> str:
    """Hydra's error as one line (its lines joined, a listed option set on one line, the config
    search path left out): the project's CLIs print every error as one `error:` line."""
    text = str(exc)
    if isinstance(exc.__cause__, OmegaConfBaseException):  # what Hydra prints under its own
        text += "\n" + str(exc.__cause__)
    parts: list[str] = []
    for raw in text.split("\nConfig search path:")[0].splitlines():
        line = raw.strip()
        if not line:
            continue
        if raw.startswith("\t") and parts:  # an option under "Available options in 'x':"
            parts[-1] += (" " if parts[-1].endswith(":") else ", ") + line
        elif parts:
            parts[-1] += (" " if parts[-1].endswith(".") else "; ") + line
        else:
            parts.append(line)
    return "".join(parts) or type(exc).__name__


def hydra_problem(conf_dir: str | Path, config_name: str, args: list[str]) -> str | None:
    """Hydra's own objection to composing `config_name` with these command-line overrides (an
    unknown `+group=option`, a group selected without `+`, a malformed override), as one line,
    or None. Composed here first because Hydra's own main prints such errors over several lines
    and exits 1, the code of a crash. Hydra's flags (`-m`, `--cfg`, ...) are left to Hydra."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    if any(arg.startswith("-") for arg in args):
        return None
    try:
        with initialize_config_dir(str(Path(conf_dir).resolve()), version_base="1.3"):
            compose(config_name, overrides=list(args))
    except (HydraException, OmegaConfBaseException) as exc:
        return hydra_message(exc)
    return None
