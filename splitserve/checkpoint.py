"""The checkpoint layout: written, validated and read here and nowhere else.

    RUN/checkpoints/step-NNNNNNNN/
      engine/                   DeepSpeed's engine state (tag `engine`): what resuming needs
      draft/model.safetensors   the draft's own weights (fp32, SGLang's parameter names); above
                                train.weight_shard_mb, shards model-0000i-of-0000N.safetensors
                                + model.safetensors.index.json (the Hugging Face layout)
      draft/draft_config.json   the resolved DraftConfig
      config.yaml               the run's resolved config
      meta.json                 {"step", "model_dir", "target": TargetSpec fields}
      COMPLETE                  every file above with its size, written last

A checkpoint is written into `checkpoints/.tmp-step-N/`, sealed (COMPLETE lists each file and its
size) and only then renamed to `checkpoints/step-N/`. A directory without a valid COMPLETE
(killed mid-write, truncated file, hand-edited) is reported and skipped; older checkpoints are
pruned only after a newer one is complete; the newest `train.keep_train_state` kept keep
`engine/` (a resume falls back past one whose state fails its CRCs, `training_state_problem`),
older ones are reduced to the draft. Every reader, the trainer's resume and the serving
CLIs alike, validates through `problem`, so a damaged file is named with its size found and
expected before anything tries to parse it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from draft_models import DraftConfig, TargetSpec, load_draft_config
from draft_models.config_io import load_dataclass, read_json
from draft_models.formats import draft_config_of, draft_weights_of

COMPLETE = "COMPLETE"
ENGINE_TAG = "engine"
DRAFT_WEIGHTS = "draft/model.safetensors"
DRAFT_CONFIG = "draft/draft_config.json"
RUN_CONFIG = "config.yaml"
META = "meta.json"
DRAFT_INDEX = "draft/model.safetensors.index.json"  # sharded weights: the index names the shards
DRAFT_FILES = (DRAFT_WEIGHTS, DRAFT_CONFIG, RUN_CONFIG, META)  # what serving and export read
DEFAULT_SHARD_MB = 2048.0


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def checkpoint_root(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def staging_dir(run_dir: Path, step: int) -> Path:
    return checkpoint_root(run_dir) / f".tmp-step-{step:08d}"


def final_dir(run_dir: Path, step: int) -> Path:
    return checkpoint_root(run_dir) / f"step-{step:08d}"


def step_of(ckpt: Path) -> int:
    return int(Path(ckpt).name.split("-")[-1])


# ----- weight files: one safetensors file, or shards with an index -----
def save_weights(weights: dict, directory: Path, max_shard_mb: float = DEFAULT_SHARD_MB) -> None:
    """`weights` as directory/model.safetensors, or, past `max_shard_mb`, as shards of at most
    that size with model.safetensors.index.json (huggingface_hub's split, the layout transformers
    and SGLang load), so a large draft moves between machines in pieces."""
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file

    split = split_torch_state_dict_into_shards(
        weights,
        filename_pattern="model{suffix}.safetensors",
        max_shard_size=int(max_shard_mb * 2**20),
    )
    for name, keys in split.filename_to_tensors.items():
        save_file({k: weights[k] for k in keys}, str(directory / name), metadata={"format": "pt"})
        # safetensors writes 0600; a draft is served by other users and containers: readable,
        # as a file open() writes under the usual umask
        os.chmod(directory / name, 0o644)
    if split.is_sharded:
        index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
        (directory / Path(DRAFT_INDEX).name).write_text(json.dumps(index, indent=1))


def weight_files(directory: Path) -> list[str]:
    """The weight files of `directory` (names within it), read from its index if it has one."""
    index = directory / Path(DRAFT_INDEX).name
    if (directory / Path(DRAFT_WEIGHTS).name).is_file() or not index.is_file():
        return [Path(DRAFT_WEIGHTS).name]
    try:
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{index} is not a safetensors index: {exc}") from None
    return [index.name, *shards]


def tensor_files(directory: Path) -> list[str]:
    """`weight_files` without the index: the files that hold tensors."""
    return [n for n in weight_files(directory) if n != Path(DRAFT_INDEX).name]


def param_count(directory: Path) -> int:
    """Parameters of the weights in `directory` (one file or its shards), from the files'
    headers: no tensor is read. Integer and boolean tensors (a pruned vocabulary's maps) are
    buffers, not parameters."""
    from safetensors import safe_open

    total = 0
    for name in tensor_files(directory):
        with safe_open(str(directory / name), "pt") as f:
            slices = [f.get_slice(key) for key in f.keys()]
            total += sum(
                math.prod(s.get_shape()) for s in slices if s.get_dtype().startswith(("F", "BF"))
            )
    return total


def load_weights(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of `directory`'s weights (one file or its shards); ValueError naming a file
    that cannot be read."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for name in tensor_files(directory):
        try:
            out.update(load_file(str(directory / name)))
        except (SafetensorError, FileNotFoundError) as exc:
            raise ValueError(f"{directory / name} cannot be read: {exc}") from None
    return out


def as_weight(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`t` detached, cast to `dtype` when it holds floats (weights); integer and boolean tensors
    (a pruned vocabulary's d2t / t2d maps) as they are."""
    t = t.detach()
    return t.to(dtype) if t.is_floating_point() else t


def read_draft_vocab(path: Path):
    """The pruned-vocabulary maps (draft_models.vocab.DraftVocab) stored with a draft: in a
    checkpoint's draft/ weights, a draft/ folder or an export in any layout; None when it holds
    none. Reads those two tensors only (a run resumes or starts from them: never recounted)."""
    from safetensors import safe_open

    from draft_models.vocab import DraftVocab

    path = Path(path)
    directory = path if is_draft_only(path) else path / "draft"
    found = {}
    for name in tensor_files(directory):
        with safe_open(str(directory / name), "pt") as f:
            for key in f.keys():
                if key.removeprefix("model.") in ("d2t", "t2d"):
                    found[key.removeprefix("model.")] = f.get_tensor(key)
    if not found:
        return None
    if set(found) != {"d2t", "t2d"}:
        raise ValueError(f"{directory}: holds {', '.join(found)} of the maps d2t and t2d")
    try:
        return DraftVocab(found["d2t"], found["t2d"]).validate()
    except ValueError as exc:
        raise ValueError(f"{directory}: {exc}") from None


# ----- writing -----
def write_draft_files(
    staging: Path,
    *,
    state_dict: dict,
    draft_cfg: DraftConfig,
    target: TargetSpec,
    model_dir: str,
    config_yaml: str,
    step: int,
    max_shard_mb: float = DEFAULT_SHARD_MB,
) -> None:
    """Everything but the engine state: the draft alone (what export and serving read; sharded
    past `max_shard_mb`), the run config and meta.json. The caller writes `engine/` (DeepSpeed)
    and then calls `seal`."""
    (staging / "draft").mkdir(parents=True, exist_ok=True)
    # clones: DeepSpeed's parameters are views of one flat buffer, which the shard split would
    # count as one tensor
    # (a pruned vocabulary's maps, d2t int64 and t2d bool, keep their dtypes)
    weights = {k: as_weight(v, torch.float32).cpu().clone() for k, v in state_dict.items()}
    save_weights(weights, staging / "draft", max_shard_mb)
    (staging / DRAFT_CONFIG).write_text(json.dumps(asdict(draft_cfg), indent=1))
    (staging / RUN_CONFIG).write_text(config_yaml)
    (staging / META).write_text(
        json.dumps({"step": step, "model_dir": model_dir, "target": asdict(target)})
    )


def seal(staging: Path, final: Path) -> None:
    """List every file with its size in COMPLETE, then rename staging -> final (atomic)."""
    files = {
        str(p.relative_to(staging)): p.stat().st_size
        for p in sorted(staging.rglob("*"))
        if p.is_file()
    }
    (staging / COMPLETE).write_text(json.dumps({"files": files}, indent=1))
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)


# ----- validating -----
def problem(ckpt: Path, needed: tuple[str, ...] | None = None) -> str | None:
    """Why `ckpt` cannot be used, or None. `needed`: the files the caller reads (each must be listed
    in COMPLETE and have its recorded size); None checks every listed file (resume)."""
    ckpt = Path(ckpt)
    marker = ckpt / COMPLETE
    if not marker.is_file():
        return "no COMPLETE marker (interrupted while writing)"
    try:
        files = json.loads(marker.read_text())["files"]
        files = {str(k): int(v) for k, v in files.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return "COMPLETE marker is unreadable"
    if needed is not None and DRAFT_WEIGHTS in needed and DRAFT_WEIGHTS not in files:
        if DRAFT_INDEX in files:  # sharded weights: the index and every shard it names
            try:
                shards = weight_files(ckpt / "draft")
            except ValueError as exc:
                return str(exc)
            rest = tuple(n for n in needed if n != DRAFT_WEIGHTS)
            needed = (*rest, *(f"draft/{n}" for n in shards))
    for name in needed or ():
        if name not in files:
            return f"COMPLETE does not list {name}"
    for name, size in files.items():
        if needed is not None and name not in needed:
            continue
        f = ckpt / name
        if not f.is_file():
            return f"missing file {f}"
        if f.stat().st_size != size:
            return f"file {f} has {f.stat().st_size} bytes, expected {size}"
    return None


def listed_files(ckpt: Path) -> dict[str, int]:
    """The files (and sizes) a checkpoint's COMPLETE lists; {} when absent or unreadable."""
    try:
        files = json.loads((Path(ckpt) / COMPLETE).read_text())["files"]
        return {str(k): int(v) for k, v in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def has_training_state(ckpt: Path) -> bool:
    """Whether the checkpoint keeps DeepSpeed's engine state (what resuming needs): only the
    newest `train.keep_train_state` of a run do; older kept ones are draft weights only (see
    `prune`)."""
    return any(name.startswith(ENGINE_TAG + "/") for name in listed_files(ckpt))


def training_state_problem(ckpt: Path) -> str | None:
    """Why the engine state of `ckpt` cannot be loaded, or None. Its files are torch's zip
    archives, each entry with a CRC: reading them through finds a damaged file (of the right size,
    which `problem` cannot tell) before a trainer loads it, without unpickling anything."""
    import zipfile

    for name in sorted(listed_files(ckpt)):
        if not (name.startswith(ENGINE_TAG + "/") and name.endswith(".pt")):
            continue
        path = Path(ckpt) / name
        try:
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()
        except (OSError, zipfile.BadZipFile, RuntimeError, EOFError) as exc:
            return f"its training state file {path} cannot be read ({exc})"
        if bad is not None:
            return f"its training state file {path} is damaged (entry {bad} fails its CRC)"
    return None


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Every complete checkpoint of a run (serving's files valid), oldest first; silent."""
    root = checkpoint_root(run_dir)
    found = sorted(root.glob("step-*")) if root.is_dir() else []
    return [c for c in found if problem(c, DRAFT_FILES) is None]


def latest_good(
    run_dir: Path,
    log: Callable[[str], None] = _stderr,
    needed: tuple[str, ...] | None = None,
    resumable: bool = False,
) -> Path | None:
    """The newest complete checkpoint of a run (with `resumable`: the newest that also keeps the
    training state); incomplete or corrupt ones are reported and skipped."""
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return None
    for ckpt in sorted(root.glob("step-*"), reverse=True):
        why = problem(ckpt, needed)
        if why is None and resumable and not has_training_state(ckpt):
            why = "draft weights only (its training state was dropped once a newer one was saved)"
        if why is None and resumable:
            why = training_state_problem(ckpt)
        if why is None:
            return ckpt
        log(f"skipping checkpoint {ckpt}: {why}")
    return None


def prune(
    run_dir: Path, keep: int, keep_state: int = 1, log: Callable[[str], None] = _stderr
) -> None:
    """Keep the newest `keep` complete checkpoints (at least the newest): the newest `keep_state`
    whole, the older ones as draft weights only (the training state is most of a checkpoint's
    size; a second whole one is what a resume falls back to when the newest's state is damaged).
    Remove the rest, and stale staging dirs."""
    root = checkpoint_root(run_dir)
    good = [c for c in sorted(root.glob("step-*"), reverse=True) if problem(c) is None]
    for old in good[max(1, keep) :]:
        shutil.rmtree(old, ignore_errors=True)
    for older in good[max(1, keep_state) : max(1, keep)]:
        drop_training_state(older)
    remove_partial(run_dir, log)


def remove_partial(run_dir: Path, log: Callable[[str], None] = _stderr) -> list[Path]:
    """Remove the staging dirs of checkpoints whose writing was interrupted (never resumed from,
    never complete), saying so: a run killed mid-save leaves one behind."""
    root = checkpoint_root(run_dir)
    removed = sorted(root.glob(".tmp-step-*")) if root.is_dir() else []
    for tmp in removed:
        shutil.rmtree(tmp, ignore_errors=True)
        log(f"removed {tmp}: a checkpoint whose writing was interrupted (incomplete, never used)")
    return removed


def drop_training_state(ckpt: Path) -> None:
    """Reduce a complete checkpoint to what serving and export read (DRAFT_FILES). COMPLETE is
    rewritten first (atomically), so an interruption leaves at worst unlisted leftovers."""
    ckpt = Path(ckpt)
    files = listed_files(ckpt)
    keep = {
        name: size
        for name, size in files.items()
        if name in DRAFT_FILES or name.startswith("draft/")  # sharded weights: index + shards
    }
    if keep == files:
        return
    tmp = ckpt / (COMPLETE + ".tmp")
    tmp.write_text(json.dumps({"files": keep, "draft_only": True}, indent=1))
    os.replace(tmp, ckpt / COMPLETE)
    tops = {name.split("/")[0] for name in keep} | {COMPLETE}
    for entry in ckpt.iterdir():
        if entry.name not in tops:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


@dataclass
class DraftCheckpoint:
    """What serving and export read from a checkpoint: the draft, the target it was trained for,
    and the run's config (its data section defines the held-out prompts). From an exported draft
    directory (serving.export) only the draft: `step`, `target` and `model_dir` are None (the
    export names no target; serving takes one with --target)."""

    path: Path
    step: int | None
    cfg: DraftConfig
    target: TargetSpec | None
    model_dir: Path | None
    weights: dict[str, torch.Tensor]

    @property
    def exported(self) -> bool:
        return self.target is None

    @property
    def run_config_yaml(self) -> Path:
        return self.path / RUN_CONFIG


def read_draft_config(ckpt: Path) -> DraftConfig:
    return load_draft_config(read_json(Path(ckpt) / DRAFT_CONFIG, "draft config"), "draft")


def resolve(path: Path, log: Callable[[str], None] = _stderr) -> Path:
    """A checkpoint directory as given, or a run directory's newest complete checkpoint (`log`
    says which one was taken), validated for what serving reads: a missing or truncated file is
    named with the size found and the size expected. An exported draft directory (config.json,
    as serving.export writes it) or a checkpoint's `draft/` folder alone (what a device call
    brings back of a draft serving.export does not take, e.g. EAGLE-3's) is returned as given;
    a `draft/` folder still inside its checkpoint stands for that checkpoint."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is not a complete SplitServe checkpoint: it does not exist"
        )
    if is_draft_folder(path) and path.name == "draft" and (path.parent / META).is_file():
        log(f"using {path.parent} (the checkpoint {path} belongs to, which names its target)")
        return resolve(path.parent, log)
    if is_draft_only(path):
        return path
    if (path / "checkpoints").is_dir() and not (path / COMPLETE).exists():
        ckpt = latest_good(path, log, needed=DRAFT_FILES)
        if ckpt is None:
            raise FileNotFoundError(
                f"run directory {path} holds no complete checkpoint under checkpoints/"
            )
        log(f"using {ckpt} (the newest complete checkpoint of {path})")
        return ckpt
    looks_like_one = path.name.startswith(("step-", ".tmp-step-")) or (path / COMPLETE).exists()
    why = (
        problem(path, DRAFT_FILES)
        if looks_like_one
        else "not a checkpoint directory (no step-N name, no COMPLETE)"
    )
    if why is not None:
        raise ValueError(
            f"{path} is not a complete SplitServe checkpoint: {why} "
            "(pass RUN/checkpoints/step-N or a run directory)"
        )
    return path


def read_draft(path: Path, log: Callable[[str], None] = _stderr) -> DraftCheckpoint:
    """The draft of a checkpoint (see `resolve` for what `path` may be; a path that is already a
    resolved checkpoint is validated again, which costs a few stat calls), or of an exported
    draft directory or a checkpoint's `draft/` folder alone (no target, step or run config: see
    DraftCheckpoint)."""
    path = resolve(path, log)
    if is_draft_only(path):
        return DraftCheckpoint(
            path=path,
            step=None,
            cfg=read_init_config(path, log),
            target=None,
            model_dir=None,
            weights=draft_only_weights(path),
        )
    meta = read_json(path / META, "checkpoint meta")
    if "target" not in meta:
        raise ValueError(
            f"{path / META} does not record the target's shape (checkpoint from an older "
            "SplitServe)"
        )
    weights = load_weights(path / "draft")
    return DraftCheckpoint(
        path=path,
        step=int(meta["step"]) if "step" in meta else step_of(path),
        cfg=read_draft_config(path),
        target=load_dataclass(TargetSpec, meta["target"], "meta.target"),
        model_dir=Path(meta["model_dir"]),
        weights=weights,
    )


EXPORTED_CONFIG = "config.json"  # an exported draft directory (serving.export): SGLang's files
# (config.json with our draft config inside, weights as save_weights writes them)


def is_exported(path: Path) -> bool:
    """`path` is an exported draft directory (serving.export), not a checkpoint."""
    return (Path(path) / EXPORTED_CONFIG).is_file()


def is_draft_folder(path: Path) -> bool:
    """`path` is a checkpoint's `draft/` folder on its own (its draft_config.json beside the
    weights), e.g. all a device call brought back of a checkpoint."""
    return (Path(path) / Path(DRAFT_CONFIG).name).is_file()


def is_draft_only(path: Path) -> bool:
    """`path` holds a draft and nothing of its run (an exported draft directory or a
    checkpoint's `draft/` folder alone): its config and weights, no target, step or run config."""
    return is_exported(path) or is_draft_folder(path)


def init_source(path: Path, log: Callable[[str], None] = _stderr) -> Path:
    """The directory `read_init_draft` reads: an exported draft directory or a checkpoint's
    draft folder as given, else the checkpoint `resolve` picks (a run directory's newest
    complete one)."""
    path = Path(path)
    return path if is_draft_only(path) else resolve(path, log)


def read_init_config(path: Path, log: Callable[[str], None] = _stderr) -> DraftConfig:
    """The draft config of what `read_init_draft` reads, without loading its weights (what the
    launcher checks against the run's before any worker starts)."""
    path = Path(path)
    if is_draft_folder(path):
        config = read_json(path / Path(DRAFT_CONFIG).name, "draft config")
        return load_draft_config(config, "draft")
    if not is_exported(path):
        return read_draft_config(resolve(path, log))
    config = read_json(path / EXPORTED_CONFIG, "exported draft config")
    try:  # any format serving.export writes, or another tool's (draft_models.formats)
        return draft_config_of(config)
    except (ValueError, KeyError, TypeError) as exc:
        why = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ValueError(
            f"{path / EXPORTED_CONFIG}: not a draft SplitServe can read ({why}); pass an "
            "exported directory (sglang, speculators or hf layout), a checkpoint or a run "
            "directory"
        ) from None


def read_init_draft(path: Path, log: Callable[[str], None] = _stderr):
    """(draft config, weights) a run can start from (`train.init_from`): an exported draft
    directory (config.json and model.safetensors in any layout draft_models.formats reads: what
    serving.export writes, or another tool's DSpark), a checkpoint's `draft/` folder on its own,
    or a checkpoint / run directory (its newest complete one)."""
    path = init_source(path, log)
    weights = draft_only_weights(path) if is_draft_only(path) else load_weights(path / "draft")
    return read_init_config(path, log), weights


def draft_only_weights(path: Path) -> dict[str, torch.Tensor]:
    """The draft's own tensors of a directory holding a draft alone: an export in any layout
    (draft_models.formats.draft_weights_of drops the target copies) or a `draft/` folder."""
    weights = load_weights(path)
    return draft_weights_of(weights) if is_exported(path) else weights


def read_run_section(ckpt: Path, key: str) -> dict:
    """One top-level section of the run config a checkpoint was trained with (e.g. `data`)."""
    from omegaconf import OmegaConf

    if not (Path(ckpt) / RUN_CONFIG).is_file():
        why = (
            "an exported draft keeps no run config; pass the run's checkpoint"
            if is_exported(ckpt)
            else "a checkpoint's draft/ folder alone keeps no run config; pass the checkpoint"
            if is_draft_folder(ckpt)
            else "not a SplitServe checkpoint"
        )
        raise FileNotFoundError(f"{Path(ckpt) / RUN_CONFIG} does not exist: {why}")
    node = OmegaConf.load(Path(ckpt) / RUN_CONFIG)
    return OmegaConf.to_container(node.get(key) or {}, resolve=True)
