"""Reading a run's step metrics back: what the trainer appends to RUN/metrics.jsonl, one JSON
object a step. Apart from the checkpoint layout, since readers of a run's history (reports,
tables) need no checkpoint, and a run's metrics may be kept gzipped once it is done."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

METRICS = "metrics.jsonl"


def metrics_lines(run_dir: Path) -> list[str]:
    """A run's metrics.jsonl lines (one a step, as training writes them), or those of its
    gzipped copy (metrics.jsonl.gz); [] when it has neither."""
    plain, packed = Path(run_dir) / METRICS, Path(run_dir) / f"{METRICS}.gz"
    if plain.is_file():
        return plain.read_text().splitlines()
    if packed.is_file():
        return gzip.decompress(packed.read_bytes()).decode().splitlines()
    return []


def metrics_records(run_dir: Path) -> list[dict]:
    """A run's step records, parsed: a line that is not a JSON object raises ValueError naming
    the file and the line (a run killed mid-write can leave its last line cut)."""
    plain = Path(run_dir) / METRICS
    name = plain if plain.is_file() else Path(run_dir) / f"{METRICS}.gz"
    out = []
    for lineno, line in enumerate(metrics_lines(run_dir), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{name}:{lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{name}:{lineno}: expected a JSON object")
        out.append(record)
    return out
