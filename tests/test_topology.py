"""Routes between target and trainer workers: every sample has one producer and one consumer."""

from collections import Counter
from pathlib import Path

import pytest
import torch

from splitserve.topology import Topology, sample_name


@pytest.mark.parametrize("targets,trainers", [(1, 1), (2, 2), (4, 2), (3, 2), (1, 3), (2, 4)])
def test_every_sample_is_produced_once_and_consumed_once(targets, trainers):
    t = Topology(targets, trainers, samples_per_trainer_step=3, num_eval=5)
    produced = Counter(g for i in range(targets) for g in t.target_samples(i, 2, 6))
    consumed = Counter(g for r in range(trainers) for g in t.trainer_samples(r, 2, 6))
    assert produced == consumed and max(consumed.values()) == 1
    expected = set(range(2 * trainers * 3, 6 * trainers * 3)) | {-1, -2, -3, -4, -5}
    assert set(consumed) == expected


@pytest.mark.parametrize("targets,trainers", [(2, 2), (4, 2), (1, 3)])
def test_each_route_carries_samples_in_the_order_they_are_consumed(targets, trainers):
    t = Topology(targets, trainers, samples_per_trainer_step=2, num_eval=3)
    for r in range(trainers):
        for src in t.sources(r):
            consumed = [g for g in t.trainer_samples(r, 0, 4) if t.route(g)[0] == src]
            produced = [g for g in t.target_samples(src, 0, 4) if t.route(g)[1] == r]
            assert consumed == produced


def test_held_out_ids_are_named_as_prompts_in_logs():
    """A target's wait notice names the sample it holds; the held-out ones (ids -1, -2, ...,
    sent first) read as prompts 1, 2, ..., not as a sample -1 (as a training log once had it)."""
    t = Topology(1, 1, samples_per_trainer_step=2, num_eval=2)
    first = list(t.target_samples(0, 0, 1))
    assert [sample_name(g) for g in first] == [
        "held-out sample 1",
        "held-out sample 2",
        "sample 0",
        "sample 1",
    ]


def test_step_slices_and_resume_cursor():
    t = Topology(1, 2, samples_per_trainer_step=4)
    assert list(t.trainer_samples(1, 3, 4)) == [28, 29, 30, 31]  # step 3, trainer 1
    assert list(t.target_samples(0, 3, 4)) == list(range(24, 32))
    with pytest.raises(ValueError, match="at least one target and one trainer"):
        Topology(0, 1, 1)


@pytest.mark.parametrize(
    "gpus, overrides, expected",
    [
        (8, [], (7, 1)),  # unset: one trainer, a target on every other GPU
        (8, ["split.trainer_procs=2"], (6, 2)),
        (8, ["split.target_procs=4"], (4, 4)),
        (8, ["split.target_procs=2", "split.trainer_procs=6"], (2, 6)),
        (2, [], (1, 1)),
        (1, [], (1, 1)),  # one GPU: both share it
        # the static backend's measured share: half the GPUs are targets
        (8, ["target.backend=static"], (4, 4)),
        (2, ["target.backend=static"], (1, 1)),
        (1, ["target.backend=static"], (1, 1)),
        (8, ["target.backend=static", "split.trainer_procs=2"], (6, 2)),
    ],
)
def test_default_gpu_split(monkeypatch, gpus, overrides, expected):
    """GPU counts cannot exist on this machine: device_count is the one thing stood in for."""
    from hydra import compose, initialize_config_dir

    from splitserve.config import load_run_config
    from splitserve.train import build_topology

    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    with initialize_config_dir(
        str(Path(__file__).resolve().parents[1] / "conf"), version_base="1.3"
    ):
        cfg = load_run_config(compose("config", overrides=overrides))
    t = build_topology(cfg, "cuda")
    assert (t.num_targets, t.num_trainers) == expected


def test_more_targets_than_samples_per_step_still_share_the_work():
    """7 targets feeding 1 trainer that takes 2 samples a step: every target produces, evenly."""
    t = Topology(7, 1, samples_per_trainer_step=2)
    per_target = [len(list(t.target_samples(i, 0, 14))) for i in range(7)]
    assert per_target == [4] * 7
