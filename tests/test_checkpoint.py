"""Atomic checkpoints: partial or corrupt ones are reported and skipped, good ones are kept."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import llama_config

from splitserve import checkpoint as ckpt


def make(run_dir: Path, step: int, payload: bytes = b"x" * 100) -> Path:
    staging = ckpt.staging_dir(run_dir, step)
    (staging / "engine").mkdir(parents=True)
    (staging / "engine" / "state.pt").write_bytes(payload)
    (staging / "meta.json").write_text("{}")
    ckpt.seal(staging, ckpt.final_dir(run_dir, step))
    return ckpt.final_dir(run_dir, step)


def test_newest_complete_checkpoint_wins_and_broken_ones_are_reported(tmp_path):
    make(tmp_path, 10)
    newer = make(tmp_path, 20)
    assert ckpt.latest_good(tmp_path) == newer
    with open(newer / "engine" / "state.pt", "r+b") as f:  # truncated by a crash or a full disk
        f.truncate(50)
    killed = ckpt.final_dir(tmp_path, 30)
    (killed / "engine").mkdir(parents=True)  # renamed by hand, never sealed
    messages = []
    assert ckpt.latest_good(tmp_path, log=messages.append) == ckpt.final_dir(tmp_path, 10)
    assert any("step-00000030" in m and "no COMPLETE marker" in m for m in messages)
    assert any("step-00000020" in m and "has 50 bytes, expected 100" in m for m in messages)


def test_staging_directories_are_never_resumed_from(tmp_path):
    make(tmp_path, 5)
    ckpt.staging_dir(tmp_path, 9).mkdir(parents=True)  # a save that was killed mid-write
    assert ckpt.latest_good(tmp_path) == ckpt.final_dir(tmp_path, 5)


def starts(run_dir: Path) -> list[int | None]:
    """resumed_from of each start marker of the run's metrics.jsonl, in order."""
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["resumed_from"] for r in records if r.get("event") == "start"]


def test_partial_checkpoints_are_removed_with_a_notice(tmp_path):
    make(tmp_path, 5)
    partial = ckpt.staging_dir(tmp_path, 9)  # a save that was killed mid-write
    (partial / "engine").mkdir(parents=True)
    messages = []
    assert ckpt.remove_partial(tmp_path, messages.append) == [partial]
    assert messages == [
        f"removed {partial}: a checkpoint whose writing was interrupted (incomplete, never used)"
    ]
    assert not partial.exists() and ckpt.final_dir(tmp_path, 5).is_dir()
    ckpt.staging_dir(tmp_path, 10).mkdir()
    ckpt.prune(tmp_path, keep=2, log=messages.append)  # after a save, the same notice
    assert len(messages) == 2 and "step-00000010" in messages[1]
    assert ckpt.remove_partial(tmp_path / "nothing", messages.append) == []


def test_prune_keeps_the_newest_good_checkpoints(tmp_path):
    for step in (1, 2, 3, 4):
        make(tmp_path, step)
    (ckpt.final_dir(tmp_path, 4) / ckpt.COMPLETE).unlink()  # newest is broken: must not count
    ckpt.staging_dir(tmp_path, 5).mkdir(parents=True)
    ckpt.prune(tmp_path, keep=2)
    left = sorted(p.name for p in ckpt.checkpoint_root(tmp_path).iterdir())
    assert left == ["step-00000002", "step-00000003", "step-00000004"]


def test_older_checkpoints_keep_draft_weights_only(tmp_path):
    """Resuming needs the newest checkpoint's training state only: older kept checkpoints lose
    their engine state (most of their size) and stay valid for export and serving."""
    for step in (1, 2, 3):
        staging = ckpt.staging_dir(tmp_path, step)
        (staging / "engine").mkdir(parents=True)
        torch.save({"exp_avg": torch.zeros(250)}, staging / "engine" / "optim.pt")  # torch's zip
        (staging / "zero_to_fp32.py").write_text("# DeepSpeed's helper")
        for name in ckpt.DRAFT_FILES:
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / name).write_text(name)
        ckpt.seal(staging, ckpt.final_dir(tmp_path, step))
        ckpt.prune(tmp_path, keep=2)
    newest, older = ckpt.final_dir(tmp_path, 3), ckpt.final_dir(tmp_path, 2)
    assert not ckpt.final_dir(tmp_path, 1).exists()
    assert ckpt.has_training_state(newest) and (newest / "engine" / "optim.pt").is_file()
    assert not ckpt.has_training_state(older)
    assert sorted(p.name for p in older.iterdir()) == [
        "COMPLETE",
        "config.yaml",
        "draft",
        "meta.json",
    ]
    assert ckpt.problem(older) is None and ckpt.problem(older, ckpt.DRAFT_FILES) is None
    assert ckpt.latest_good(tmp_path, resumable=True) == newest
    with open(newest / "engine" / "optim.pt", "r+b") as f:  # the newest damaged: nothing to resume
        f.truncate(10)
    messages = []
    assert ckpt.latest_good(tmp_path, log=messages.append, resumable=True) is None
    assert any("step-00000002" in m and "draft weights only" in m for m in messages)
    assert ckpt.latest_good(tmp_path, needed=ckpt.DRAFT_FILES) == newest  # serving still can


def test_the_two_newest_kept_checkpoints_keep_the_training_state(tmp_path):
    """train.keep_train_state=2 (the default): a second whole checkpoint to fall back to."""
    for step in (1, 2, 3, 4):
        staging = ckpt.staging_dir(tmp_path, step)
        (staging / "engine").mkdir(parents=True)
        torch.save({"exp_avg": torch.zeros(250)}, staging / "engine" / "optim.pt")
        for name in ckpt.DRAFT_FILES:
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / name).write_text(name)
        ckpt.seal(staging, ckpt.final_dir(tmp_path, step))
        ckpt.prune(tmp_path, keep=3, keep_state=2)
    assert not ckpt.final_dir(tmp_path, 1).exists()
    whole = [ckpt.has_training_state(ckpt.final_dir(tmp_path, s)) for s in (2, 3, 4)]
    assert whole == [False, True, True]


def test_a_damaged_optimizer_file_falls_back_to_the_previous_whole_checkpoint(tmp_path):
    """The newest checkpoint's optimizer file damaged at its size (COMPLETE cannot tell): it is
    named in one line and the checkpoint before it, which keeps its state, is taken."""
    for step in (1, 2):  # DeepSpeed's own files (the f97d512 layout)
        shutil.copytree(LEGACY / "step-00000001", ckpt.final_dir(tmp_path, step))
    optim = ckpt.final_dir(tmp_path, 2) / "engine" / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    assert ckpt.latest_good(tmp_path, resumable=True) == ckpt.final_dir(tmp_path, 2)
    data = bytearray(optim.read_bytes())
    middle = slice(len(data) // 2, len(data) // 2 + 64)  # inside a tensor: its CRC tells
    data[middle] = bytes(b ^ 0xFF for b in data[middle])
    optim.write_bytes(bytes(data))
    messages = []
    found = ckpt.latest_good(tmp_path, log=messages.append, resumable=True)
    assert found == ckpt.final_dir(tmp_path, 1)
    assert len(messages) == 1 and messages[0].startswith(
        f"skipping checkpoint {ckpt.final_dir(tmp_path, 2)}: its training state file {optim} is "
        "damaged (entry "
    )
    optim.write_bytes(b"\0" * len(data))  # not a zip archive at all
    messages.clear()
    assert ckpt.latest_good(tmp_path, log=messages.append, resumable=True) == found
    assert f"its training state file {optim} cannot be read" in messages[0]
    assert ckpt.latest_good(tmp_path, needed=ckpt.DRAFT_FILES).name == "step-00000002"  # serving


@pytest.mark.slow
def test_a_run_resumes_past_a_damaged_optimizer_file_and_a_partial_save(tmp_path, capsys):
    """A finished run's newest optimizer file damaged and a save left half-written: the rerun
    names both, resumes from the checkpoint before (which kept its training state) and trains
    the same steps again, loss for loss; metrics.jsonl marks where the second copy begins."""
    from test_training import TINY, compose_cfg, losses

    from splitserve.train import run

    overrides = [o for o in TINY if not o.startswith("train.steps")]
    overrides += ["train.steps=4", "split.colocated=true"]
    run_dir = tmp_path / "run"
    run(compose_cfg(overrides), run_dir)
    first = losses(run_dir)
    newest, previous = ckpt.final_dir(run_dir, 4), ckpt.final_dir(run_dir, 2)
    assert ckpt.has_training_state(newest) and ckpt.has_training_state(previous)
    optim = next((newest / "engine").glob("*optim_states.pt"))
    optim.write_bytes(b"\0" * optim.stat().st_size)  # damaged at its recorded size
    partial = ckpt.staging_dir(run_dir, 4)  # a later save killed mid-write
    (partial / "engine").mkdir(parents=True)
    capsys.readouterr()
    run(compose_cfg(overrides), run_dir)
    err = capsys.readouterr().err
    assert f"removed {partial}: a checkpoint whose writing was interrupted" in err
    assert f"skipping checkpoint {newest}: its training state file {optim} cannot be read" in err
    assert f"resuming from {previous} (step 2 of 4)" in err
    assert starts(run_dir) == [None, 2]
    again = losses(run_dir)
    assert sorted(again) == [1, 2, 3, 4]
    for step in (3, 4):
        assert again[step] == pytest.approx(first[step], rel=1e-5, abs=1e-5)
    assert ckpt.has_training_state(newest) and not partial.exists()


LEGACY = Path(__file__).resolve().parent / "data" / "checkpoint_f97d512"
LEGACY_RUN = [  # the overrides that wrote it (tests/data/checkpoint_f97d512/README.md)
    "target.kind=path",
    "draft.num_layers=1",
    "draft.markov_rank=1",
    "draft.block_size=4",
    "draft.mask_token_id=16",
    "target.regenerate=false",
    "data.max_length=64",
    "data.eval_prompts=1",
    "data.sources=[{kind:gsm8k,path:null,limit:20,weight:1}]",
    "train.micro_batch=1",
    "train.num_anchors=4",
    "train.checkpoint_every=1",
    "train.warmup_steps=1",
    "train.decode_eval_prompts=0",
    "log.wandb_mode=disabled",
    "log.progress=false",
]


def legacy_target(path: Path) -> Path:
    """The tiny random Llama the fixture was trained against (same seed and shape)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from splitserve.target.embedded import ensure_smollm2

    torch.manual_seed(0)
    cfg = llama_config(
        hidden_size=16,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=32,
        vocab_size=49152,
        tie_word_embeddings=True,
    )
    AutoModelForCausalLM.from_config(cfg).save_pretrained(path)
    AutoTokenizer.from_pretrained(ensure_smollm2()).save_pretrained(path)
    return path


@pytest.mark.slow
def test_a_checkpoint_written_by_f97d512_loads_resumes_and_exports(tmp_path):
    import json
    import shutil

    from test_training import compose_cfg

    from serving.export import export
    from serving.loading import load_decoder
    from serving.scheduler import SchedulerConfig
    from splitserve.train import run

    run_dir = tmp_path / "run"
    shutil.copytree(LEGACY, run_dir / "checkpoints", ignore=shutil.ignore_patterns("README.md"))
    target = legacy_target(tmp_path / "target")

    draft = ckpt.read_draft(run_dir)  # a run directory: its newest complete checkpoint
    assert draft.step == 1 and draft.cfg.markov_rank == 1 and draft.cfg.target_layer_ids == [2]
    config = json.loads((export(draft.path, tmp_path / "exported") / "config.json").read_text())
    assert (
        config["markov_rank"] == 1
        and config["block_size"] == 4
        and config["num_target_layers"] == 4
    )
    decoder, _ = load_decoder(draft.path, target, scheduler=SchedulerConfig("fixed"), device="cpu")
    assert len(decoder.generate([1, 2, 3], 6).token_ids) == 6

    # it held out rows (the rule before data.hold_out); its GSM8K rows repeat no prompt, so
    # the default rule splits them alike and it resumes
    summary = run(compose_cfg(LEGACY_RUN + [f"target.path={target}", "train.steps=2"]), run_dir)
    assert summary["steps"] == 2
    assert starts(run_dir) == [1]


def test_a_run_whose_only_resumable_checkpoint_is_damaged_is_refused_not_restarted(tmp_path):
    """Older checkpoints keep draft weights only; if the newest is damaged the run cannot resume,
    and says so instead of silently training from step 0 over its own checkpoints."""
    import shutil

    import pytest
    from test_training import compose_cfg

    from splitserve.train import run

    run_dir = tmp_path / "run"
    shutil.copytree(LEGACY, run_dir / "checkpoints", ignore=shutil.ignore_patterns("README.md"))
    ckpt.drop_training_state(run_dir / "checkpoints" / "step-00000001")
    target = legacy_target(tmp_path / "target")
    with pytest.raises(ValueError, match="none keeps the training state resuming needs"):
        run(compose_cfg(LEGACY_RUN + [f"target.path={target}", "train.steps=2"]), run_dir)
    assert (run_dir / "checkpoints" / "step-00000001" / "draft" / "model.safetensors").is_file()


@pytest.mark.slow
def test_a_new_run_starts_from_exported_or_checkpointed_draft_weights(tmp_path):
    """train.init_from: a run directory, an exported draft directory or a checkpoint's draft/
    folder on its own (what a device call brings back) gives the new run exactly those weights
    (checked with lr 0: the first checkpoint holds them unchanged); a draft of another shape is
    refused before any worker starts, naming the field; a resuming run keeps its own
    checkpoint."""
    import pytest
    from test_training import TINY, compose_cfg

    from serving.export import export
    from serving.launch import build_command
    from splitserve.train import run

    base = [o for o in TINY if not o.startswith("train.steps")] + ["split.colocated=true"]
    # the draft-only weights in shards of at most 1 MiB (an index names them)
    first = run(compose_cfg(base + ["train.steps=2", "train.weight_shard_mb=1"]), tmp_path / "a")
    draft_dir = Path(first["checkpoint"]) / "draft"
    shards = sorted(p.name for p in draft_dir.glob("model-*.safetensors"))
    assert len(shards) > 2 and not (draft_dir / "model.safetensors").exists()
    index = json.loads((draft_dir / "model.safetensors.index.json").read_text())["weight_map"]
    for name in shards:  # at most 1 MiB, unless one tensor alone is larger
        size = (draft_dir / name).stat().st_size
        assert size <= 2**20 + 1000 or list(index.values()).count(name) == 1
    assert ckpt.weight_files(draft_dir) == ["model.safetensors.index.json", *shards]
    trained = ckpt.load_weights(draft_dir)
    exported = export(
        Path(first["checkpoint"]), tmp_path / "exported", dtype="float32", max_shard_mb=1
    )
    assert (exported / "model.safetensors.index.json").is_file()
    build_command("/models/target", exported)  # the SGLang launcher accepts a sharded draft
    frozen = ["train.steps=1", "train.lr=0", "train.checkpoint_every=1"]
    alone = shutil.copytree(draft_dir, tmp_path / "brought_back" / "draft")  # draft/ alone
    sources = (("from_run", tmp_path / "a"), ("from_export", exported), ("from_draft", alone))
    for name, source in sources:
        out = run(compose_cfg(base + frozen + [f"train.init_from={source}"]), tmp_path / name)
        got = ckpt.load_weights(Path(out["checkpoint"]) / "draft")
        assert got.keys() == trained.keys()
        assert all(torch.equal(got[k], trained[k]) for k in trained), name
    with pytest.raises(ValueError, match=r"differs from this run's in \['markov_rank'\]"):
        run(
            compose_cfg(base + ["draft.markov_rank=32", f"train.init_from={exported}"]),
            tmp_path / "b",
        )
    # a truncated shard is named before anything reads it
    shard = draft_dir / shards[1]
    shard.write_bytes(shard.read_bytes()[:100])
    why = ckpt.problem(Path(first["checkpoint"]), ckpt.DRAFT_FILES)
    assert why is not None and why.startswith(f"file {shard} has 100 bytes, expected ")
    with pytest.raises(ValueError, match="not a draft SplitServe can read .not a DSpark draft's"):
        (tmp_path / "other").mkdir()
        (tmp_path / "other" / "config.json").write_text("{}")
        run(compose_cfg(base + [f"train.init_from={tmp_path / 'other'}"]), tmp_path / "c")


def test_resume_refuses_a_hold_out_rule_that_splits_the_rows_otherwise(tmp_path):
    """A run saved before data.hold_out existed held out rows. Resumed under `prompts` on a file
    that repeats a held-out prompt, its training rows (so its prompt stream) would differ:
    refused. On rows that repeat no prompt the two rules agree, and it resumes."""
    from test_data import _chat_rows

    from splitserve.data import DataConfig, SourceConfig, load_prompts
    from splitserve.train import _check_resume_data

    (tmp_path / "config.yaml").write_text("data:\n  eval_prompts: 1\n")  # no hold_out: rows
    pairs = [("p0", "a"), ("p1", "a"), ("p0", "b")]
    src = SourceConfig(kind="jsonl_chat", path=str(_chat_rows(tmp_path / "r.jsonl", pairs)))
    data = DataConfig(sources=[src], eval_prompts=1)
    with pytest.raises(ValueError, match="trained with data.hold_out=rows, which splits these"):
        _check_resume_data(tmp_path, data, load_prompts(data))
    _chat_rows(tmp_path / "r.jsonl", pairs[:2])  # p1 held either way
    _check_resume_data(tmp_path, data, load_prompts(data))
    rows = DataConfig(sources=[src], eval_prompts=1, hold_out="rows")
    _check_resume_data(tmp_path, rows, load_prompts(rows))  # the rule it was saved with


def test_resume_accepts_another_chunk_size_but_not_another_objective(tmp_path):
    """loss.chunk_rows only bounds memory, so a run resumes under another value (runs saved
    with the old default of 256 resume at 1,024); a loss weight or the architecture is what was
    trained and must match."""
    import dataclasses
    import json

    from conftest import tiny_config

    from splitserve.train import _check_resume

    saved = tiny_config("dspark")
    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "draft_config.json").write_text(
        json.dumps(dataclasses.asdict(saved), indent=1)
    )
    loss = saved.loss
    _check_resume(
        tmp_path, dataclasses.replace(saved, loss=dataclasses.replace(loss, chunk_rows=7))
    )
    _check_resume(
        tmp_path, dataclasses.replace(saved, loss=dataclasses.replace(loss, kernel="torch"))
    )
    # null (a checkpoint from before the field) is DSpark's own convention: true
    _check_resume(tmp_path, dataclasses.replace(saved, sample_from_anchor=True))
    for changed, field in (
        (dataclasses.replace(saved, loss=dataclasses.replace(loss, ce_weight=0.5)), "loss"),
        (dataclasses.replace(saved, num_layers=saved.num_layers + 1), "num_layers"),
        (dataclasses.replace(saved, sample_from_anchor=False), "sample_from_anchor"),
    ):
        with pytest.raises(ValueError, match=rf"different draft config \(fields \['{field}'\]\)"):
            _check_resume(tmp_path, changed)
