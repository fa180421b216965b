"""The launcher's port choice: a run's two stores (the data plane's and the trainer world's)
get distinct free ports. One free port at a time could hand out the same port twice (seen in
CI: the trainer world's store failed with EADDRINUSE). And serving.launch's SGLang command: run
by SGLang's own interpreter, for a target and draft that exist."""

import json
import socket
import subprocess
import sys
from pathlib import Path

from serving.launch import main as launch_main
from splitserve.launch import free_ports

ROOT = Path(__file__).resolve().parents[1]


def test_free_ports_are_distinct_and_free():
    for _ in range(50):
        ports = free_ports(2)
        assert len(set(ports)) == 2
    ports = free_ports(8)
    assert len(set(ports)) == 8
    socks = [socket.socket() for _ in ports]
    try:
        for s, port in zip(socks, ports, strict=True):
            s.bind(("127.0.0.1", port))  # still free once returned
    finally:
        for s in socks:
            s.close()


# ----- serving.launch: the SGLang command for an exported draft -----


def exported_draft(directory: Path, sps: bool = False) -> Path:
    """What serving.export writes, as far as the launcher reads it: config.json naming the DSpark
    class and its block size, and a weights file (real safetensors)."""
    import torch
    from safetensors.torch import save_file

    directory.mkdir(parents=True)
    config = {"architectures": ["Qwen3DSparkModel"], "block_size": 4}
    (directory / "config.json").write_text(json.dumps(config))
    save_file({"fc.weight": torch.zeros(2, 2)}, str(directory / "model.safetensors"))
    if sps:
        table = {"sample_batch_tokens": [1], "sample_steps_per_sec": [9.0], "max_batch_tokens": 1}
        (directory / "sps.json").write_text(json.dumps(table))
    return directory


def test_the_command_runs_sglangs_python_not_this_projects(tmp_path, capsys):
    """SGLang lives in an environment of its own: the printed command starts with `python`
    (or --python's interpreter), never this project's venv."""
    draft, target = exported_draft(tmp_path / "draft", sps=True), tmp_path / "target"
    target.mkdir()
    flags = ["--target", str(target), "--draft", str(draft)]
    assert launch_main(flags) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("SGLANG_RAGGED_VERIFY_MODE=compact python -m sglang.launch_server ")
    assert sys.executable not in line and f"--model-path {target}" in line
    interpreter = tmp_path / "sglang-env" / "bin" / "python"
    interpreter.parent.mkdir(parents=True)
    interpreter.write_text("#!/bin/sh\n")
    interpreter.chmod(0o755)
    assert launch_main(flags + ["--python", str(interpreter)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"SGLANG_RAGGED_VERIFY_MODE=compact {interpreter} -m sglang.launch_")
    assert launch_main(flags + ["--python", str(tmp_path / "nope" / "python")]) == 2
    err = capsys.readouterr().err
    assert f"error: --python {tmp_path / 'nope' / 'python'} is not an executable" in err


def test_exec_runs_the_named_interpreter_with_the_environment(tmp_path):
    """--exec replaces the launcher with --python's interpreter (here a script standing in for
    SGLang's python, recording what it was given)."""
    draft, target = exported_draft(tmp_path / "draft", sps=True), tmp_path / "target"
    target.mkdir()
    record = tmp_path / "ran.txt"
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\necho "$SGLANG_RAGGED_VERIFY_MODE $@" > {record}\n')
    fake.chmod(0o755)
    argv = ["--target", str(target), "--draft", str(draft), "--python", str(fake), "--exec"]
    out = subprocess.run(
        [sys.executable, "-m", "serving.launch", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    ran = record.read_text()
    assert ran.startswith("compact -m sglang.launch_server --model-path ") and str(draft) in ran


def test_a_target_or_draft_that_is_not_there_is_named(tmp_path, capsys):
    draft = exported_draft(tmp_path / "draft")
    missing = tmp_path / "no-such-model"
    assert launch_main(["--target", str(missing), "--draft", str(draft)]) == 2
    err = capsys.readouterr().err
    assert f"error: --target {missing} does not exist" in err and "Traceback" not in err
    speculators = {"architectures": ["DSparkSpeculator"], "speculators_model_type": "dspark"}
    (draft / "config.json").write_text(json.dumps(speculators))
    assert launch_main(["--target", str(tmp_path), "--draft", str(draft)]) == 2
    err = capsys.readouterr().err
    assert "vLLM speculators' layout" in err and "(sglang, the default)" in err
    (draft / "config.json").write_text('{"architectures": ["Qwen3DSparkModel"],\n "block_size" 4}')
    assert launch_main(["--target", str(tmp_path), "--draft", str(draft)]) == 2
    err = capsys.readouterr().err
    assert f"exported draft config {draft / 'config.json'}: not valid JSON" in err
    assert "line 2 column" in err
