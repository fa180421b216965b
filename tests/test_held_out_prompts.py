"""scripts/held_out_prompts.py: a run's held-out prompts as a jsonl_chat file, less any found in
the files a draft trained on (for serving.calibrate --prompts FILE on an exported draft)."""

import json
import sys
from pathlib import Path

import pytest
from conftest import run_script
from test_data import _chat_rows

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from held_out_prompts import main  # noqa: E402  (scripts/)

pytestmark = pytest.mark.slow  # spawns processes or decodes with the real SmolLM2


def test_writes_the_held_out_prompts_less_those_trained_on(tmp_path, capsys):
    pairs = [("p0", "a"), ("p1", "a"), ("p2", "a"), ("p3", "a"), ("p4", "a")]
    source = _chat_rows(tmp_path / "source.jsonl", pairs)
    # a draft trained on a file that repeats p3 (a source's repeated text, in the old split)
    trained = _chat_rows(tmp_path / "trained.jsonl", [("p0", "x"), ("p3", "y")])
    overrides = [f"data.sources=[{{kind:jsonl_chat,path:{source}}}]", "data.eval_prompts=3"]
    out = tmp_path / "held.jsonl"
    proc = run_script(
        "held_out_prompts.py", "--out", str(out), "--exclude", str(trained), *overrides
    )
    assert "wrote 2 held-out prompts" in proc.stdout and "(1 left out" in proc.stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows == [{"messages": [{"role": "user", "content": p}]} for p in ("p2", "p4")]
    # nothing already written is lost; a missing training file is named
    assert main(["--out", str(out), *overrides]) == 2
    assert "exists; it is never overwritten" in capsys.readouterr().err
    assert rows == [json.loads(line) for line in out.read_text().splitlines()]
    other = tmp_path / "other.jsonl"
    assert main(["--out", str(other), "--exclude", str(tmp_path / "nope.jsonl"), *overrides]) == 2
    assert "--exclude" in capsys.readouterr().err and not other.exists()
    assert main(["--out", str(other), "data.nope=1"]) == 2  # a bad override, named
    assert "data.nope" in capsys.readouterr().err and not other.exists()
    assert main(["--out", str(other), "--limit", "1", *overrides]) == 0  # no --exclude: all 3
    assert [json.loads(x)["messages"][0]["content"] for x in other.read_text().splitlines()] == [
        "p2"
    ]
