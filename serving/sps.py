"""The SPS table: engine steps per second of one verify step, by the number of tokens verified.

The JSON is what SGLang 0.5.23 reads from `--speculative-dspark-sps-table-path`
({"sample_batch_tokens": [...], "sample_steps_per_sec": [...], "max_batch_tokens": N}); a width
between probes takes the rate of the largest probe not above it (SGLang's floor lookup).
"""

from __future__ import annotations

import bisect
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from draft_models.config_io import read_json


@dataclass(frozen=True)
class SpsTable:
    sample_batch_tokens: list[int]
    sample_steps_per_sec: list[float]
    max_batch_tokens: int

    def __post_init__(self) -> None:
        tokens, rates = self.sample_batch_tokens, self.sample_steps_per_sec
        if not tokens:
            raise ValueError("SPS table: sample_batch_tokens is empty")
        if len(tokens) != len(rates):
            raise ValueError(
                f"SPS table: {len(tokens)} sample_batch_tokens but {len(rates)} "
                "sample_steps_per_sec"
            )
        if any(not isinstance(t, int) or t < 1 for t in tokens) or tokens != sorted(set(tokens)):
            raise ValueError(
                "SPS table: sample_batch_tokens must be strictly increasing integers >= 1, got "
                f"{tokens}"
            )
        if any(not isinstance(r, (int, float)) or not r > 0 for r in rates):
            raise ValueError(f"SPS table: sample_steps_per_sec must all be > 0, got {rates}")
        if self.max_batch_tokens < tokens[-1]:
            raise ValueError(
                f"SPS table: max_batch_tokens={self.max_batch_tokens} < largest probe {tokens[-1]}"
            )

    def __call__(self, batch_tokens: int) -> float:
        i = bisect.bisect_right(self.sample_batch_tokens, batch_tokens) - 1
        return float(self.sample_steps_per_sec[max(0, min(i, len(self.sample_batch_tokens) - 1))])

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def load(cls, path: str | Path) -> SpsTable:
        path = Path(path)
        data = read_json(path, "SPS table")
        expected = {"sample_batch_tokens", "sample_steps_per_sec", "max_batch_tokens"}
        if not isinstance(data, dict) or set(data) != expected:
            got = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise ValueError(
                f"SPS table {path}: expected exactly the keys {sorted(expected)}, got {got}"
            )
        try:
            return cls(**data)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
