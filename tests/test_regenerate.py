"""splitserve.regenerate: the target's answers written once, as an online run would make them,
then trained on by a run that does not regenerate (the real SmolLM2 target on CPU)."""

import hashlib
import json
from types import SimpleNamespace

import pytest
import torch
from test_training import SMOL_GPU_SHRUNK, SMOL_GPU_STEPS, compose_cfg

from splitserve.regenerate import answer_row, compose_run_config, main, target_and_stream
from splitserve.train import run

pytestmark = pytest.mark.slow  # spawns processes or decodes with the real SmolLM2

# the rendered prompts of samples 0..5 are 57, 95, 101, 94, 137, 61 tokens long: 2 and 4 are
# longer than max_prompt_tokens here
SHRUNK = SMOL_GPU_SHRUNK + ["data.max_prompt_tokens=100", "data.max_length=160"]


def test_regenerated_shards_hold_the_online_samples_and_train_a_draft(tmp_path, capsys):
    parts = [tmp_path / f"part{k}.jsonl" for k in (0, 1)]
    summaries = []
    for k, out in enumerate(parts):
        argv = ["--out", str(out), "--samples", "6", "--shard", f"{k}/2", "--device", "cpu"]
        assert main(argv + SHRUNK) == 0
        assert not out.with_name(out.name + ".partial").exists()
        summaries.append(json.loads(capsys.readouterr().out.splitlines()[-1]))
    rows = [[json.loads(x) for x in p.read_text().splitlines()] for p in parts]
    # in sample-id order; prompts longer than data.max_prompt_tokens are left out and counted
    assert [r["g"] for r in rows[0]] == [0] and [r["g"] for r in rows[1]] == [1, 3, 5]
    assert summaries[0]["skipped_long_prompt"] == 2 and summaries[0]["written"] == 1
    assert summaries[1]["samples"] == 3 and summaries[1]["shard"] == "1/2"

    # each file's provenance record: --check passes them under the same overrides and names
    # every difference under others (nothing loaded but the tokenizer)
    records = [json.loads(p.with_name(p.name + ".provenance.json").read_text()) for p in parts]
    assert records[0]["made_with"] == records[1]["made_with"]
    assert records[1]["summary"] == summaries[1]
    made = records[0]["made_with"]
    assert records[0]["file_sha256"] == hashlib.sha256(parts[0].read_bytes()).hexdigest()
    assert made["target.max_new_tokens"] == 6 and made["data.max_prompt_tokens"] == 100
    assert made["target.dir"].startswith("smollm2") and made["target.dtype"] == "float32"
    check = ["--check", *map(str, parts), "--device", "cpu", "--"]
    assert main(check + SHRUNK) == 0
    assert json.loads(capsys.readouterr().out)["checked"] == [str(p) for p in parts]
    assert main(check + SHRUNK + ["target.max_new_tokens=5", "train.seed=3"]) == 2
    err = capsys.readouterr().err
    assert f"{parts[0]} was regenerated with other settings" in err
    assert "target.max_new_tokens=6 there, 5 here; train.seed=0 there, 3 here" in err
    assert main(check + SHRUNK + ["data.shuffle_seed=5"]) == 2  # another prompt order
    assert f"--check {parts[0]}:1: sample g=0 has another prompt" in capsys.readouterr().err
    # a copy cut short (its last line lost) no longer matches the SHA-256 in its record
    cut = tmp_path / "cut" / parts[1].name
    cut.parent.mkdir()
    cut.write_text("".join(parts[1].read_text().splitlines(keepends=True)[:-1]))
    side = parts[1].name + ".provenance.json"
    (cut.parent / side).write_text((tmp_path / side).read_text())
    assert main(["--check", str(cut), "--device", "cpu", "--"] + SHRUNK) == 2
    err = capsys.readouterr().err
    assert f"{cut} is not the file its record was written with (SHA-256 differs" in err
    assert f"move {cut.name} and {side} away first" in err
    # a record says which samples its file was written for: a line from elsewhere is refused
    # (shard 1/2 of 0..5: samples 1, 3, 5), though its prompt is this stream's
    moved = tmp_path / "moved" / parts[1].name
    moved.parent.mkdir()
    moved.write_text(parts[0].read_text() + parts[1].read_text())
    record = records[1] | {"file_sha256": hashlib.sha256(moved.read_bytes()).hexdigest()}
    (moved.parent / side).write_text(json.dumps(record))
    assert main(["--check", str(moved), "--device", "cpu", "--"] + SHRUNK) == 2
    err = capsys.readouterr().err
    assert f"--check {moved}:1: sample g=0 is not in 1..5 step 2 (its record's ids)" in err
    # overrides without `--` are read as files: named, with the way to write them
    assert main(["--check", str(parts[0]), "+recipe=smol"]) == 2
    assert "no such file: +recipe=smol (Hydra overrides go after --" in capsys.readouterr().err

    # line g is what an online run's target makes as sample g (prompt, setting, seed)
    backend, stream = target_and_stream(compose_run_config(SHRUNK), torch.device("cpu"))
    by_g = {r["g"]: r for part in rows for r in part}
    for g in (3, 1, 5):  # settings 0, 1, 2: greedy, temperature 1 and 0.7 (sampled, seeded)
        sample = backend.produce(g, stream[g])
        answer = sample.input_ids[sample.loss_mask.bool()]
        row = by_g[g]
        assert row["new_tokens"] == answer.numel() <= 6
        assert row["messages"][-1] == {
            "role": "assistant",
            "content": backend.tokenizer.decode(answer, skip_special_tokens=True),
        }
        assert row["messages"][:-1] == [m for m in stream[g] if m["role"] != "assistant"][:1]

    # --start S writes samples S..N-1 only, the same lines as a file of 0..N-1 holds (a budget
    # extended without regenerating what exists); --extends checks that file came from this
    # stream
    tail, head = tmp_path / "tail.jsonl", tmp_path / "head.jsonl"
    head.write_text("".join(json.dumps(by_g[g]) + "\n" for g in (0, 1)))  # 2: long prompt
    ext = ["--samples", "6", "--start", "3", "--extends", str(head), "--device", "cpu"]
    assert main(["--out", str(tail)] + ext + SHRUNK) == 0
    first = capsys.readouterr()
    summary = json.loads(first.out.splitlines()[-1])
    assert summary["start"] == 3 and summary["skipped_long_prompt"] == 1  # sample 4
    assert [json.loads(x) for x in tail.read_text().splitlines()] == [by_g[3], by_g[5]]
    # under another prompt order (another seed here; another data.hold_out alike) the head's
    # prompts are not the stream's: refused, nothing written
    other = ["data.shuffle_seed=5"]
    assert main(["--out", str(tmp_path / "t2.jsonl")] + ext + SHRUNK + other) == 2
    err = capsys.readouterr().err
    assert f"--extends {head}:1: sample g=0 has another prompt than this stream's" in err
    assert not (tmp_path / "t2.jsonl").exists()
    # a file without a record (an older one) is checked by its prompts alone; one whose record
    # differs is refused, nothing written
    assert "has no head.jsonl.provenance.json; only its prompts are checked" in first.err
    record = dict(made, **{"target.sampling": [{"temperature": 0.5, "top_p": 1.0}]})
    head.with_name("head.jsonl.provenance.json").write_text(json.dumps({"made_with": record}))
    assert main(["--out", str(tmp_path / "t5.jsonl")] + ext + SHRUNK) == 2
    assert "head.jsonl was regenerated with other settings (target.sampling=" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "t5.jsonl").exists()
    head.with_name("head.jsonl.provenance.json").unlink()
    ext[3] = "1"  # ids of the file at or past --start
    assert main(["--out", str(tmp_path / "t3.jsonl")] + ext + SHRUNK) == 2
    assert f"--extends {head}:2: sample g=1 is not in 0..0 (--start)" in capsys.readouterr().err
    ext[3] = "3"
    for text, why in (("", "holds no sample"), ('{"messages": []}\n', ":1: not a regenerated")):
        head.write_text(text)
        assert main(["--out", str(tmp_path / "t4.jsonl")] + ext + SHRUNK) == 2
        assert why in capsys.readouterr().err and not (tmp_path / "t4.jsonl").exists()
    empty = tmp_path / "empty.jsonl"  # a shard with no id past --start writes an empty file
    argv = ["--out", str(empty), "--samples", "6", "--start", "5", "--shard", "0/2"]
    assert main(argv + ["--device", "cpu"] + SHRUNK) == 0
    assert empty.read_text() == "" and '"written": 0' in capsys.readouterr().out
    assert main(["--out", str(tmp_path / "y.jsonl"), "--samples", "6", "--start", "6"]) == 2
    assert "--start must be in 0..5" in capsys.readouterr().err

    # an answer that is empty as text (the target ended at once) is left out of the file
    eos = backend.tokenizer.eos_token_id
    prompt = backend.prompt(stream[0])
    for answer, kept in (([eos], False), (backend.tokenizer.encode("Yes.") + [eos], True)):
        ids, mask = backend.with_mask(prompt, answer)
        row = answer_row(backend, 0, stream[0], SimpleNamespace(input_ids=ids, loss_mask=mask))
        assert (row is not None) == kept
    assert row["messages"][-1]["content"] == "Yes." and row["ended"]

    # a bad override is named, before any target is loaded
    assert main(["--out", str(tmp_path / "x.jsonl"), "--samples", "1", "train.nope=1"]) == 2
    assert "Could not override 'train.nope'" in capsys.readouterr().err

    # an existing file is never overwritten
    before = parts[0].read_text()
    assert main(["--out", str(parts[0]), "--samples", "5", "--device", "cpu"] + SHRUNK) == 2
    assert "exists" in capsys.readouterr().err and parts[0].read_text() == before

    both = tmp_path / "regenerated.jsonl"
    both.write_text(before + parts[1].read_text())
    summary = run(
        compose_cfg(
            SHRUNK
            + SMOL_GPU_STEPS
            + [
                "target.regenerate=false",
                f"data.sources=[{{kind:jsonl_chat,path:{both},limit:null,weight:1}}]",
            ]
        ),
        tmp_path / "run",
    )
    assert summary["steps"] == 2


def test_a_users_target_directory_is_named_by_its_files_not_its_path(tmp_path):
    """kind=path: the provenance of a directory holds no path or folder name (they differ
    between machines); the same files give the record the embedded target gives but for that."""
    import shutil

    from splitserve.regenerate import provenance
    from splitserve.target.models import check_tokenizer, load_target_spec, prepare_target_dir

    cpu = torch.device("cpu")
    embedded = compose_run_config(SHRUNK)
    src = prepare_target_dir(embedded.target)
    copy = shutil.copytree(
        src, tmp_path / "any-name", ignore=shutil.ignore_patterns("*.safetensors")
    )
    user = compose_run_config(SHRUNK + ["target.kind=path", f"target.path={copy}"])
    user.target.backend = embedded.target.backend = "hf"
    tok = check_tokenizer(src, load_target_spec(src))
    a, b = provenance(embedded, src, tok, cpu), provenance(user, copy, tok, cpu)
    assert a.pop("target.dir") == src.name and "target.dir" not in b
    assert a.pop("target.kind") == "smollm2" and b.pop("target.kind") == "path"
    assert a == b and b["target.generation_config_sha256"] and b["target.tokenizer_sha256"]
