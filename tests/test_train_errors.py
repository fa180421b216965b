"""Bad input to `splitserve.train`: a clear error naming the problem, and no broken run
directory."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import llama_config
from test_training import ROOT, TINY, compose_cfg
from transformers import AutoModelForCausalLM, AutoTokenizer

from splitserve.target.embedded import ensure_smollm2
from splitserve.train import run


def fresh_run_dir(tmp_path: Path) -> Path:
    """What Hydra leaves before our code runs: the run directory with its .hydra folder."""
    d = tmp_path / "run"
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "config.yaml").write_text("{}")
    return d


def expect_failure(tmp_path, overrides, error, match):
    run_dir = fresh_run_dir(tmp_path)
    with pytest.raises(error, match=match):
        run(compose_cfg(TINY + overrides), run_dir)
    assert not run_dir.exists(), "a failed start must not leave a run directory behind"


def test_missing_target_path(tmp_path):
    expect_failure(
        tmp_path,
        ["target.kind=path", f"target.path={tmp_path}/nope"],
        FileNotFoundError,
        r"target.path=.*/nope does not exist",
    )


def test_target_kind_path_without_path(tmp_path):
    expect_failure(tmp_path, ["target.kind=path"], ValueError, r"target.path is required")


def test_tokenizer_that_does_not_match_the_target(tmp_path):
    model_dir = tmp_path / "tiny"
    cfg = llama_config(vocab_size=1000)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(model_dir)
    AutoTokenizer.from_pretrained(ensure_smollm2()).save_pretrained(model_dir)  # 49152 tokens
    expect_failure(
        tmp_path,
        ["target.kind=path", f"target.path={model_dir}"],
        ValueError,
        r"49152 tokens but the target's vocab_size is 1000: tokenizer and target do not match",
    )


def test_malformed_dataset_line_is_reported_with_file_and_line(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text(
        json.dumps({"question": "1+1?", "answer": "2"}) + "\n\n" + '{"question": "x", "answer": \n'
    )
    expect_failure(
        tmp_path,
        [f"data.sources=[{{kind:gsm8k,path:{data},limit:null,weight:1}}]"],
        ValueError,
        rf"{data}:3: not valid JSON",
    )
    data.write_text(json.dumps({"question": "1+1?"}) + "\n")
    expect_failure(
        tmp_path,
        [f"data.sources=[{{kind:gsm8k,path:{data},limit:null,weight:1}}]"],
        ValueError,
        rf"{data}:1: field 'answer' must be a non-empty string",
    )


def test_draft_hidden_size_that_does_not_match_the_target(tmp_path):
    expect_failure(
        tmp_path,
        ["draft.hidden_size=128"],
        ValueError,
        r"draft.hidden_size=128 is invalid; allowed: the target hidden size 576",
    )


def test_a_negative_render_ahead_is_named(tmp_path):
    expect_failure(
        tmp_path,
        ["target.render_ahead=-1"],
        ValueError,
        r"target.render_ahead=-1.*>= 0 \(0: inline\)",
    )


def test_an_unknown_hold_out_rule_is_named(tmp_path):
    expect_failure(
        tmp_path,
        ["data.hold_out=row"],
        ValueError,
        r"data.hold_out='row' is invalid; allowed: prompts, rows",
    )


def test_unknown_config_key(tmp_path):
    expect_failure(
        tmp_path, ["+train.learning_rate=0.1"], ValueError, r"bad config key train.learning_rate"
    )


def test_unknown_config_key_on_the_command_line_leaves_nothing(tmp_path):
    run_dir = tmp_path / "cli"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "splitserve.train",
            "+draft.rope_scale=2",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "bad config key draft.rope_scale" in out.stderr
    assert not run_dir.exists()


def test_a_failed_start_never_touches_an_earlier_run(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "step-00000002").mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    with pytest.raises(ValueError, match="hidden_size"):
        run(compose_cfg(TINY + ["draft.hidden_size=128"]), run_dir)
    assert (run_dir / "metrics.jsonl").read_text() == '{"step": 1, "loss": 1.0}\n'
    assert (run_dir / "checkpoints" / "step-00000002").is_dir()


@pytest.mark.slow
def test_an_unknown_override_is_named_with_the_nearest_keys_on_the_first_try(tmp_path):
    """Not Hydra's "use +train.nosuchkey=1" (which leads to a second error): the project's own
    message, before anything is composed or written."""
    for override, expected in [
        ("train.nosuchkey=1", "error: unknown config key train.nosuchkey (keys at train: steps,"),
        ("train.step=3", "error: unknown config key train.step; did you mean train.steps"),
        ("draft.loss.ce_wieght=1", "did you mean draft.loss.ce_weight"),
    ]:
        out = subprocess.run(
            [sys.executable, "-m", "splitserve.train", override, f"hydra.run.dir={tmp_path}/run"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 2 and expected in out.stderr, out.stderr
        assert "+train" not in out.stderr and not (tmp_path / "run").exists()
