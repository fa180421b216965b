"""Verify-length scheduling: hand-computed cases, R > 1, causality, monotonicity in the SPS
table."""

import json

import pytest
import torch
from conftest import llama_config

from serving.scheduler import SchedulerConfig, prefix_schedule, schedule
from serving.sps import SpsTable


def table(rates: dict[int, float]) -> SpsTable:
    widths = sorted(rates)
    return SpsTable(widths, [rates[w] for w in widths], widths[-1])


def test_batch_one_hand_case():
    sps = table({1: 100, 2: 95, 3: 90, 4: 60})
    # B=1, tau=1: 100 -> +0.9: 1.9*95=180.5 -> +0.8: 2.7*90=243 -> +0.3: 3.0*60=180, stop
    assert prefix_schedule(torch.tensor([[0.9, 0.8, 0.3]]), sps) == [2]


def test_several_requests_hand_case():
    sps = table({1: 100, 3: 100, 4: 80})
    a = torch.tensor([[0.9, 0.5], [0.7, 0.6]])
    # B=2, tau=2: 200 -> (r0,1) 2.9*100=290 -> (r1,1) 3.6*80=288 <= 290: stop
    assert prefix_schedule(a, sps) == [1, 0]
    flat = table({1: 100, 8: 100})
    assert prefix_schedule(a, flat) == [2, 2]  # verifying is free: take everything


def test_early_stop_is_causal():
    sps = table({1: 100, 2: 95, 3: 90, 4: 60})
    base = prefix_schedule(torch.tensor([[0.9, 0.8, 0.3, 0.2]]), sps)
    # whatever comes after the stopping candidate, the decision is the same
    for tail in ([0.3, 0.29], [0.25, 0.0], [0.3, 0.3]):
        assert prefix_schedule(torch.tensor([[0.9, 0.8, *tail]]), sps) == base


def test_monotone_in_the_sps_table():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        r, gamma = int(torch.randint(1, 4, (1,), generator=g)), 6
        c = torch.rand(r, gamma, generator=g)
        a = torch.cumprod(c, 1)
        widths = list(range(1, r * (gamma + 1) + 1))
        drops = torch.rand(len(widths), generator=g) * 0.3
        rates = torch.cumprod(1 - drops, 0) * 100
        # smaller drops
        flatter = torch.cumprod(1 - drops * torch.rand(len(widths), generator=g), 0) * 100
        base = sum(prefix_schedule(a, SpsTable(widths, rates.tolist(), widths[-1])))
        more = sum(prefix_schedule(a, SpsTable(widths, flatter.tolist(), widths[-1])))
        assert more >= base
        scaled = sum(prefix_schedule(a, SpsTable(widths, (rates * 7.5).tolist(), widths[-1])))
        assert scaled == base  # only the shape of the table matters


def test_threshold_and_fixed_modes():
    a = torch.tensor([[0.9, 0.6, 0.4], [0.3, 0.2, 0.1]])
    assert schedule(a, SchedulerConfig(mode="threshold", threshold=0.5)) == [2, 0]
    assert schedule(a, SchedulerConfig(mode="fixed")) == [3, 3]
    assert schedule(a, SchedulerConfig(mode="fixed", length=1)) == [1, 1]
    with pytest.raises(ValueError, match="needs an SPS table"):
        schedule(a, SchedulerConfig(mode="prefix"))
    with pytest.raises(ValueError, match="allowed: prefix, threshold, fixed"):
        SchedulerConfig(mode="greedy").validate()
    with pytest.raises(ValueError, match="cumulative product"):
        prefix_schedule(torch.tensor([[0.2, 0.9]]), table({1: 100, 8: 100}))


def test_sps_table_file_round_trip_and_floor_lookup(tmp_path):
    t = table({1: 100.0, 4: 90.0, 16: 50.0})
    path = tmp_path / "sps.json"
    path.write_text(t.to_json())
    loaded = SpsTable.load(path)
    assert loaded == t
    assert [loaded(w) for w in (1, 3, 4, 15, 16, 99)] == [100.0, 100.0, 90.0, 90.0, 50.0, 50.0]


@pytest.mark.parametrize(
    "content,match",
    [
        ("{", "not valid JSON"),
        ('{"sample_batch_tokens": [1]}', "expected exactly the keys"),
        (
            '{"sample_batch_tokens": [4, 2], "sample_steps_per_sec": [1, 1], "max_batch_tokens": '
            "4}",
            "strictly increasing",
        ),
        (
            '{"sample_batch_tokens": [1, 2], "sample_steps_per_sec": [1], "max_batch_tokens": 4}',
            "2 sample_batch_tokens but 1",
        ),
        (
            '{"sample_batch_tokens": [1], "sample_steps_per_sec": [0], "max_batch_tokens": 4}',
            "must all be > 0",
        ),
        (
            '{"sample_batch_tokens": [1, 8], "sample_steps_per_sec": [1, 1], "max_batch_tokens": '
            "4}",
            "max_batch_tokens=4",
        ),
    ],
)
def test_malformed_sps_files_are_named(tmp_path, content, match):
    path = tmp_path / "sps.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=match) as err:
        SpsTable.load(path)
    assert str(path) in str(err.value)


def test_profile_sps_writes_a_table_sglang_can_read(tmp_path, capfd):
    import warnings

    from transformers import AutoModelForCausalLM

    from serving.profile_sps import main as profile_main

    target = tmp_path / "tiny"
    AutoModelForCausalLM.from_config(
        llama_config(num_hidden_layers=2, num_key_value_heads=4)
    ).save_pretrained(target)
    out = tmp_path / "sps.json"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # pytest ignores FutureWarning; the CLI's user sees them
        code = profile_main(
            [
                "--out",
                str(out),
                "--target",
                str(target),
                "--widths",
                "1",
                "2",
                "4",
                "--context",
                "16",
                "--repeats",
                "2",
            ]
        )
    assert code == 0
    # the cache's current name
    assert not [w for w in caught if "past_key_values" in str(w.message)]
    table = SpsTable.load(out)
    assert table.sample_batch_tokens == [1, 2, 4] and table.max_batch_tokens == 4
    assert all(r > 0 for r in table.sample_steps_per_sec)
    assert set(json.loads(out.read_text())) == {
        "sample_batch_tokens",
        "sample_steps_per_sec",
        "max_batch_tokens",
    }
    assert profile_main(["--out", str(out), "--target", str(target), "--widths", "4", "2"]) == 2
    assert "strictly increasing" in capfd.readouterr().err
    # the static runtime's engine (eager on CPU: the same step code its graphs capture on a GPU)
    static = tmp_path / "static.json"
    argv = ["--out", str(static), "--target", str(target), "--widths", "1", "4"]
    assert profile_main(argv + ["--context", "16", "--repeats", "2", "--runtime", "static"]) == 0
    assert "engine StaticEngine, context 16" in capfd.readouterr().out
    assert SpsTable.load(static).sample_batch_tokens == [1, 4]
