"""Routes between target and trainer workers: every sample has one producer and one consumer."""

from collections import Counter

import pytest

from splitserve.topology import Topology


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


def test_step_slices_and_resume_cursor():
    t = Topology(1, 2, samples_per_trainer_step=4)
    assert list(t.trainer_samples(1, 3, 4)) == [28, 29, 30, 31]  # step 3, trainer 1
    assert list(t.target_samples(0, 3, 4)) == list(range(24, 32))
    with pytest.raises(ValueError, match="at least one target and one trainer"):
        Topology(0, 1, 1)
