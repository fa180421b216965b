"""serving.evaluate and serving.calibrate on real (1-step) checkpoints of the embedded target."""

import json

import pytest

from draft_models.sts import read_temperatures
from serving.benchmarks import load_bench
from serving.calibrate import main as calibrate_main
from serving.evaluate import main as evaluate_main
from splitserve.train import run
from test_training import TINY, compose_cfg


def one_step_checkpoint(run_dir, *extra):
    return run(compose_cfg(TINY + ["train.steps=1", "train.checkpoint_every=1", *extra]), run_dir)["checkpoint"]


@pytest.fixture(scope="module")
def dspark_ckpt(tmp_path_factory):
    return one_step_checkpoint(tmp_path_factory.mktemp("dspark"))


@pytest.fixture(scope="module")
def eagle3_ckpt(tmp_path_factory):
    return one_step_checkpoint(tmp_path_factory.mktemp("eagle3"), "draft=eagle3", "draft.block_size=3")


def test_evaluate_writes_the_report_and_plot(dspark_ckpt, tmp_path, capsys):
    rc = evaluate_main(["--checkpoint", str(dspark_ckpt), "--bench", "gsm8k,humaneval", "--limit", "1",
                        "--max-new-tokens", "12", "--scheduler", "threshold", "--threshold", "0.05",
                        "--out", str(tmp_path)])
    assert rc == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["bench"] for r in printed] == ["gsm8k", "humaneval"]
    report = json.loads((tmp_path / "gsm8k.json").read_text())
    assert report == printed[0]
    assert report["identical_to_target_only"] == "1/1"  # greedy: lossless
    assert len(report["acceptance_by_position"]) == 4 and report["tau"] >= 1.0
    spec = report["speculative"]
    assert spec["tokens"] <= 12 and spec["steps"] >= 1 and report["target_only"]["tokens_per_s"] > 0
    assert 0.0 <= report["wasted_verify_fraction"] <= 1.0
    assert (tmp_path / "acceptance.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_decodes_eagle3_with_sampling(eagle3_ckpt, tmp_path, capsys):
    rc = evaluate_main(["--checkpoint", str(eagle3_ckpt), "--bench", "gsm8k", "--limit", "1",
                        "--max-new-tokens", "10", "--temperature", "1.0", "--out", str(tmp_path)])
    assert rc == 0
    report = json.loads(capsys.readouterr().out.splitlines()[0])
    assert report["block_size"] == 3 and "identical_to_target_only" not in report
    assert report["speculative"]["tokens"] <= 10


def test_calibrate_writes_sglang_sts_from_held_out_prompts(dspark_ckpt, tmp_path, capsys):
    out = tmp_path / "sts.json"
    assert calibrate_main(["--checkpoint", str(dspark_ckpt), "--out", str(out), "--max-new-tokens", "24"]) == 0
    text = capsys.readouterr().out
    assert "ECE before" in text and text.count("\n") >= 6
    data = json.loads(out.read_text())
    assert data["dataset"] == "held-out" and data["num_samples"] >= 1
    assert len(read_temperatures(out, 4)) == 4 and len(data["ece_after"]) == 4


def test_serving_cli_errors(dspark_ckpt, eagle3_ckpt, tmp_path, capsys, monkeypatch):
    assert evaluate_main(["--checkpoint", str(dspark_ckpt), "--bench", "nope"]) == 2
    assert "unknown benchmark 'nope'" in capsys.readouterr().err
    assert calibrate_main(["--checkpoint", str(eagle3_ckpt), "--out", str(tmp_path / "s.json")]) == 2
    assert "no confidence head" in capsys.readouterr().err and not (tmp_path / "s.json").exists()
    assert evaluate_main(["--checkpoint", str(tmp_path), "--bench", "gsm8k"]) == 2
    assert "not a complete SplitServe checkpoint" in capsys.readouterr().err
    bad = tmp_path / "shared" / "gsm8k"
    bad.mkdir(parents=True)
    (bad / "test_public.jsonl").write_text('{"question": "ok"}\n{"question": \n')
    monkeypatch.setenv("SPLITSERVE_SHARED_DATA", str(tmp_path / "shared"))
    with pytest.raises(ValueError, match="test_public.jsonl:2: not valid JSON"):
        load_bench("gsm8k")


def test_benchmarks_load_from_their_packages():
    mt = load_bench("mtbench", 3)
    assert len(mt) == 3 and all(len(turns) == 2 for turns in mt)
    he = load_bench("humaneval", 2)
    assert len(he) == 2 and "def " in he[0][0]
    assert len(load_bench("gsm8k")) == 500
