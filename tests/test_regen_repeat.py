"""scripts/regen_repeat.py: where two regenerations of the same samples part, told apart as
the forward's states moving first or the sampler choosing differently on identical states; run
on the real SmolLM2 on CPU, where fp32 regeneration repeats itself exactly."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import run_script
from test_regenerate import SHRUNK

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from regen_repeat import compare, summarize  # noqa: E402  (scripts/)

# test_regenerate's shrunk recipe (2 of samples 0..5 have prompts too long), on the static backend
TINY = [*SHRUNK, "target.backend=static"]


def test_compare_finds_the_first_moved_state_and_the_first_parted_token():
    ids = torch.arange(10)
    states = torch.arange(40.0).view(10, 4)  # exact in float32: differences compare exactly
    same = compare(ids, ids.clone(), states, states.clone(), prompt_len=4)
    assert same["tokens_equal"] and same["first_token_diff"] is None
    assert same["first_state_diff"] is None and same["state_max_abs"] == 0.0

    b_ids, b_states = ids.clone(), states.clone()
    b_states[6, 1] += 0.5  # the forward moved at 6, then the token at 8 parted
    b_ids[8] = 99
    b_states[8:] += 100.0  # after the parting the states follow other tokens: not compared
    row = compare(ids, b_ids, states, b_states, prompt_len=4)
    assert row["first_token_diff"] == 8 and row["first_state_diff"] == 6
    assert row["state_max_abs"] == 0.5 and row["prompt_state_max_abs"] == 0.0

    b_states = states.clone()
    b_states[2, 0] -= 0.25  # the prefill moved; the tokens never parted
    row = compare(ids, ids.clone(), states, b_states, prompt_len=4)
    assert row["tokens_equal"] and row["first_state_diff"] == 2
    assert row["prompt_state_max_abs"] == 0.25

    # one repeat stopped earlier: the tokens part where the shorter ends
    row = compare(ids, ids[:7], states, states[:7], prompt_len=4)
    assert row["first_token_diff"] == 7 and row["first_state_diff"] is None

    # the same states, another token: the sampler, not the forward
    b_ids = ids.clone()
    b_ids[5] = 42
    rows = [row, compare(ids, b_ids, states, states.clone(), prompt_len=4), same]
    summary = summarize(rows, [0.0, 1.0, 1.0])
    assert summary["tokens_equal"] == 1 and summary["samples"] == 3
    assert summary["tokens_differ_after_identical_states"] == 2
    assert summary["states_differ_before_tokens"] == 0
    assert summary["median_answer_tokens_before_parting"] == 2  # of 1 (5 - 4) and 3 (7 - 4)
    assert summary["by_setting"] == {
        "temperature=0": {"samples": 1, "tokens_equal": 0},
        "temperature=1": {"samples": 2, "tokens_equal": 1},
    }


@pytest.mark.slow
def test_fp32_regeneration_on_cpu_repeats_itself_bit_for_bit(tmp_path):
    args = ["--samples", "6", "--sdpa", "math", "--device", "cpu", *TINY]
    out = tmp_path / "report.json"
    run_script("regen_repeat.py", "--out", str(out), *args)
    report = json.loads(out.read_text())
    assert report["command"] == "python scripts/regen_repeat.py " + shlex.join(
        ["--out", str(out), *args]
    )
    assert report["samples"] == 4 and report["dtype"] == "torch.float32"  # 2 prompts too long
    assert not report["graphs"] and report["sdpa"] == "math" and report["slots"] == 2
    assert report["engines_built"] == 2  # a fresh engine (cache, graphs) for each repeat
    (against,) = report["against_first"]
    assert against["repeat"] == 1 and against["tokens_equal"] == 4
    assert against["state_max_abs"] == 0.0 and against["prompt_states_differ"] == 0
    assert {k: v["samples"] for k, v in against["by_setting"].items()} == {
        "temperature=0": 2,
        "temperature=1": 1,
        "temperature=0.7": 1,
    }
    # the first prefill's samples (2 slots), counted apart: their prefill shapes never change
    assert (
        against["first_prefill"]["samples"] == 2 and against["first_prefill"]["tokens_equal"] == 2
    )
    assert all(r["prompt_len"] > 50 for r in against["per_sample"])


@pytest.mark.parametrize(
    "override, named",
    [("target.regenerate=false", "regenerate=False"), ("target.backend=hf", "backend=hf")],
)
def test_only_the_static_backends_regeneration_is_compared(tmp_path, override, named):
    out = tmp_path / "r.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "regen_repeat.py"), "--out", str(out)]
    proc = subprocess.run(
        cmd + ["--device", "cpu", *TINY, override], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2 and f"target.{named}" in proc.stderr
    assert not out.exists()
