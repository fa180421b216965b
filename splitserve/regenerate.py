"""`python -m splitserve.regenerate --out FILE --samples N [--start S] [--shard K/M] [--
overrides]`: the target's answers to a run's training prompt stream, written once as a
jsonl_chat file (`--check FILE... -- [overrides]`: checks files written before).

Why: drafts compared at an equal budget should train on the same samples, and regenerating is
most of a target's work. A file written here trains any number of drafts with
`data.sources=[{kind: jsonl_chat, path: FILE}] target.regenerate=false`: the target then only
prefills each sample to capture its hidden states. Line g holds the sample an online run with the
same overrides regenerates as sample g (same prompt, sampling setting g mod len(settings), same
seed; exactly so in fp32 for batch-invariant backends such as `static` (tested on CPU); in bf16
on a GPU it does not repeat itself: five regenerations of one recipe and seed on fresh H200s
gave five files, and two regenerations of samples 0..1,023 in two processes on one machine
(beside a training run) agreed on 201 of 939 lines
(the cause is not found: scripts/regen_repeat.py looks for it); the `hf` backend
seeds a window of samples together, so its sampled answers differ from an online run's); its
answer passes through text once (decoded here, tokenized again by the chat template when
training), and an answer cut at its token budget ends with the template's end-of-turn like any
other (each line records `ended`: the answer is shorter than its budget).

Left out, and counted in the summary: samples whose prompt is longer than
`data.max_prompt_tokens` (the target answers only the prompt's end, which a conversation cannot
hold; trained whole, the draft would see a context the answer was not made from), and answers
empty as text (the target ended at once; a jsonl_chat reader refuses them).

`--start S` writes samples S..N-1 only: with a batch-invariant backend, a file of samples
0..S-1 merged with it is the file `--samples N` writes, up to bf16's rounding as above (a
budget extended without regenerating what exists). `--extends FILE` names that file: every line's
prompt must be this stream's sample g, or nothing is written (a file written with other
overrides, another source or another `data.hold_out` holds another prompt order, and extending
it would repeat and skip prompts). `--shard K/M` writes samples g = K, K + M,
... (one process per GPU); merge the files by `g` (lines are in g order within each file, so
the last lines, whose prompts training holds out, are the highest ids, not the answers that
took longest). The file is written as
FILE.partial and renamed when complete; an existing FILE is never overwritten.

Beside FILE, FILE.provenance.json records what its answers depend on beyond their prompts (the
target's files and, embedded, its directory; the backend and dtype that ran it; the generation
settings: `provenance`) and FILE's SHA-256, written before FILE is renamed into place.
`--extends` refuses a file whose record differs from this run's (a file without one is checked
by its prompts alone); `--check FILE... -- [overrides]` writes nothing: it refuses files whose
record, contents or prompts differ from what these overrides make, and files without a record
(the study checks parts carried from another machine this way).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from .data import PromptStream, load_prompts, prompt_key, prompt_turns
from .target.chat import prompt_ids

CONF = Path(__file__).resolve().parents[1] / "conf"


def parse_shard(text: str) -> tuple[int, int]:
    try:
        k, m = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: expected K/M, e.g. 0/2") from None
    if m < 1 or not 0 <= k < m:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: need 0 <= K < M")
    return k, m


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m splitserve.regenerate",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--out", type=Path, help="jsonl_chat file to write")
    ap.add_argument("--samples", type=int, help="samples 0..N-1 of the stream")
    ap.add_argument(
        "--start", type=int, default=0, help="the first sample id (extends a file of 0..S-1)"
    )
    ap.add_argument(
        "--extends",
        type=Path,
        help="the file of samples 0..S-1 this --start S extends: checked to come from this stream",
    )
    ap.add_argument("--shard", type=parse_shard, default="0/1", help="K/M: samples g = K mod M")
    ap.add_argument(
        "--check",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="write nothing: refuse FILEs made otherwise (provenance record, prompts)",
    )
    ap.add_argument("--device", default="auto", help="auto (GPU when available) | cpu | cuda[:i]")
    ap.add_argument(
        "overrides", nargs="*", help="the training run's Hydra overrides, e.g. +recipe=smol_gpu"
    )
    return ap


def compose_run_config(overrides: list[str]):
    """The RunConfig a training run with these overrides uses."""
    from hydra import compose, initialize_config_dir

    from .config import load_run_config
    from .train import store_hydra_configs

    store_hydra_configs()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return load_run_config(compose("config", overrides=list(overrides)))


def target_and_stream(cfg, device: torch.device):
    """(target backend, training prompt stream) as a run's target worker builds them."""
    from .target.models import load_target_spec, prepare_target_dir, resolve_draft
    from .workers import choose_backend, make_target

    model_dir = prepare_target_dir(cfg.target, seed=cfg.train.seed)
    choose_backend(cfg, model_dir, torch.device(device).type)
    draft = resolve_draft(cfg.draft, model_dir, load_target_spec(model_dir))
    stream = PromptStream(load_prompts(cfg.data).train, cfg.data.shuffle_seed)
    backend = make_target(cfg, model_dir, device, draft.target_layer_ids)
    return backend, stream


def provenance(cfg, model_dir: Path, tokenizer, device: torch.device) -> dict:
    """What a file's answers depend on beyond their prompts (check_extends checks those), for a
    run whose target.backend is resolved: files made with different values hold different
    answers to the same sample ids, so none may extend or stand in for another. The target is
    named by its files that shape answers (config, generation config with its end tokens,
    tokenizer, chat template; transformers' version left out of the config) and, for the
    embedded targets, by their directory, which names their prompt format and dtype (a user's
    directory is not: its path differs between machines). Weights are not hashed: a target
    with other weights in the same files passes. A config saved by another transformers
    version may be written differently and is refused though its answers would be the same."""
    from .target.backends.base import backend_class
    from .target.config import resolve_dtype

    t, model_dir = cfg.target, Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    config.pop("transformers_version", None)
    made = {"target.kind": t.kind}
    if t.kind != "path":
        made["target.dir"] = model_dir.name
    made |= {
        "target.config_sha256": _sha256(json.dumps(config, sort_keys=True)),
        "target.generation_config_sha256": file_sha256(model_dir / "generation_config.json"),
        "target.tokenizer_sha256": file_sha256(model_dir / "tokenizer.json"),
        "target.chat_template_sha256": _sha256(tokenizer.chat_template or ""),
        "target.backend": t.backend,
        "target.dtype": str(resolve_dtype(t.dtype, device)).removeprefix("torch."),
        "target.sampling": [dataclasses.asdict(x) for x in t.sampling],
        "target.max_new_tokens": t.max_new_tokens,
        "train.seed": cfg.train.seed,
        "data.max_length": cfg.data.max_length,
        "data.max_prompt_tokens": cfg.data.max_prompt_tokens,
    }
    if not backend_class(t.backend).batch_invariant:  # its sampled answers depend on the window
        made["target.generate_batch"] = t.generate_batch
    return made


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def file_sha256(path: Path) -> str | None:
    """The file's SHA-256 (read in 1 MiB blocks), None where it does not exist."""
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def provenance_path(path: Path) -> Path:
    return path.with_name(path.name + ".provenance.json")


def check_provenance(path: Path, want: dict, *, required: bool = True) -> None:
    """Refuse `path` when its provenance record differs from `want` (naming every difference)
    or its contents from those the record was written with (a file cut short or edited); or,
    `required`, when it has no record."""
    side = provenance_path(path)
    away = f"move {path.name} and {side.name} away first"
    if not side.is_file():
        if required:
            raise ValueError(
                f"{path} has no {side.name} (made before regeneration recorded its settings, "
                "2026-12-05, or by another tool): how its answers were made is unknown; "
                f"regenerate it (move {path.name} away first)"
            )
        print(f"note: {path} has no {side.name}; only its prompts are checked", file=sys.stderr)
        return
    try:
        record = json.loads(side.read_text())
        made = record["made_with"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ValueError(
            f"{side}: not a provenance record (a JSON object with made_with)"
        ) from None
    diff = [k for k in sorted(set(made) | set(want)) if made.get(k) != want.get(k)]
    if diff:
        said = "; ".join(f"{k}={made.get(k)!r} there, {want.get(k)!r} here" for k in diff)
        raise ValueError(
            f"{path} was regenerated with other settings ({said}): its answers are not what "
            f"these overrides make; regenerate it ({away}) or use the settings it was made with"
        )
    if "file_sha256" in record and file_sha256(path) != record["file_sha256"]:
        raise ValueError(
            f"{path} is not the file its record was written with (SHA-256 differs: cut short "
            f"or edited, e.g. a copy that did not finish); copy it again or regenerate it ({away})"
        )


def check_files(args) -> dict:
    """`--check`: each file's provenance record must be what these overrides would make, and
    its lines this stream's samples (loads the target's tokenizer and the prompts, no model)."""
    from .target.models import check_tokenizer, load_target_spec, prepare_target_dir
    from .workers import choose_backend

    missing = [str(p) for p in args.check if not p.is_file()]
    if missing:
        hint = " (Hydra overrides go after --: --check FILE... -- +recipe=...)"
        raise FileNotFoundError(
            f"--check: no such file: {', '.join(missing)}"
            + (hint if any("=" in m for m in missing) else "")
        )
    cfg = compose_run_config(args.overrides)
    device = pick_device(args.device)
    model_dir = prepare_target_dir(cfg.target, seed=cfg.train.seed)
    choose_backend(cfg, model_dir, device.type)
    tok = check_tokenizer(model_dir, load_target_spec(model_dir))
    want = provenance(cfg, model_dir, tok, device)
    stream = PromptStream(load_prompts(cfg.data).train, cfg.data.shuffle_seed)
    for path in args.check:
        check_provenance(path, want)
        check_prompts(stream, path, "--check", recorded_ids(path), "its record's ids")
    return {"checked": [str(p) for p in args.check], "made_with": want}


def pick_device(name: str) -> torch.device:
    return torch.device(
        ("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name
    )


def recorded_ids(path: Path) -> range | None:
    """The sample ids a regenerated file was written for (--start, --samples, --shard), from
    its provenance record; None for a record from before 2026-12-06, which lacks the end."""
    summary = json.loads(provenance_path(path).read_text()).get("summary", {})
    if "end" not in summary:
        return None
    k, m = parse_shard(summary["shard"])
    start = summary["start"]
    return range(start + (k - start) % m, summary["end"], m)


def check_extends(stream, path: Path, start: int) -> None:
    """Refuse to extend a file this stream did not write: it holds samples, each line's prompt
    is the stream's sample g, and every g lies below `start`."""
    if not path.is_file():
        raise FileNotFoundError(f"--extends {path} does not exist")
    if check_prompts(stream, path, "--extends", range(start), "--start") == 0:
        raise ValueError(f"--extends {path} holds no sample")


def check_prompts(
    stream, path: Path, flag: str, ids: range | None = None, whose: str | None = None
) -> int:
    """Refuse a file whose lines are not this stream's samples: each line is a sample g (one
    of `ids`, when given: `whose` says where they come from) whose prompt is the stream's
    sample g. Returns the number of lines."""
    lines = 0
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            where = f"{flag} {path}:{lineno}"
            try:
                row = json.loads(line)
                g, prompt = row["g"], prompt_key(row["messages"])
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ValueError(
                    f"{where}: not a regenerated sample (a JSON object with g and messages)"
                ) from None
            if not isinstance(g, int) or g < 0 or (ids is not None and g not in ids):
                raise ValueError(f"{where}: sample g={g!r} is not in {describe(ids, whose)}")
            if prompt != prompt_key(stream[g]):
                raise ValueError(
                    f"{where}: sample g={g} has another prompt than this stream's: the file was "
                    "written with other overrides, another source or another data.hold_out (the "
                    "rule was rows before 2026-12-04); use it with those"
                )
            lines += 1
    return lines


def describe(ids: range | None, whose: str | None) -> str:
    """Sample ids as a reader names them: `0..4 (--start)`, `1..9 step 2 (its record's ids)`."""
    if ids is None:
        return ">= 0"
    if not ids:
        return f"no sample ({whose})"
    step = f" step {ids.step}" if ids.step != 1 else ""
    return f"{ids[0]}..{ids[-1]}{step} ({whose})"


def fitting_ids(stream, tokenizer, limit: int, ids) -> list[int]:
    """The sample ids of `ids` whose rendered prompt has at most `limit` tokens
    (data.max_prompt_tokens): the ones regeneration answers (the others are left out, above)."""
    return [g for g in ids if len(prompt_ids(tokenizer, prompt_turns(stream[g]))) <= limit]


def run(args) -> dict:
    """Write the file; returns a summary (samples, new tokens, rate)."""
    if args.check is not None:
        if args.out is not None or args.extends is not None:
            raise ValueError("--check writes nothing: it takes no --out or --extends")
        return check_files(args)
    if args.out is None or args.samples is None:
        raise ValueError("--out and --samples are required (or --check FILE...)")
    if args.samples < 1:
        raise ValueError(f"--samples must be >= 1, got {args.samples}")
    if not 0 <= args.start < args.samples:
        raise ValueError(f"--start must be in 0..{args.samples - 1} (--samples), got {args.start}")
    if args.out.exists():
        raise FileExistsError(f"{args.out} exists; regeneration never overwrites a file")
    cfg = compose_run_config(args.overrides)
    if not cfg.target.regenerate:
        raise ValueError("target.regenerate=false: there is nothing to regenerate")
    device = pick_device(args.device)
    backend, stream = target_and_stream(cfg, device)
    made_with = provenance(cfg, backend.setup.model_dir, backend.tokenizer, device)
    if args.extends is not None:
        check_extends(stream, args.extends, args.start)
        check_provenance(args.extends, made_with, required=False)
    if not backend.batch_invariant:
        print(
            f"note: target.backend={cfg.target.backend} seeds a window of samples together: "
            "sampled answers here differ from an online run's (greedy ones do not)",
            file=sys.stderr,
        )
    k, m = args.shard
    tok = backend.tokenizer
    limit = cfg.data.max_prompt_tokens
    ids = [g for g in range(k, args.samples, m) if g >= args.start]
    gs = fitting_ids(stream, tok, limit, ids)
    long_prompts = len(ids) - len(gs)
    window = backend.window or max(1, len(gs))  # 0: one stream over every sample
    partial = args.out.with_name(args.out.name + ".partial")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    t0 = time.perf_counter()
    with partial.open("w") as f, tqdm(total=len(gs), unit="sample", dynamic_ncols=True) as bar:
        for w in range(0, len(gs), window):
            part = gs[w : w + window]
            convs = [stream[g] for g in part]
            for i, sample in backend.produce_stream(part, convs):
                row = answer_row(backend, part[i], convs[i], sample)
                bar.update(1)
                if row is not None:
                    f.write(json.dumps(row) + "\n")  # as they finish: kept if interrupted
                    rows.append(row)
    rows.sort(key=lambda r: r["g"])
    partial.write_text("".join(json.dumps(r) + "\n" for r in rows))
    wall = time.perf_counter() - t0
    summary = {
        "out": str(args.out),
        "samples": len(gs) + long_prompts,
        "written": len(rows),
        "skipped_long_prompt": long_prompts,
        "skipped_empty": len(gs) - len(rows),
        "start": args.start,
        "end": args.samples,
        "shard": f"{k}/{m}",
        "new_tokens": sum(r["new_tokens"] for r in rows),
        "ended_by_target": sum(r["ended"] for r in rows),
        "wall_s": round(wall, 2),
        "samples_per_s": round(len(gs) / wall, 2),
    }
    # the record first: a FILE in place always has its record
    side = provenance_path(args.out)
    tmp = side.with_name(side.name + ".partial")
    record = {"made_with": made_with, "file_sha256": file_sha256(partial), "summary": summary}
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.rename(side)
    partial.rename(args.out)
    return summary


def answer_row(backend, g: int, conversation, sample) -> dict | None:
    """Sample g's line: the prompt turns and the target's answer as text; None when the answer
    is empty as text (the target ended at once, or made only special tokens), which a
    jsonl_chat reader refuses."""
    mask = sample.loss_mask.bool()
    answer = sample.input_ids[mask].tolist()
    text = backend.tokenizer.decode(answer, skip_special_tokens=True)
    if not text.strip():
        return None
    return {
        "messages": prompt_turns(conversation) + [{"role": "assistant", "content": text}],
        "g": g,
        "new_tokens": len(answer),
        # shorter than its budget: the target stopped by itself
        "ended": len(answer) < backend.budget(int((~mask).sum())),
    }


def main(argv=None) -> int:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from draft_models.config_io import hydra_message

    args = build_parser().parse_args(argv)
    try:
        summary = run(args)
    except (HydraException, OmegaConfBaseException) as exc:  # Hydra's lines as one
        print(f"error: {hydra_message(exc)}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
