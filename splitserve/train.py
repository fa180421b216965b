"""`python -m splitserve.train [+recipe=NAME] [overrides]`: online distillation of a draft.

Everything that can be checked before a worker starts is checked first (config keys, target
files, tokenizer against target, draft against target, every data record), so bad input fails in
seconds with a message naming the problem, and a run directory this invocation created is
removed again; a directory holding an earlier run's checkpoints or metrics is never touched.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from draft_models import DraftConfig
from draft_models.vocab import DraftVocab

from . import checkpoint as ckpt
from .config import RunConfig, load_run_config
from .data import load_prompts, saved_data_config
from .run_metrics import metrics_lines, metrics_records
from .target.backends import backend_class
from .target.chat import answer_token_counts
from .target.config import RANDOM_WEIGHT_KINDS
from .target.models import (
    check_tokenizer,
    load_target_spec,
    prepare_target_dir,
    resolve_draft,
)
from .topology import Topology

CONF = Path(__file__).resolve().parents[1] / "conf"


def store_hydra_configs() -> None:
    """The Hydra config-group options that live in code: every registered draft architecture's
    defaults (`draft/<arch>_defaults`) and every recipe folder (`recipe/<name>`)."""
    from draft_models.config import store_hydra_defaults
    from recipes import store_recipes

    store_hydra_defaults(str(CONF))
    store_recipes()


store_hydra_configs()


def resolve_device(cfg: RunConfig) -> str:
    if cfg.split.device != "auto":
        if cfg.split.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("split.device=cuda but no CUDA device is visible")
        return cfg.split.device
    return "cuda" if torch.cuda.is_available() else "cpu"


def build_topology(cfg: RunConfig, device: str) -> Topology:
    if cfg.split.colocated:
        targets = trainers = 1
    elif device == "cuda":
        # Unset counts: the backend's measured share of the GPUs for targets (docs/results/
        # splits), or, for a backend far slower than a trainer (hf: one trainer GPU outpaces
        # dozens of its targets), every GPU but one trainer's.
        n = torch.cuda.device_count()
        targets, trainers = cfg.split.target_procs, cfg.split.trainer_procs
        share = backend_class(cfg.target.backend).target_share
        if not trainers:
            if targets:
                trainers = max(1, n - targets)
            else:
                trainers = 1 if share is None else max(1, n - max(1, round(n * share)))
        targets = targets or max(1, n - trainers)
    else:
        targets, trainers = cfg.split.target_procs or 1, cfg.split.trainer_procs or 1
    return Topology(
        targets, trainers, cfg.train.micro_batch * cfg.train.grad_accum, cfg.data.eval_prompts
    )


def _trained_as(draft: DraftConfig) -> DraftConfig:
    """The config without `loss.chunk_rows` and `loss.kernel`: memory/speed settings, not what
    is trained, so a run may resume with others (a run from before the default rose to 1,024, or
    from before the kernel setting existed, included); and with the slot convention in effect,
    so null (the architecture's own, as a checkpoint from before the field has it) equals it."""
    return dataclasses.replace(
        draft,
        loss=dataclasses.replace(draft.loss, chunk_rows=0, kernel="auto"),
        sample_from_anchor=draft.samples_from_anchor,
    )


def _check_resume(ckpt_dir: Path, draft: DraftConfig) -> None:
    saved, draft = _trained_as(ckpt.read_draft_config(ckpt_dir)), _trained_as(draft)
    if saved != draft:
        diff = sorted(
            f.name for f in fields(draft) if getattr(saved, f.name) != getattr(draft, f.name)
        )
        raise ValueError(
            f"checkpoint {ckpt_dir} was trained with a different draft config (fields {diff}); "
            "use a new train.run_dir or train.resume=false"
        )


def _check_resume_data(ckpt_dir: Path, data, split) -> None:
    """A resumed run keeps its held-out split: under another data.hold_out (a run saved before
    the field existed held out rows) the rows it trains on, and so its prompt stream, may differ
    from its first step on. Refused only when they do (`split`: this run's load_prompts)."""
    saved = saved_data_config(ckpt.read_run_section(ckpt_dir, "data")).hold_out
    if saved == data.hold_out:
        return
    then = load_prompts(dataclasses.replace(data, hold_out=saved))
    if then.train != split.train or then.eval != split.eval:
        raise ValueError(
            f"checkpoint {ckpt_dir} was trained with data.hold_out={saved}, which splits these "
            f"sources otherwise than this run's {data.hold_out}: resume with "
            f"data.hold_out={saved}, or use a new train.run_dir"
        )


def _check_init(path: str, draft: DraftConfig) -> str:
    """train.init_from: readable, and its draft config equal to this run's (loss weights may
    differ: they shape training, not the weights). Returns the concrete directory (a run
    directory's newest complete checkpoint, resolved once: the trainers load that one)."""
    path = ckpt.init_source(Path(path))
    init_cfg = ckpt.read_init_config(path)  # the weights are the trainers' to load
    init_cfg, draft = _trained_as(init_cfg), _trained_as(draft)
    diff = sorted(
        f.name
        for f in fields(draft)
        if f.name != "loss" and getattr(init_cfg, f.name) != getattr(draft, f.name)
    )
    if diff:
        raise ValueError(
            f"train.init_from={path}: its draft differs from this run's in {diff}; set those "
            "draft fields as it has them"
        )
    return str(path)


def _check_importable(path: str, key: str) -> None:
    from hydra.utils import get_class

    try:
        get_class(path)
    except Exception as exc:  # hydra wraps the import error in its own types
        raise ValueError(f"{key}={path!r} cannot be imported: {exc}") from None


def prepare(cfg: RunConfig, node: Any, run_dir: Path):
    """All checks and preparation before any worker starts; returns the RunContext."""
    from .workers import RunContext, choose_backend

    device = resolve_device(cfg)
    model_dir = prepare_target_dir(cfg.target, seed=cfg.train.seed)
    choose_backend(cfg, model_dir, device)
    if isinstance(node, DictConfig):  # the saved config.yaml says which backend ran
        OmegaConf.update(node, "target.backend", cfg.target.backend, force_add=True)
    spec = load_target_spec(model_dir)
    tok = check_tokenizer(model_dir, spec)
    # hidden size / layer ids / mask token (the tokenizer's reserved one) against the target; the
    # workers build the draft from cfg.draft, so it carries the resolved mask token
    draft = resolve_draft(cfg.draft, model_dir, spec, tok)
    cfg.draft = dataclasses.replace(cfg.draft, mask_token_id=draft.mask_token_id)
    if cfg.train.decode_eval_prompts:
        _check_importable(cfg.train.decode_eval_probe, "train.decode_eval_probe")
    prompts = load_prompts(cfg.data)
    topology = build_topology(cfg, device)
    resume_from, start = None, 0
    if cfg.train.resume:
        found = ckpt.latest_good(run_dir, resumable=True)
        if found is None and ckpt.complete_checkpoints(run_dir):
            raise ValueError(
                f"{run_dir} holds checkpoints but none keeps the training state resuming needs "
                "(the lines above say why each was skipped); use a new train.run_dir, or "
                "train.resume=false to train from step 0 here (its checkpoints are then replaced)"
            )
        if found is not None:
            _check_resume(found, draft)
            _check_resume_data(found, cfg.data, prompts)
            resume_from, start = str(found), ckpt.step_of(found)
            print(f"resuming from {found} (step {start} of {cfg.train.steps})", file=sys.stderr)
    init_from = None
    if cfg.train.init_from and resume_from is None:
        init_from = _check_init(cfg.train.init_from, draft)
        print(f"starting from the draft weights of {init_from}", file=sys.stderr)
    elif cfg.train.init_from:
        print(f"train.init_from ignored: resuming from {resume_from}", file=sys.stderr)
    if start >= cfg.train.steps:
        print(f"run already complete at step {start} (train.steps={cfg.train.steps})")
    vocab = draft_vocab(cfg, draft, tok, spec.vocab_size, prompts.train, resume_from or init_from)
    link = (
        "nccl"
        if device == "cuda"
        and topology.num_targets + topology.num_trainers <= torch.cuda.device_count()
        else "gloo"
    )
    return RunContext(
        cfg=cfg,
        config_yaml=OmegaConf.to_yaml(node, resolve=True),
        run_dir=str(run_dir),
        model_dir=str(model_dir),
        topology=topology,
        train_prompts=prompts.train,
        eval_prompts=prompts.eval,
        start_step=start,
        resume_from=resume_from,
        init_from=init_from,
        device=device,
        link_backend=link,
        target_layer_ids=draft.target_layer_ids,
        draft_vocab=vocab,
    )


def draft_vocab(
    cfg: RunConfig, draft: DraftConfig, tokenizer, vocab_size: int, conversations, stored
) -> DraftVocab | None:
    """A pruned draft vocabulary's maps (draft.draft_vocab_size), chosen once per run: read back
    from the checkpoint resumed or the draft started from (`stored`: they hold the maps the
    draft was trained with; never recounted), else the top K of the training answers' token
    counts (`count_answer_tokens`). None for the full vocabulary."""
    if not draft.pruned_vocab:
        return None
    k = draft.draft_vocab_size
    if stored is not None:
        vocab = ckpt.read_draft_vocab(Path(stored))
        if vocab is None or vocab.size != k:
            raise ValueError(f"{stored} holds no draft vocabulary maps of {k} ids")
        print(f"draft vocabulary: {k} ids, the maps stored in {stored}", file=sys.stderr)
        return vocab
    counts = count_answer_tokens(
        tokenizer, conversations, cfg.data.max_length, vocab_size, draft.draft_vocab_size
    )
    vocab = DraftVocab.from_counts(counts, k, draft.block_size)
    share = counts[vocab.kept_ids].sum() / counts.sum()
    source = (
        "the dataset's answers (the target regenerates them: a proxy; train on a "
        "splitserve.regenerate file with target.regenerate=false to count its own)"
        if cfg.target.regenerate
        else "the training answers"
    )
    print(
        f"draft vocabulary: the {k} most frequent of {counts.numel()} target ids, "
        f"{share:.2%} of the {int(counts.sum())} answer tokens of {source}",
        file=sys.stderr,
    )
    return vocab


def count_answer_tokens(
    tokenizer, conversations, max_length: int, vocab_size: int, k: int
) -> torch.Tensor:
    """Counts [vocab_size] of every target id over the tokens the trainer supervises: each training
    conversation rendered as the target worker renders it (chat template, cut to
    `max_length`), its assistant-turn tokens counted (target.chat.answer_token_counts: repeats
    count as often as they appear in the pool, large pools over spawned processes). Refuses a
    pool with no answers (prompt-only sources the target answers)."""
    counts = answer_token_counts(tokenizer, conversations, max_length, vocab_size)
    if not counts.any():
        raise ValueError(
            f"draft.draft_vocab_size={k}: the training data holds no answer "
            "tokens to count (prompt-only sources): write the target's answers once with "
            "splitserve.regenerate and train on that file"
        )
    return counts


HYDRA_ONLY = {".hydra", "train.log", "main.log"}


def _discard_if_fresh(run_dir: Path) -> None:
    """Remove a run directory that holds nothing but what Hydra wrote for this invocation."""
    if run_dir.is_dir() and all(p.name in HYDRA_ONLY for p in run_dir.iterdir()):
        shutil.rmtree(run_dir, ignore_errors=True)


def wait_fraction(worker_stats: list[dict], key: str) -> float | None:
    """Share of the workers' wall time spent in `key` (data wait, credit wait); None if no
    worker."""
    if not worker_stats:
        return None
    return sum(s[key] for s in worker_stats) / max(sum(s["wall_s"] for s in worker_stats), 1e-9)


def summarize(run_dir: Path) -> dict:
    lines = metrics_records(run_dir)
    steps = [x for x in lines if "event" not in x]
    stats = {p.stem: json.loads(p.read_text()) for p in sorted((run_dir / "stats").glob("*.json"))}
    last = steps[-1] if steps else {}
    first = steps[0] if steps else {}
    trainers = [v for k, v in stats.items() if k.startswith("trainer")]
    targets = [v for k, v in stats.items() if k.startswith("target")]
    out = {
        "run_dir": str(run_dir),
        "steps": last.get("step"),
        "first_loss": first.get("loss"),
        "last_loss": last.get("loss"),
        "sim_tau": last.get("sim_tau"),
        "eval_sim_tau": last.get("eval_sim_tau"),
        "eval_loss": last.get("eval_loss"),
        "eval_real_tau": last.get("eval_real_tau"),
        "trainer_data_wait_frac": wait_fraction(trainers, "wait_s"),
        "target_credit_wait_frac": wait_fraction(targets, "credit_wait_s"),
    }
    checkpoints = ckpt.complete_checkpoints(run_dir)
    out["checkpoint"] = str(checkpoints[-1]) if checkpoints else None
    # kept beside the results that are copied without weights (serving.ablation_report)
    out["draft_params"] = ckpt.param_count(checkpoints[-1] / "draft") if checkpoints else None
    return out


def _num(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def closing_table(summary: dict, random_target: bool = False) -> str:
    """What a finished run prints: its numbers rounded for reading (summary.json keeps them
    whole, for scripts) and the commands that come next."""
    run_dir = summary["run_dir"]
    tau = _num(summary["sim_tau"], ".2f")
    if random_target:
        tau += "  (the target has random weights: simulated tau means nothing here)"
    evals = [
        f"loss {_num(summary['eval_loss'], '.3f')}",
        f"simulated tau {_num(summary['eval_sim_tau'], '.2f')}",
    ]
    if summary.get("eval_real_tau") is not None:
        evals.append(f"real tau {summary['eval_real_tau']:.2f}")
    waits = [
        f"trainers on data {_num(summary['trainer_data_wait_frac'], '.1%')}",
        f"targets on credit {_num(summary['target_credit_wait_frac'], '.1%')}",
    ]
    rows = [
        ("steps", str(summary["steps"])),
        ("loss", f"{_num(summary['first_loss'], '.3f')} -> {_num(summary['last_loss'], '.3f')}"),
        ("simulated tau", tau),
        ("held-out eval", ", ".join(evals)),
        ("waits", ", ".join(waits)),
        ("run dir", run_dir),
        ("checkpoint", summary["checkpoint"] or "none (train.checkpoint_every=0)"),
        *([("sts (calibrated)", summary["sts"])] if summary.get("sts") else []),
        ("summary", str(Path(run_dir) / "summary.json")),
    ]
    wandb_runs = sorted(Path(run_dir).glob("wandb/offline-run-*"))
    if wandb_runs:
        rows.append(("wandb (offline)", f"{wandb_runs[-1]} (`wandb sync` it to upload)"))
    width = max(len(k) for k, _ in rows)
    lines = ["training finished", *(f"  {k:<{width}}  {v}" for k, v in rows)]
    if summary["checkpoint"]:
        run = shlex.quote(run_dir)
        lines += [
            "next:",
            f"  python -m serving.evaluate --checkpoint {run}",
            f"  python -m serving.export --checkpoint {run} --out DIR",
        ]
    return "\n".join(lines)


def interrupted_notice(run_dir: Path, steps: int, args: list[str]) -> str:
    """The one line Ctrl-C leaves: how far the run got, what a rerun resumes from and the
    command that does (the same overrides: a resumed run must train the same draft)."""
    if not run_dir.is_dir():
        return "interrupted before training started; nothing was written"
    step = None
    for line in metrics_lines(run_dir):
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short
        if record.get("event") == "start":
            step = record.get("resumed_from") or 0
        elif "event" not in record and "step" in record:
            step = record["step"]
    kept = [a for a in args if not a.startswith(("train.run_dir=", "-"))]
    command = shlex.join(["python", "-m", "splitserve.train", *kept, f"train.run_dir={run_dir}"])
    found = ckpt.latest_good(run_dir, log=lambda _: None)  # cheap: no read of the training state
    if found is None:
        where = "before training started" if step is None else f"at step {step} of {steps}"
        return f"interrupted {where}, before any checkpoint; start it again with: {command}"
    where = "before its first step" if step is None else f"at step {step} of {steps}"
    return f"interrupted {where}; the newest complete checkpoint is {found}; resume with: {command}"


def run(node: Any, run_dir: Path | None = None) -> dict:
    """Validate, prepare, train; returns the summary. `node`: the Hydra config (or a dict)."""
    from .launch import launch

    try:
        cfg = load_run_config(node)
        run_dir = Path(cfg.train.run_dir or run_dir or "outputs/run")
        ctx = prepare(cfg, node, run_dir)
    except BaseException:
        if run_dir is not None:
            _discard_if_fresh(Path(run_dir))
        raise
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(ctx.config_yaml)
    if os.environ.get("RANK", "0") == "0":
        ckpt.remove_partial(run_dir)  # a save killed mid-write: said, not silently dropped
    if launched_by_torchrun():
        if cfg.train.calibrate_at_end and os.environ.get("RANK", "0") == "0":
            print(
                "train.calibrate_at_end: not under torchrun (every rank would be one process of "
                "the run); fit with python -m serving.calibrate --checkpoint RUN once it ends"
            )
        return run_as_torchrun_rank(ctx)
    if ctx.start_step < cfg.train.steps:
        launch(ctx)
    summary = summarize(run_dir)
    if cfg.train.calibrate_at_end and not summary["checkpoint"]:
        print("train.calibrate_at_end: no checkpoint to calibrate (train.checkpoint_every=0)")
    elif cfg.train.calibrate_at_end:
        summary["sts"] = calibrate_final(Path(summary["checkpoint"]), cfg, ctx.device)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def calibrate_final(ckpt_dir: Path, cfg: RunConfig, device: str) -> str | None:
    """train.calibrate_at_end: STS fitted on the run's held-out prompts with its final
    checkpoint, written beside the draft (<checkpoint>/sts.json and sts_report.json) by
    `python -m serving.calibrate`; an existing file (a rerun of a finished run) is kept."""
    out = ckpt_dir / "sts.json"
    if not cfg.draft.confidence_head:
        print("train.calibrate_at_end: this draft has no confidence head; nothing to fit")
        return None
    if out.is_file():
        print(f"train.calibrate_at_end: {out} is already there (kept)")
        return str(out)
    command = [
        sys.executable, "-m", "serving.calibrate", "--checkpoint", str(ckpt_dir),
        "--out", str(out), "--report", str(ckpt_dir / "sts_report.json"), "--device", device,
        *cfg.train.calibrate_args,
    ]  # fmt: skip
    print(f"train.calibrate_at_end: {shlex.join(['python', *command[1:]])}", flush=True)
    code = subprocess.run(command).returncode
    if code != 0:
        raise ValueError(
            f"train.calibrate_at_end: serving.calibrate exited {code} (its lines above say why); "
            f"the trained checkpoint {ckpt_dir} is complete: fit its STS again with "
            f"{shlex.join(['python', *command[1:]])}"
        )
    return str(out)


def launched_by_torchrun() -> bool:
    """torchrun (and launchers like it, e.g. deepspeed's) set RANK / WORLD_SIZE / MASTER_PORT."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_PORT"))


def run_as_torchrun_rank(ctx) -> dict:
    """Under torchrun/deepspeed launchers each process takes one role: ranks 0..T-1 are target
    workers, the rest trainers. The data-plane store and the trainer world use MASTER_PORT+1/+2."""
    from .workers import colocated_main, target_main, trainer_main

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    t = ctx.topology
    expected = 1 if ctx.cfg.split.colocated else t.num_targets + t.num_trainers
    if world != expected:
        raise ValueError(
            f"torchrun started {world} processes but split asks for {expected} "
            f"({t.num_targets} target + {t.num_trainers} trainer)"
        )
    if not ctx.cfg.train.run_dir:
        raise ValueError(
            "under torchrun set train.run_dir, so every process writes to the same run directory"
        )
    base = int(os.environ["MASTER_PORT"])
    ctx.store_port, ctx.trainer_port = base + 1, base + 2
    if ctx.start_step >= ctx.cfg.train.steps:
        return {"rank": rank, "steps": ctx.start_step}
    if ctx.cfg.split.colocated:
        colocated_main(ctx)
    elif rank < t.num_targets:
        target_main(rank, ctx)
    else:
        trainer_main(rank - t.num_targets, ctx)
    return {
        "rank": rank,
        "role": "target" if rank < t.num_targets else "trainer",
        "run_dir": ctx.run_dir,
    }


def _check_draft_choice(chosen: str | None, node: DictConfig) -> None:
    """`draft.arch=X` on top of another architecture's defaults (draft=dspark, the default) would
    keep that architecture's heads and loss weights: ask for X's own defaults instead."""
    from draft_models import arch_names

    arch = node.get("draft", {}).get("arch")
    if chosen in arch_names() and arch != chosen:
        raise ValueError(
            f"draft.arch={arch} on top of draft={chosen}'s defaults; select draft={arch} to start "
            f"from {arch}'s own defaults (and override single fields from there)"
        )


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(node: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        _check_draft_choice(HydraConfig.get().runtime.choices.get("draft"), node)
        summary = run(node, run_dir)
    except (ValueError, FileNotFoundError) as exc:
        _discard_if_fresh(run_dir)  # Hydra's own files may have landed after our cleanup
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # Ctrl-C: the workers are stopped (launch); one line, no traceback
        _discard_if_fresh(run_dir)
        run_dir = Path(OmegaConf.select(node, "train.run_dir") or run_dir)
        steps = OmegaConf.select(node, "train.steps")
        print(interrupted_notice(run_dir, steps, sys.argv[1:]), file=sys.stderr)
        sys.exit(130)
    if launched_by_torchrun():  # one rank's role, as before: no rank holds the run's numbers
        print(json.dumps(summary))
        return
    random_target = OmegaConf.select(node, "target.kind") in RANDOM_WEIGHT_KINDS
    print(closing_table(summary, random_target))


def unknown_override(args: list[str]) -> str | None:
    """The project's message for a command-line override `a.b=v` whose key the run config does
    not have, before Hydra answers it (Hydra's first answer, "use +a.b=v to append", leads to a
    second error on the typed config). Appends (+), deletions (~), hydra.* and group selections
    (draft=dflash) are Hydra's to judge."""
    import difflib
    import typing

    for arg in args:
        key = arg.split("=", 1)[0]
        if (
            arg.startswith(("-", "+", "~"))
            or "=" not in arg
            or key.startswith("hydra")
            or "/" in key
            or "[" in key
        ):
            continue
        node, path = RunConfig, []
        for part in key.split("."):
            hints = typing.get_type_hints(node)
            if part not in hints:
                where = ".".join(path) or "the top level"
                near = difflib.get_close_matches(part, list(hints), n=3, cutoff=0.5)
                hint = (
                    f"; did you mean {', '.join('.'.join([*path, n]) for n in near)}?"
                    if near
                    else ""
                )
                return f"unknown config key {key}{hint} (keys at {where}: {', '.join(hints)})"
            path.append(part)
            node = hints[part]
            if not dataclasses.is_dataclass(node):
                break  # a value, list or dict: whatever lies below is the value's business
    return None


def cli() -> None:
    """`python -m splitserve.train`: the project's own check of the overrides, plugins named on
    the command line imported (so `draft=<plugin arch>` is a Hydra option), Hydra's composition
    errors as one line with exit 2, then Hydra."""
    from draft_models.config_io import hydra_problem

    from .config import import_plugins

    problem = unknown_override(sys.argv[1:])
    plugins = [
        arg.split("=", 1)[1].strip("[]") for arg in sys.argv[1:] if arg.startswith("plugins=")
    ]
    try:
        import_plugins(
            [name.strip() for spec in plugins for name in spec.split(",") if name.strip()]
        )
    except ValueError as exc:
        problem = problem or str(exc)
    store_hydra_configs()
    problem = problem or hydra_problem(CONF, "config", sys.argv[1:])  # not Hydra's exit 1
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    main()


if __name__ == "__main__":
    cli()
