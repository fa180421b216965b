"""Atomic checkpoints: partial or corrupt ones are reported and skipped, good ones are kept."""

from pathlib import Path

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


def test_prune_keeps_the_newest_good_checkpoints(tmp_path):
    for step in (1, 2, 3, 4):
        make(tmp_path, step)
    (ckpt.final_dir(tmp_path, 4) / ckpt.COMPLETE).unlink()  # newest is broken: must not count
    ckpt.staging_dir(tmp_path, 5).mkdir(parents=True)
    ckpt.prune(tmp_path, keep=2)
    left = sorted(p.name for p in ckpt.checkpoint_root(tmp_path).iterdir())
    assert left == ["step-00000002", "step-00000003", "step-00000004"]
