"""serving.evaluate and serving.calibrate on real (1-step) checkpoints of the embedded target."""

import json
from pathlib import Path

import pytest
import torch
from test_training import TINY, compose_cfg

from draft_models.sts import read_temperatures
from serving.benchmarks import load_bench
from serving.calibrate import main as calibrate_main
from serving.evaluate import main as evaluate_main
from serving.generate import main as generate_main
from splitserve.train import run

pytestmark = pytest.mark.slow  # spawns processes or decodes with the real SmolLM2


def one_step_checkpoint(run_dir, *extra):
    return run(compose_cfg(TINY + ["train.steps=1", "train.checkpoint_every=1", *extra]), run_dir)[
        "checkpoint"
    ]


@pytest.fixture(scope="module")
def dspark_ckpt(tmp_path_factory):
    return one_step_checkpoint(tmp_path_factory.mktemp("dspark"))


@pytest.fixture(scope="module")
def eagle3_ckpt(tmp_path_factory):
    return one_step_checkpoint(
        tmp_path_factory.mktemp("eagle3"), "draft=eagle3", "draft.block_size=3"
    )


def test_evaluate_writes_the_report_and_plot(dspark_ckpt, tmp_path, capsys):
    rc = evaluate_main(
        [
            "--checkpoint",
            str(dspark_ckpt),
            "--bench",
            "gsm8k,humaneval",
            "--limit",
            "1",
            "--max-new-tokens",
            "12",
            "--scheduler",
            "threshold",
            "--threshold",
            "0.05",
            "--out",
            str(tmp_path),
            "--json",  # the reports as JSON lines, for scripts
        ]
    )
    assert rc == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["bench"] for r in printed] == ["gsm8k", "humaneval"]
    report = json.loads((tmp_path / "gsm8k.json").read_text())
    assert report == printed[0]
    assert report["command"] == (  # what reproduces it
        f"python -m serving.evaluate --checkpoint {dspark_ckpt} --bench gsm8k,humaneval --limit 1 "
        f"--max-new-tokens 12 --scheduler threshold --threshold 0.05 --out {tmp_path} --json"
    )
    assert report["identical_to_target_only"] == "1/1"  # greedy: lossless
    assert len(report["acceptance_by_position"]) == 4 and report["tau"] >= 1.0
    spec = report["speculative"]
    assert spec["tokens"] <= 12 and spec["steps"] >= 1 and report["target_only"]["tokens_per_s"] > 0
    assert spec["capture_s"] == report["target_only"]["capture_s"] == 0.0  # no graphs on CPU
    assert 0.0 <= report["wasted_verify_fraction"] <= 1.0
    assert (tmp_path / "acceptance.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_decodes_eagle3_with_sampling(eagle3_ckpt, tmp_path, capsys):
    rc = evaluate_main(
        [
            "--checkpoint",
            str(eagle3_ckpt),
            "--bench",
            "gsm8k",
            "--limit",
            "1",
            "--max-new-tokens",
            "10",
            "--temperature",
            "1.0",
            "--out",
            str(tmp_path),
            "--json",
        ]
    )
    assert rc == 0
    report = json.loads(capsys.readouterr().out.splitlines()[0])
    assert report["block_size"] == 3 and "identical_to_target_only" not in report
    assert report["speculative"]["tokens"] <= 10


def test_calibrate_writes_sglang_sts_from_held_out_prompts(dspark_ckpt, tmp_path, capsys):
    out = tmp_path / "sts.json"
    assert (
        calibrate_main(
            # the run held out one prompt: no test split (0 fits on all, in-sample figures)
            ["--checkpoint", str(dspark_ckpt), "--out", str(out), "--max-new-tokens", "24"]
            + ["--test-fraction", "0"]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "ECE before" in text and text.count("\n") >= 6 and "test split" not in text
    data = json.loads(out.read_text())
    assert data["dataset"] == "held-out" and data["num_samples"] >= 1
    rows = [line for line in text.splitlines() if line[:3].strip().isdigit()]
    assert len(rows) == 4 and all(r.endswith("fitted") or "kept T=1.0:" in r for r in rows)
    for row, t in zip(rows, data["temperatures"], strict=True):  # a kept position is exactly 1.0
        assert ("kept T=1.0" not in row) or t == 1.0
    assert len(read_temperatures(out, 4)) == 4 and len(data["ece_after"]) == 4
    assert "warning" not in capsys.readouterr().err  # held out by prompt (the default)


def test_calibrate_warns_that_a_run_held_out_rows(tmp_path, capsys):
    """A run saved before data.hold_out existed held out rows; on a file that repeats a prompt
    its held-out prompts may be on training rows too: taken by its own rule, with a warning
    that counts them (none under the default rule)."""
    from test_data import _chat_rows

    from serving.calibrate import held_out_prompts

    rows = _chat_rows(tmp_path / "r.jsonl", [("p0", "a"), ("p1", "a"), ("p0", "b")])
    config = f"data:\n  eval_prompts: 1\n  sources: [{{kind: jsonl_chat, path: {rows}}}]\n"
    (tmp_path / "config.yaml").write_text(config)  # what read_run_section reads
    assert held_out_prompts(tmp_path, None) == [["p0"]]
    err = capsys.readouterr().err
    assert f"warning: 1 of the 1 prompts {tmp_path} held out (data.hold_out=rows)" in err
    (tmp_path / "config.yaml").write_text(config + "  hold_out: prompts\n")
    assert held_out_prompts(tmp_path, None) == [["p0"]]  # the row p0 b; p0 a leaves training
    assert "warning" not in capsys.readouterr().err


def test_calibrate_measures_on_prompts_it_did_not_fit(dspark_ckpt, tmp_path, capsys):
    out, report = tmp_path / "sts.json", tmp_path / "report.json"
    argv = ["--checkpoint", str(dspark_ckpt), "--out", str(out), "--max-new-tokens", "24"]
    # one held-out prompt cannot be split: refused before any decoding, nothing written
    assert calibrate_main(argv) == 2
    assert "--test-fraction 0.5 of 1 prompts leaves no prompt" in capsys.readouterr().err
    assert not out.exists()
    argv += ["--prompts", "gsm8k", "--limit", "3", "--min-per-class", "1", "--report", str(report)]
    assert calibrate_main(argv) == 0
    text = capsys.readouterr().out
    assert "3 prompts: fitted on 2, tested on 1" in text and "test split (1 prompts" in text
    rep = json.loads(report.read_text())  # strict JSON: an undefined AUC is null, not NaN
    assert rep["command"].startswith("python -m serving.calibrate --checkpoint ")
    assert rep["fit"]["prompts"] == 2 and rep["test"]["prompts"] == 1
    assert rep["temperatures"] == json.loads(out.read_text())["temperatures"]
    # the test split's figures are those of its own blocks, not the fit's
    assert rep["test"]["num_samples"] > 0 and rep["fit"]["num_samples"] > 0
    assert len(rep["test"]["ece_after"]) == 4 and rep["test"] != rep["fit"]


def test_calibration_splits_spread_test_prompts_over_the_list():
    from serving.calibrate import pick_test_prompts, split

    assert pick_test_prompts(64, 0.5) == list(range(1, 64, 2))  # every source on both sides
    assert pick_test_prompts(4, 0.25) == [3] and pick_test_prompts(5, 0.0) == []
    assert (
        len(pick_test_prompts(100, 0.07)) == 7 and len(pick_test_prompts(25, 0.28)) == 7
    )  # no float creep
    for n, f in ((1, 0.5), (3, 1.0), (2, 0.2)):
        with pytest.raises(ValueError, match=f"--test-fraction {f:g} of {n} prompts leaves"):
            pick_test_prompts(n, f)
    with pytest.raises(ValueError, match="no prompts to calibrate on"):
        pick_test_prompts(0, 0.0)
    block = (torch.zeros(2, 3, dtype=torch.float64), torch.tensor([1, 3]))
    none = (torch.zeros(0, 3, dtype=torch.float64), torch.zeros(0, dtype=torch.long))
    fit, test = split([block, none, block, block], pick_test_prompts(4, 0.5))
    assert fit[0].shape == (4, 3) and test[0].shape == (2, 3)  # prompt 1 (no blocks) is a test one
    assert split([block, block], pick_test_prompts(2, 0.0))[1] is None
    with pytest.raises(ValueError, match=r"the test split \(2 prompts\) has no full draft block"):
        split([block, none, block, none], pick_test_prompts(4, 0.5))


def test_profile_sps_times_whole_decode_steps_of_a_draft(dspark_ckpt, tmp_path, capsys):
    from serving.profile_sps import main as profile_main
    from serving.sps import SpsTable

    out = tmp_path / "sps.json"
    argv = ["--out", str(out), "--checkpoint", str(dspark_ckpt), "--context", "8"]
    argv += ["--repeats", "1", "--new-tokens", "20"]
    assert profile_main(argv + ["--widths", "2", "6"]) == 2  # the draft's gamma is 4
    assert "a step of this draft verifies at most gamma + 1 = 5 tokens" in capsys.readouterr().err
    assert profile_main(argv[:-1] + ["19"]) == 2
    assert "--new-tokens >= 4 x the largest width (20)" in capsys.readouterr().err
    assert not out.exists()
    assert profile_main(argv) == 0
    text = capsys.readouterr().out
    assert "whole decode steps, context 8, 20 new tokens per request" in text
    assert "  width 5: " in text and "budget-narrowed steps in the differences of 2 request" in text
    table = SpsTable.load(out)  # the file SGLang reads, every width of the draft's block
    assert table.sample_batch_tokens == [1, 2, 3, 4, 5] and table.max_batch_tokens == 5
    assert all(r > 0 for r in table.sample_steps_per_sec)


def test_profile_steps_counts_fixed_steps_and_names_a_broken_schedule():
    from serving.profile_sps import _fixed_steps

    assert _fixed_steps([5, 5, 5, 2, 1], 5) == 3  # the budget-narrowed tail is left out
    assert _fixed_steps([5, 5], 5) == 2 and _fixed_steps([3], 5) == 0
    with pytest.raises(ValueError, match=r"width 5: a timed request ran at widths \[2, 5\]"):
        _fixed_steps([5, 2, 5, 5], 5)  # narrowed mid-request: the schedule did not hold
    with pytest.raises(ValueError, match="ran at widths \\[5, 8\\]"):
        _fixed_steps([5, 8, 5], 5)


def test_profile_steps_times_the_width_it_names_and_restores_the_schedule(dspark_ckpt):
    from serving.loading import load_decoder
    from serving.profile_sps import profile_steps
    from serving.scheduler import SchedulerConfig

    kept = SchedulerConfig("threshold", threshold=0.3)
    decoder, _ = load_decoder(dspark_ckpt, scheduler=kept, device="cpu")
    seen = []
    generate = decoder.generate

    def spy(prompt, n, **kw):
        res = generate(prompt, n, **kw)
        seen.append((decoder.scheduler.length, n, res.widths))
        return res

    decoder.generate = spy
    table = profile_steps(decoder, [1, 3], context=8, repeats=1, new_tokens=12)
    assert decoder.scheduler is kept and table.sample_batch_tokens == [1, 3]
    for length, n, widths in seen:  # every request ran the named width but for its last steps
        assert widths[0] == length + 1 and (n == 6 or widths.count(length + 1) >= 9)
    assert {length for length, _, _ in seen} == {0, 2} and len(seen) == 8
    # width 1 makes one token a step: 4 and 2 tokens differ by 2 steps, too few to time
    with pytest.raises(ValueError, match="ran only 2 more steps at width 1 than the shorter"):
        profile_steps(decoder, [1], context=8, repeats=1, new_tokens=4)
    assert decoder.scheduler is kept


def test_serving_cli_errors(dspark_ckpt, eagle3_ckpt, tmp_path, capsys, monkeypatch):
    assert evaluate_main(["--checkpoint", str(dspark_ckpt), "--bench", "nope"]) == 2
    assert "unknown benchmark 'nope'" in capsys.readouterr().err
    assert (
        calibrate_main(["--checkpoint", str(eagle3_ckpt), "--out", str(tmp_path / "s.json")]) == 2
    )
    assert "no confidence head" in capsys.readouterr().err and not (tmp_path / "s.json").exists()
    assert evaluate_main(["--checkpoint", str(tmp_path), "--bench", "gsm8k"]) == 2
    assert "not a complete SplitServe checkpoint" in capsys.readouterr().err
    flags = ["--checkpoint", str(dspark_ckpt), "--bench", "gsm8k", "--device", "cpu"]
    assert evaluate_main(flags + ["--compile", "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "compile needs the static runtime on a GPU" in err and not (tmp_path / "c").exists()
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


def _refused(main, argv, capsys) -> str:
    """argparse's refusal: exit code 2 and the message on stderr."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    "module,argv,message",
    [
        (
            "generate",
            ["--max-new-tokens", "-5"],
            "argument --max-new-tokens: -5 is out of range: allowed an integer >= 1",
        ),
        ("generate", ["--max-new-tokens", "0"], "argument --max-new-tokens: 0 is out of range"),
        (
            "generate",
            ["--block-size", "0"],
            "argument --block-size: 0 is out of range: allowed an integer >= 1",
        ),
        ("generate", ["--block-size", "-3"], "argument --block-size: -3 is out of range"),
        (
            "generate",
            ["--temperature", "-1"],
            "argument --temperature: -1 is out of range: allowed a number >= 0",
        ),
        (
            "generate",
            ["--threshold", "1.5"],
            "argument --threshold: 1.5 is out of range: allowed a number in [0, 1]",
        ),
        ("generate", ["--verify-widths", "0", "5"], "argument --verify-widths: 0 is out of range"),
        ("generate", ["--seed", "x"], "argument --seed: 'x' is not an integer >= 0"),
        ("evaluate", ["--limit", "0"], "argument --limit: 0 is out of range"),
        ("calibrate", ["--out", "s.json", "--limit", "0"], "argument --limit: 0 is out of range"),
        ("calibrate", [], "give one of --out (fit temperatures and write them) and --score"),
        ("calibrate", ["--out", "s.json", "--score", "s.json"], "give one of --out"),
        (
            "calibrate",
            ["--out", "s.json", "--prompts", "nope.jsonl"],
            "argument --prompts: 'nope.jsonl' is neither held-out, a benchmark (gsm8k, mtbench, "
            "humaneval) nor an existing jsonl_chat file",
        ),
        (
            "calibrate",
            ["--out", "s.json", "--min-per-class", "0"],
            "argument --min-per-class: 0 is out of range",
        ),
        (
            "calibrate",
            ["--out", "s.json", "--scheduler", "prefix"],
            "unrecognized arguments: --scheduler prefix",
        ),
        (
            "calibrate",
            ["--out", "s.json", "--block-size", "2"],
            "unrecognized arguments: --block-size 2",
        ),
    ],
)
def test_out_of_range_numbers_and_flags_that_do_not_apply_are_refused(
    module, argv, message, capsys
):
    import importlib

    main = importlib.import_module(f"serving.{module}").main
    err = _refused(
        main,
        ["--checkpoint", "unused", "--prompt", "p"][: 2 if module != "generate" else 4] + argv,
        capsys,
    )
    assert message in err and f"usage: python -m serving.{module}" in err


def test_other_clis_refuse_out_of_range_numbers(capsys):
    from serving.ablation_report import main as report_main
    from serving.launch import main as launch_main
    from serving.profile_sps import main as profile_main

    assert "argument --widths: 0 is out of range" in _refused(
        profile_main, ["--out", "x", "--widths", "0", "4"], capsys
    )
    assert "argument --context: 0 is out of range" in _refused(
        profile_main, ["--out", "x", "--context", "0"], capsys
    )
    assert "argument --port: 70000 is out of range: allowed an integer in [1, 65535]" in _refused(
        launch_main, ["--target", "t", "--draft", "d", "--port", "70000"], capsys
    )
    assert "argument --tp-size: 0 is out of range" in _refused(
        launch_main, ["--target", "t", "--draft", "d", "--tp-size", "0"], capsys
    )
    assert "argument --temperature: -1 is out of range" in _refused(
        report_main, ["s", "--out", "o", "--temperature", "-1"], capsys
    )


@pytest.mark.parametrize(
    "module",
    ["generate", "evaluate", "calibrate", "profile_sps", "export", "launch", "ablation_report"],
)
def test_every_flag_has_help_with_its_default_and_the_usage_names_the_module(module, capsys):
    import argparse
    import importlib

    cli_module = importlib.import_module(f"serving.{module}")
    parser = cli_module.build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        text = parser.formatter_class("x")._get_help_string(action) % {"default": action.default}
        assert action.help and len(action.help.split()) >= 2, action.option_strings
        if action.default is not None and action.default is not False:  # 0 and 0.0 count
            assert "default" in text, (action.option_strings, text)
    with pytest.raises(SystemExit) as exc:
        cli_module.main(["--help"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith(
        f"usage: python -m serving.{module}"
    )


def test_a_block_size_above_the_trained_one_names_the_range(dspark_ckpt, capsys):
    from serving.generate import main as generate_main

    assert (
        generate_main(["--checkpoint", str(dspark_ckpt), "--prompt", "hi", "--block-size", "9"])
        == 2
    )
    assert (
        "block_size=9 is larger than the draft was trained for; allowed 1..4"
        in capsys.readouterr().err
    )


def test_a_run_directory_takes_its_newest_complete_checkpoint(dspark_ckpt, capsys):
    from serving.generate import main as generate_main

    run_dir = Path(dspark_ckpt).parent.parent
    assert (
        generate_main(
            [
                "--checkpoint",
                str(run_dir),
                "--prompt",
                "What is 2 + 2?",
                "--max-new-tokens",
                "4",
                "--json",
            ]
        )
        == 0
    )
    out = capsys.readouterr()
    assert f"using {dspark_ckpt} (the newest complete checkpoint of {run_dir})" in out.err
    assert len(json.loads(out.out)["token_ids"]) == 4


def test_a_truncated_draft_file_is_named_by_every_reader(dspark_ckpt, tmp_path, capsys):
    import shutil

    from serving.export import main as export_main
    from serving.generate import main as generate_main

    copy = tmp_path / "step-00000001"
    shutil.copytree(dspark_ckpt, copy)
    weights = copy / "draft" / "model.safetensors"
    size = weights.stat().st_size
    with open(weights, "r+b") as f:
        f.truncate(size // 2)
    expected = f"file {weights} has {size // 2} bytes, expected {size}"
    assert generate_main(["--checkpoint", str(copy), "--prompt", "hi"]) == 2
    assert expected in capsys.readouterr().err
    assert export_main(["--checkpoint", str(copy), "--out", str(tmp_path / "out")]) == 2
    assert expected in capsys.readouterr().err and not (tmp_path / "out").exists()
    assert calibrate_main(["--checkpoint", str(copy), "--out", str(tmp_path / "s.json")]) == 2
    assert expected in capsys.readouterr().err and not (tmp_path / "s.json").exists()


def test_the_acceptance_plot_marks_unreached_positions(tmp_path):
    from serving.evaluate import plot_acceptance

    reports = {
        "gsm8k": {"acceptance_by_position": [0.6, 0.3, None, None], "tau": 1.7, "turns": 4},
        "mtbench": {"acceptance_by_position": [0.5, 0.2, 0.1, None], "tau": 1.5, "turns": 8},
    }
    drawn = plot_acceptance(reports, tmp_path / "a.png", "t")
    assert drawn["xticks"] == [1.0, 2.0, 3.0, 4.0]  # one integer tick per draft position
    assert drawn["unreached"] == {"gsm8k": [3, 4], "mtbench": [4]}
    assert "draft position" in drawn["xlabel"] and "acceptance rate" in drawn["ylabel"]
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"


def test_the_ablation_plot_names_each_job_by_its_varied_overrides(tmp_path):
    # its labels once joined every override's value (the plots were unreadable)
    from serving.ablation_report import plot

    shared = ["+recipe=smol_gpu", "train.steps=1875"]
    rows = [
        {"overrides": shared, "evals": {"gsm8k": {"tau": 2.24}}},
        {"overrides": [*shared, "draft.rope=partial", "draft.num_layers=2"], "evals": {}},
    ]
    labels = plot(rows, ["gsm8k"], tmp_path / "p.png", "t")
    assert labels == ["(defaults)", "draft.rope=partial\ndraft.num_layers=2"]
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_evaluate_over_processes_adds_up_to_one_process(dspark_ckpt, tmp_path, capsys):
    """--procs 2 splits the items between two decoding processes; their sums make the same report
    (tau, acceptance, tokens) as one process; --no-baseline skips target-only decoding."""
    common = ["--checkpoint", str(dspark_ckpt), "--bench", "gsm8k,mtbench", "--limit", "3"]
    common += ["--max-new-tokens", "8", "--no-plot", "--device", "cpu"]
    capsys.readouterr()
    assert evaluate_main(common + ["--out", str(tmp_path / "one")]) == 0
    tables = {"one": capsys.readouterr().out.splitlines()}
    assert (
        evaluate_main(common + ["--procs", "2", "--no-baseline", "--out", str(tmp_path / "two")])
        == 0
    )
    tables["two"] = capsys.readouterr().out.splitlines()
    # the printed table: a row per bench, speedup and identical outputs only where measured
    assert tables["one"][0].split() == ["bench", "items", "tau"] + [
        f"acc@{k}" for k in (1, 2, 3, 4)
    ] + ["speedup", "identical"]
    assert tables["two"][0].split()[-1] == "acc@4" and len(tables["two"]) == 4
    assert tables["two"][3].startswith("note: 2 processes decoded at once")
    for name, table in tables.items():
        for bench, row in zip(("gsm8k", "mtbench"), table[1:3], strict=True):
            rep = json.loads((tmp_path / name / f"{bench}.json").read_text())
            acc = ["-" if a is None else f"{a:.2f}" for a in rep["acceptance_by_position"]]
            cells = [bench, str(rep["items"]), f"{rep['tau']:.2f}", *acc]
            if name == "one":
                cells += [f"{rep['speedup']:.2f}x", rep["identical_to_target_only"]]
            assert row.split() == cells, (name, row)
    for bench in ("gsm8k", "mtbench"):
        one = json.loads((tmp_path / "one" / f"{bench}.json").read_text())
        two = json.loads((tmp_path / "two" / f"{bench}.json").read_text())
        for key in (
            "items", "turns", "tau", "acceptance_by_position", "reached_by_position", "per_item"
        ):  # fmt: skip
            assert one[key] == two[key], key
        # per item: every item once, its parts adding up to tau
        assert [i for i, _, _ in one["per_item"]] == list(range(3))
        emitted, steps = (sum(r[k] for r in one["per_item"]) for k in (1, 2))
        assert steps == one["speculative"]["steps"] and emitted / steps == one["tau"]
        assert one["speculative"]["tokens"] == two["speculative"]["tokens"]
        assert one["speculative"]["steps"] == two["speculative"]["steps"]
        assert two["target_only"] is None and two["speedup"] is None
        assert "identical_to_target_only" not in two and "timing_note" in two
        for r in (one, two):  # how long the benchmark's decoding took, and its rate
            assert r["elapsed_s"] > 0
            assert r["answers_per_s"] == pytest.approx(r["turns"] / r["elapsed_s"])
    assert one["turns"] == 6  # MT-Bench: both turns of 3 questions
    # sampling: item i is seeded with --seed + i in whichever process decodes it
    t1 = ["--checkpoint", str(dspark_ckpt), "--bench", "gsm8k", "--limit", "3", "--device", "cpu"]
    t1 += ["--max-new-tokens", "8", "--no-plot", "--no-baseline", "--temperature", "1"]
    assert evaluate_main(t1 + ["--out", str(tmp_path / "one_t1")]) == 0
    assert evaluate_main(t1 + ["--procs", "2", "--out", str(tmp_path / "two_t1")]) == 0
    one = json.loads((tmp_path / "one_t1" / "gsm8k.json").read_text())
    two = json.loads((tmp_path / "two_t1" / "gsm8k.json").read_text())
    for key in ("tau", "acceptance_by_position", "reached_by_position"):
        assert one[key] == two[key], key
    # a decoding process's error is named, and nothing is written
    bad = tmp_path / "bad"
    assert evaluate_main(common + ["--procs", "2", "--block-size", "99", "--out", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "error: decoding process" in err and "block" in err and not bad.exists()


def test_evaluate_in_batches_reports_batch_one_figures(dspark_ckpt, tmp_path):
    """--batch 2 decodes two items at once (turn by turn for MT-Bench) and reports the tau,
    acceptance, per-item sums and identity count of batch 1, greedy and sampled."""
    common = ["--checkpoint", str(dspark_ckpt), "--bench", "gsm8k,mtbench", "--limit", "3"]
    common += ["--max-new-tokens", "8", "--no-plot", "--device", "cpu", "--runtime", "static"]
    for t in ("0", "1"):
        reports = {}
        for batch in ("1", "2"):
            out = tmp_path / f"b{batch}-t{t}"
            assert (
                evaluate_main(common + ["--temperature", t, "--batch", batch, "--out", str(out)])
                == 0
            )
            reports[batch] = {
                b: json.loads((out / f"{b}.json").read_text()) for b in ("gsm8k", "mtbench")
            }
        for bench in ("gsm8k", "mtbench"):
            one, two = reports["1"][bench], reports["2"][bench]
            for key in (
                "turns",
                "tau",
                "acceptance_by_position",
                "reached_by_position",
                "per_item",
            ):
                assert one[key] == two[key], (t, bench, key)
            assert one["speculative"]["tokens"] == two["speculative"]["tokens"]
            assert two["batch"] == 2 and "throughput" in two["timing_note"]
            assert two["speculative"]["step_ms"] is None and one["speculative"]["step_ms"] > 0
            assert "timing_note" not in one and two["target_only"]["tokens"] > 0
            if t == "0":
                assert one["identical_to_target_only"] == two["identical_to_target_only"]


def test_evaluate_serves_an_exported_draft_with_the_target_named(dspark_ckpt, tmp_path, capsys):
    """An exported draft directory (serving.export) decodes as its checkpoint does once its
    target is named (the export names none); what needs the run (calibrate's held-out prompts,
    another export) is refused with the reason."""
    from serving.export import export
    from splitserve.checkpoint import read_draft

    exported = export(dspark_ckpt, tmp_path / "export", dtype="float32")
    flags = ["--bench", "gsm8k", "--limit", "1", "--max-new-tokens", "10", "--no-baseline"]
    flags += ["--no-plot"]
    assert evaluate_main(["--checkpoint", str(exported)] + flags) == 2
    assert "does not name its target: pass --target" in capsys.readouterr().err
    target = str(read_draft(dspark_ckpt).model_dir)
    assert (
        evaluate_main(["--checkpoint", str(dspark_ckpt), "--out", str(tmp_path / "a")] + flags) == 0
    )
    assert evaluate_main(["--checkpoint", str(exported), "--target", target] + flags) == 0
    a = json.loads((tmp_path / "a" / "gsm8k.json").read_text())
    b = json.loads((tmp_path / "export-eval" / "export-t0" / "gsm8k.json").read_text())  # default
    assert a["tau"] == b["tau"] and a["per_item"] == b["per_item"]
    assert b["checkpoint"] == str(exported.resolve())
    capsys.readouterr()
    argv = ["--checkpoint", str(exported), "--target", target, "--out", str(tmp_path / "s.json")]
    assert calibrate_main(argv) == 2
    err = capsys.readouterr().err
    assert "an exported draft keeps no run config" in err and "a jsonl_chat file of prompts" in err
    flags = ["--max-new-tokens", "8", "--test-fraction", "0", "--min-per-class", "1"]
    assert calibrate_main(argv + ["--prompts", "gsm8k", "--limit", "1"] + flags) == 0  # no run
    capsys.readouterr()
    # a file of prompts it was not trained on (scripts/held_out_prompts.py writes one): each
    # conversation's first user message
    prompts = tmp_path / "held.jsonl"
    convs = [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]]
    convs.append([{"role": "user", "content": "Name a prime."}])
    prompts.write_text("".join(json.dumps({"messages": c}) + "\n" for c in convs))
    report = tmp_path / "r.json"
    argv += ["--prompts", str(prompts), "--report", str(report)] + flags
    assert calibrate_main(argv) == 0
    assert "2 prompts: fitted on 2, tested on 0" in capsys.readouterr().out
    assert json.loads(report.read_text())["prompts"] == str(prompts)
    fitted = json.loads((tmp_path / "s.json").read_text())
    assert fitted["dataset"] == str(prompts)
    # --score: those temperatures scored on other prompts (GSM8K's first two), nothing fitted
    scored = tmp_path / "scored.json"
    score = ["--checkpoint", str(exported), "--target", target, "--score", str(tmp_path / "s.json")]
    score += [
        "--prompts",
        "gsm8k",
        "--limit",
        "2",
        "--max-new-tokens",
        "8",
        "--report",
        str(scored),
    ]
    assert calibrate_main(score) == 0
    out = capsys.readouterr().out
    assert "scored (2 prompts, " in out and "the temperatures of " in out
    rep = json.loads(scored.read_text())
    assert rep["temperatures"] == fitted["temperatures"] and rep["scored"]["num_samples"] > 0
    assert "fit" not in rep and rep["command"].endswith(f"--report {scored}")
    (tmp_path / "bad.json").write_text('{"temperatures": [1.0]}')
    assert calibrate_main(score[:5] + [str(tmp_path / "bad.json")] + score[6:]) == 2
    assert "expected 'temperatures', 4 numbers > 0" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text('{"temperatures": [1.0, 1.0,, 1.0, 1.0]}')  # not JSON
    assert calibrate_main(score[:5] + [str(tmp_path / "bad.json")] + score[6:]) == 2
    assert f"STS file {tmp_path / 'bad.json'}: not valid JSON (" in capsys.readouterr().err
    argv = ["--checkpoint", str(exported), "--target", target, "--prompt", "Hi", "--json"]
    assert generate_main(argv + ["--max-new-tokens", "4"]) == 0
    assert len(json.loads(capsys.readouterr().out.splitlines()[-1])["token_ids"]) <= 4
    with pytest.raises(ValueError, match="already an exported draft"):
        export(exported, tmp_path / "again")


def test_evaluate_serves_a_draft_folder_alone_with_the_target_named(eagle3_ckpt, tmp_path, capsys):
    """A checkpoint's draft/ folder copied on its own (what a device call brings back of an
    EAGLE-3 draft, which serving.export does not take) decodes as its checkpoint does once its
    target is named; its reports go beside it; export and calibrate's held-out prompts, which
    need the run, are refused with the reason."""
    import shutil

    from serving.export import export
    from splitserve.checkpoint import read_draft

    alone = tmp_path / "eagle3-draft"
    shutil.copytree(Path(eagle3_ckpt) / "draft", alone)
    flags = ["--bench", "gsm8k", "--limit", "2", "--max-new-tokens", "10", "--no-baseline"]
    flags += ["--no-plot"]
    assert evaluate_main(["--checkpoint", str(alone)] + flags) == 2
    assert "draft/ folder alone, which does not name its target: pass --target" in (
        capsys.readouterr().err
    )
    target = str(read_draft(eagle3_ckpt).model_dir)
    argv = ["--checkpoint", str(eagle3_ckpt), "--out", str(tmp_path / "a")]
    assert evaluate_main(argv + flags) == 0
    assert evaluate_main(["--checkpoint", str(alone), "--target", target] + flags) == 0
    a = json.loads((tmp_path / "a" / "gsm8k.json").read_text())
    b = json.loads((tmp_path / "eagle3-draft-eval" / "eagle3-draft-t0" / "gsm8k.json").read_text())
    assert a["tau"] == b["tau"] and a["per_item"] == b["per_item"]
    assert b["checkpoint"] == str(alone.resolve())
    # the same folder still inside its checkpoint stands for the checkpoint (its target named)
    inside = Path(eagle3_ckpt) / "draft"
    assert evaluate_main(["--checkpoint", str(inside), "--out", str(tmp_path / "c")] + flags) == 0
    c = json.loads((tmp_path / "c" / "gsm8k.json").read_text())
    assert c["checkpoint"] == str(Path(eagle3_ckpt).resolve()) and c["tau"] == a["tau"]
    capsys.readouterr()
    with pytest.raises(ValueError, match="draft/ folder alone, which names no target"):
        export(alone, tmp_path / "export")
    argv = ["--checkpoint", str(alone), "--target", target, "--out", str(tmp_path / "s.json")]
    assert calibrate_main(argv) == 2
    assert "draft/ folder alone keeps no run config" in capsys.readouterr().err


def test_a_prompts_file_without_prompts_is_named(tmp_path):
    from serving.calibrate import load_prompt_set

    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match=f"--prompts {empty} holds no conversation"):
        load_prompt_set(empty, tmp_path, None)
    system_only = tmp_path / "system.jsonl"
    system_only.write_text(json.dumps({"messages": [{"role": "system", "content": "Hi"}]}) + "\n")
    with pytest.raises(ValueError, match="conversation 1 has no user message"):
        load_prompt_set(system_only, tmp_path, None)


def test_evaluate_warns_that_a_random_weight_target_measures_nothing(tmp_path, capsys):
    """A draft trained against a random-weight mini (target.kind=ling3_mini, a test target):
    its tau and acceptance are printed with a warning that they mean nothing; a trained target
    gets none (the other evaluations here)."""
    ckpt = one_step_checkpoint(tmp_path / "run", "target=ling3_mini")
    argv = ["--checkpoint", str(ckpt), "--bench", "gsm8k", "--limit", "1"]
    argv += ["--max-new-tokens", "6", "--no-plot", "--no-baseline"]
    capsys.readouterr()
    assert evaluate_main(argv + ["--out", str(tmp_path / "a")]) == 0
    out, err = capsys.readouterr()
    warning = "warning: the target has random weights (target.kind=ling3_mini)"
    assert out.splitlines()[0].startswith("bench ") and out.splitlines()[-1].startswith(warning)
    assert warning in err  # also before the decoding starts
    assert evaluate_main(argv + ["--out", str(tmp_path / "b"), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["bench"] == "gsm8k" and warning in err  # stdout stays JSON


def test_a_run_can_end_calibrated_and_export_ships_its_sts(tmp_path, capsys):
    """train.calibrate_at_end: the finished run fits STS on its held-out prompts into the final
    checkpoint (serving.calibrate's own file, named in summary.json), a rerun keeps it, and
    serving.export ships it unasked, so the printed launch command serves it."""
    from serving.export import main as export_main

    args = ["train.calibrate_at_end=true"]
    args += ["train.calibrate_args=[--max-new-tokens,'16',--test-fraction,'0']"]
    summary = run(
        compose_cfg(TINY + ["train.steps=1", "train.checkpoint_every=1", *args]), tmp_path
    )
    ckpt = Path(summary["checkpoint"])
    assert summary["sts"] == str(ckpt / "sts.json")
    assert (
        len(read_temperatures(ckpt / "sts.json", 4)) == 4 and (ckpt / "sts_report.json").is_file()
    )
    mtime = (ckpt / "sts.json").stat().st_mtime
    assert run(compose_cfg(TINY + ["train.steps=1", *args]), tmp_path)["sts"] == summary["sts"]
    assert (ckpt / "sts.json").stat().st_mtime == mtime  # kept, not fitted again
    capsys.readouterr()
    assert export_main(["--checkpoint", str(tmp_path), "--out", str(tmp_path / "export")]) == 0
    out = capsys.readouterr().out
    assert f"shipping {ckpt / 'sts.json'}" in out
    assert (tmp_path / "export" / "sts.json").read_bytes() == (ckpt / "sts.json").read_bytes()
    assert "--speculative-dspark-confidence-sts-path" in out
