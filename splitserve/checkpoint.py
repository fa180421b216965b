"""Atomic checkpoints and finding the newest good one.

A checkpoint is written into `checkpoints/.tmp-step-N/` (DeepSpeed's engine state under tag
`engine`, plus the draft alone as `draft/model.safetensors` + `draft/draft_config.json`, the
resolved run config and `meta.json`), then `COMPLETE` is written listing every file with its size,
and only then is the directory renamed to `checkpoints/step-N/`. A directory without a valid
`COMPLETE` (killed mid-write, truncated file, hand-edited) is reported and skipped; older
checkpoints are pruned only after a newer one is complete.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Optional

COMPLETE = "COMPLETE"
ENGINE_TAG = "engine"


def checkpoint_root(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def staging_dir(run_dir: Path, step: int) -> Path:
    return checkpoint_root(run_dir) / f".tmp-step-{step:08d}"


def final_dir(run_dir: Path, step: int) -> Path:
    return checkpoint_root(run_dir) / f"step-{step:08d}"


def seal(staging: Path, final: Path) -> None:
    """List every file with its size in COMPLETE, then rename staging -> final (atomic)."""
    files = {str(p.relative_to(staging)): p.stat().st_size for p in sorted(staging.rglob("*")) if p.is_file()}
    (staging / COMPLETE).write_text(json.dumps({"files": files}, indent=1))
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)


def problem(ckpt: Path) -> Optional[str]:
    """Why `ckpt` cannot be resumed from, or None if it is complete."""
    marker = ckpt / COMPLETE
    if not marker.is_file():
        return "no COMPLETE marker (interrupted while writing)"
    try:
        files = json.loads(marker.read_text())["files"]
    except (ValueError, KeyError, TypeError):
        return "COMPLETE marker is unreadable"
    for name, size in files.items():
        f = ckpt / name
        if not f.is_file():
            return f"missing file {name}"
        if f.stat().st_size != size:
            return f"file {name} has {f.stat().st_size} bytes, expected {size}"
    return None


def latest_good(run_dir: Path, log=lambda m: print(m, file=sys.stderr)) -> Optional[Path]:
    """The newest complete checkpoint; incomplete or corrupt ones are reported and skipped."""
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return None
    for ckpt in sorted(root.glob("step-*"), reverse=True):
        why = problem(ckpt)
        if why is None:
            return ckpt
        log(f"skipping checkpoint {ckpt}: {why}")
    return None


def step_of(ckpt: Path) -> int:
    return int(ckpt.name.split("-")[-1])


def prune(run_dir: Path, keep: int) -> None:
    """Remove complete checkpoints beyond the newest `keep` (never the newest), and stale staging dirs."""
    root = checkpoint_root(run_dir)
    good = [c for c in sorted(root.glob("step-*"), reverse=True) if problem(c) is None]
    for old in good[max(1, keep):]:
        shutil.rmtree(old, ignore_errors=True)
    for tmp in root.glob(".tmp-step-*"):
        shutil.rmtree(tmp, ignore_errors=True)
