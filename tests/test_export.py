"""Export to SGLang's DSpark format: config fields, weight names, bit-exact reload, refusals."""

import json
import shutil

import pytest
import torch
from conftest import llama_config
from safetensors.torch import load_file
from test_training import TINY, compose_cfg

from serving.export import export, load_exported, main
from splitserve.checkpoint import read_draft
from splitserve.target.config import TargetConfig
from splitserve.target.models import load_frozen_head, prepare_target_dir
from splitserve.train import run

# The names SGLang 0.5.23's DFlash/DSpark loaders accept (models/dflash.py, models/dspark.py),
# with the per-layer parts SGLang stacks (q/k/v -> qkv_proj, gate/up -> gate_up_proj).
LAYER_PARTS = {
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "self_attn.q_norm",
    "self_attn.k_norm",
    "input_layernorm",
    "post_attention_layernorm",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
}
TOP = {
    "fc.weight",
    "hidden_norm.weight",
    "norm.weight",
    "markov_head.markov_w1.weight",
    "markov_head.markov_w2.weight",
    "markov_head.joint_proj.weight",
    "markov_head.joint_proj.bias",
    "markov_head.gate_proj.weight",
    "markov_head.gate_proj.bias",
    "confidence_head.proj.weight",
    "confidence_head.proj.bias",
}


def sglang_maps(name: str) -> bool:
    if name in TOP:
        return True
    parts = name.split(".")
    return (
        parts[0] == "layers"
        and parts[1].isdigit()
        and ".".join(parts[2:-1]) in LAYER_PARTS
        and parts[-1] == "weight"
    )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    summary = run(
        compose_cfg(
            TINY + ["train.steps=1", "train.checkpoint_every=1", "draft.sequential_head=rnn"]
        ),
        run_dir,
    )
    return summary["checkpoint"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.slow
def test_export_writes_the_sglang_contract_and_reloads_bit_exactly(checkpoint, tmp_path, dtype):
    out = export(checkpoint, tmp_path / "draft", dtype=dtype)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Qwen3DSparkModel"]  # a Llama-family target
    assert config["markov_head_type"] == "rnn" and config["markov_rank"] == 16
    assert (
        config["block_size"] == 4
        and config["num_target_layers"] == 30
        and config["sample_from_anchor"]
    )
    assert config["target_layer_ids"] == [15] and config["mask_token_id"] == 16
    assert config["is_neox_style"] is True and "partial_rotary_factor" not in config
    assert config["rope_parameters"] == {"rope_type": "default", "rope_theta": 100000.0}
    assert config["torch_dtype"] == dtype
    weights = load_file(str(out / "model.safetensors"))
    assert {str(t.dtype) for t in weights.values()} == {f"torch.{dtype}"}
    assert all(sglang_maps(n) for n in weights), [n for n in weights if not sglang_maps(n)]
    assert not any("embed" in n or "lm_head" in n for n in weights)
    head = load_frozen_head(prepare_target_dir(TargetConfig()), "cpu", torch.float32)
    reloaded = load_exported(out, head)
    original = read_draft(checkpoint).weights
    for name, tensor in reloaded.state_dict().items():  # exactly the trained weights, in dtype
        assert torch.equal(tensor, original[name].to(getattr(torch, dtype)).float()), name


def edited_checkpoint(src, dst, **fields):
    """A copy of checkpoint `src` whose draft config has `fields` changed, sealed again (as if
    trained that way), so it passes validation and reaches export's own checks."""
    from splitserve.checkpoint import seal

    staging = dst.with_name(dst.name + ".staging")
    shutil.copytree(src, staging)
    (staging / "COMPLETE").unlink()
    cfg = json.loads((staging / "draft" / "draft_config.json").read_text())
    cfg.update(fields)
    (staging / "draft" / "draft_config.json").write_text(json.dumps(cfg))
    seal(staging, dst)
    return dst


def test_drafts_sglang_cannot_serve_are_refused(checkpoint, tmp_path):
    for field, value, reason in [
        ("attention", "ling3_mla", "MLA drafts have no serving class"),
        ("arch", "dflash", "DSpark drafts only"),
        ("rope", "none", "always applies rotary"),
    ]:
        copy = edited_checkpoint(checkpoint, tmp_path / f"ckpt-{field}", **{field: value})
        with pytest.raises(ValueError, match=reason):
            export(copy, tmp_path / "out")
        assert not (tmp_path / "out").exists()


def test_bad_export_inputs_are_named(checkpoint, tmp_path, capsys):
    assert main(["--checkpoint", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "not a complete SplitServe checkpoint" in capsys.readouterr().err
    bad_sts = tmp_path / "sts.json"
    bad_sts.write_text(json.dumps({"temperatures": [1.0, 1.0]}))
    with pytest.raises(ValueError, match="expected 'temperatures', 4 numbers > 0"):
        export(checkpoint, tmp_path / "o", sts=bad_sts)
    bad_sps = tmp_path / "sps.json"
    bad_sps.write_text("{}")
    with pytest.raises(ValueError, match="sps.json: expected exactly the keys"):
        export(checkpoint, tmp_path / "o", sps=bad_sps)
    good_sts = tmp_path / "good_sts.json"
    good_sts.write_text(json.dumps({"temperatures": [1.5, 1.2, 1.1, 1.0]}))
    out = export(checkpoint, tmp_path / "o", sts=good_sts)
    assert json.loads((out / "sts.json").read_text())["temperatures"] == [1.5, 1.2, 1.1, 1.0]


def test_launch_command_for_an_exported_draft(checkpoint, tmp_path, capsys):
    from serving.launch import main as launch_main

    sts = tmp_path / "sts.json"
    sts.write_text(json.dumps({"temperatures": [1.0] * 4}))
    sps = tmp_path / "sps.json"
    sps.write_text(
        json.dumps(
            {
                "sample_batch_tokens": [1, 8],
                "sample_steps_per_sec": [100.0, 80.0],
                "max_batch_tokens": 8,
            }
        )
    )
    out = export(checkpoint, tmp_path / "d", sps=sps, sts=sts)
    target = tmp_path / "models" / "t"
    target.mkdir(parents=True)
    assert launch_main(["--target", str(target), "--draft", str(out), "--tp-size", "4"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("SGLANG_RAGGED_VERIFY_MODE=compact python -m sglang.launch_server ")
    for flag in (
        "-m sglang.launch_server",
        f"--model-path {target}",
        "--speculative-algorithm DSPARK",
        f"--speculative-draft-model-path {out}",
        "--speculative-dspark-block-size 4",
        "--tp-size 4",
        f"--speculative-dspark-sps-table-path {out}/sps.json",
        f"--speculative-dspark-confidence-sts-path {out}/sts.json",
    ):
        assert flag in line
    assert launch_main(["--target", str(target), "--draft", str(tmp_path)]) == 2
    assert "is missing" in capsys.readouterr().err


def test_export_cli_lists_its_files_and_the_command_that_serves_them(
    checkpoint, tmp_path, capsys, monkeypatch
):
    from serving.launch import build_command, shell_line

    out = tmp_path / "d"
    assert main(["--checkpoint", str(checkpoint), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "files written:" and lines[-1] == f"wrote {out}"
    listed = {line.split()[0]: line.split()[1:] for line in lines[1:3]}
    assert set(listed) == {"config.json", "model.safetensors"}
    kib = (out / "config.json").stat().st_size / 2**10  # over 1 KiB: 25-odd fields
    assert listed["config.json"] == [f"{kib:.1f}", "KiB"]
    mib = (out / "model.safetensors").stat().st_size / 2**20
    assert listed["model.safetensors"] == [f"{mib:.1f}", "MiB"]
    # readable by whoever serves it (safetensors alone writes 0600)
    assert (out / "model.safetensors").stat().st_mode & 0o777 == 0o644
    # launch's own command, for the target the draft was trained against, run by SGLang's python
    model_dir = read_draft(checkpoint).model_dir
    assert lines[-2].strip() == shell_line(*build_command(str(model_dir), out))
    assert lines[-2].strip().startswith("python -m sglang.launch_server --model-path ")
    # a relative --out: the command names the draft by its absolute path (it runs elsewhere)
    monkeypatch.chdir(tmp_path)
    assert main(["--checkpoint", str(checkpoint), "--out", "rel"]) == 0
    assert f"--speculative-draft-model-path {tmp_path / 'rel'} " in capsys.readouterr().out


def corrupted(src, dst, name: str, text: str):
    """A copy of checkpoint `src` whose file `name` holds `text`, sealed again (its sizes
    recorded), so only the reading of that file can fail."""
    from splitserve.checkpoint import seal

    staging = dst.with_name(dst.name + ".staging")
    shutil.copytree(src, staging)
    (staging / "COMPLETE").unlink()
    (staging / name).write_text(text)
    seal(staging, dst)
    return dst


def test_a_file_that_is_not_json_is_named_by_every_cli(checkpoint, tmp_path, capsys):
    """Invalid JSON in a checkpoint's files: export, generate and evaluate (and a draft/ folder
    alone) exit 2 naming the file and the place, not with a bare JSON parser message."""
    from serving.evaluate import main as evaluate_main
    from serving.generate import main as generate_main

    bad = '{"arch": "dspark",\n "block_size" 4}'
    ckpt = corrupted(checkpoint, tmp_path / "step-00000001", "draft/draft_config.json", bad)
    named = f"draft config {ckpt / 'draft' / 'draft_config.json'}: not valid JSON ("
    place = "Expecting ':' delimiter, line 2 column 15)"
    runs = {
        "export": lambda c: main(["--checkpoint", str(c), "--out", str(tmp_path / "o")]),
        "generate": lambda c, *t: generate_main(["--checkpoint", str(c), "--prompt", "hi", *t]),
        "evaluate": lambda c, *t: evaluate_main(
            ["--checkpoint", str(c), "--bench", "gsm8k", "--limit", "1", "--out", str(tmp_path)]
            + list(t)
        ),
    }
    for name, cli in runs.items():
        assert cli(ckpt) == 2, name
        err = capsys.readouterr().err
        assert named in err and place in err and err.count("\n") == 1, (name, err)
    alone = tmp_path / "draft"
    shutil.copytree(ckpt / "draft", alone)
    target = str(read_draft(checkpoint).model_dir)
    assert runs["generate"](alone, "--target", target) == 2
    assert f"draft config {alone / 'draft_config.json'}: not valid JSON" in capsys.readouterr().err
    ckpt = corrupted(checkpoint, tmp_path / "step-00000002", "meta.json", '{"step": 1,}')
    assert runs["export"](ckpt) == 2 and runs["generate"](ckpt) == 2
    err = capsys.readouterr().err
    assert err.count(f"checkpoint meta {ckpt / 'meta.json'}: not valid JSON") == 2, err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_generate_cli_is_lossless_and_checks_its_target(checkpoint, tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from serving.generate import main as generate_main

    assert (
        generate_main(
            [
                "--checkpoint",
                checkpoint,
                "--prompt",
                "What is 7 times 8?",
                "--max-new-tokens",
                "24",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["steps"] == len(out["accept_lengths"]) and sum(out["accept_lengths"]) + 1 >= len(
        out["token_ids"]
    )
    model_dir = prepare_target_dir(TargetConfig())
    tok = AutoTokenizer.from_pretrained(model_dir)
    target = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is 7 times 8?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    ref = target.generate(
        prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=24, do_sample=False
    )
    assert out["token_ids"] == ref[0, prompt.shape[1] :].tolist()

    other = tmp_path / "other"
    AutoModelForCausalLM.from_config(
        llama_config(num_hidden_layers=2, num_key_value_heads=4, vocab_size=49152)
    ).save_pretrained(other)
    tok.save_pretrained(other)
    assert (
        generate_main(["--checkpoint", checkpoint, "--prompt", "hi", "--target", str(other)]) == 2
    )
    assert "trained for a different target" in capsys.readouterr().err
    assert generate_main(["--checkpoint", checkpoint, "--prompt", "hi", "--block-size", "9"]) == 2
    assert "larger than the draft was trained for" in capsys.readouterr().err


def test_generate_refuses_a_malformed_sts_file(checkpoint, tmp_path, capsys):
    from serving.generate import main as generate_main

    sts = tmp_path / "sts.json"
    sts.write_text("[1.0, 1.0]")
    assert generate_main(["--checkpoint", checkpoint, "--prompt", "hi", "--sts", str(sts)]) == 2
    assert f"STS file {sts}: expected 'temperatures', 4 numbers > 0" in capsys.readouterr().err
    sts.write_text('{"temperatures": [1.0, 1.0,]}')  # not JSON at all: the file still named
    assert generate_main(["--checkpoint", checkpoint, "--prompt", "hi", "--sts", str(sts)]) == 2
    assert f"STS file {sts}: not valid JSON (" in capsys.readouterr().err


def variant_checkpoint(base, dst, **fields):
    """A checkpoint as the trainer writes it for the draft of `base` with `fields` changed (fresh
    weights of that shape: export and serving only need the layout and the shapes)."""
    import dataclasses

    from draft_models import build_draft
    from splitserve.checkpoint import seal, write_draft_files

    old = read_draft(base)
    cfg = dataclasses.replace(old.cfg, **fields)
    head = load_frozen_head(old.model_dir, "cpu", torch.float32)
    torch.manual_seed(0)
    draft = build_draft(cfg, old.target, head)
    staging = dst.with_name(dst.name + ".staging")
    write_draft_files(
        staging,
        state_dict=draft.state_dict(),
        draft_cfg=draft.cfg,
        target=old.target,
        model_dir=str(old.model_dir),
        config_yaml=(old.path / "config.yaml").read_text(),
        step=old.step,
    )
    seal(staging, dst)
    return dst


def sglang_json(res):
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("head", ["markov", "gated", "rnn"])
@pytest.mark.slow
def test_sglang_0_5_23_parses_the_exported_config(checkpoint, tmp_path, sglang_site, head):
    """SGLang's own parse_dspark_draft_config / resolve_runtime_config read what we export, for
    every sequential head type."""
    from conftest import run_sglang

    ckpt = variant_checkpoint(checkpoint, tmp_path / "ckpt", sequential_head=head)
    out = export(ckpt, tmp_path / "draft")
    got = sglang_json(run_sglang(sglang_site, "parse", out / "config.json", 49152))
    assert got["parsed"] == {
        "num_hidden_layers": 1,
        "num_target_layers": 30,
        "gamma": 4,
        "target_layer_ids": [15],
        "mask_token": got["parsed"]["mask_token"],
        "mask_token_id": 16,
        "markov_rank": 16,
        "markov_head_type": {"markov": "vanilla", "gated": "gated", "rnn": "rnn"}[head],
    }
    assert got["runtime"] == {"gamma": 4, "verify_num_draft_tokens": 5, "mask_token_id": 16}
    assert got["sample_from_anchor"] is True
    bad = json.loads((out / "config.json").read_text())
    bad["markov_head_type"] = "bogus"  # the parser must be the real one: it rejects this
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    res = run_sglang(sglang_site, "parse", tmp_path / "bad.json", 49152)
    assert res.returncode != 0 and "Unsupported DSpark markov_head_type='bogus'" in res.stderr


@pytest.mark.parametrize("head", ["markov", "gated", "rnn"])
def test_exported_weight_modules_exist_in_sglang_draft_classes(
    checkpoint, tmp_path, sglang_site, head
):
    """Every exported weight's owning module is an attribute SGLang 0.5.23's DSpark/DFlash draft
    classes create (read from the installed source); the stacked q/k/v and gate/up parts are
    those its loader folds into qkv_proj / gate_up_proj."""
    source = "".join(
        (sglang_site / "sglang" / "srt" / "models" / f).read_text()
        for f in ("dspark.py", "dflash.py")
    )
    ckpt = variant_checkpoint(checkpoint, tmp_path / "ckpt", sequential_head=head)
    weights = load_file(str(export(ckpt, tmp_path / "draft") / "model.safetensors"))
    assert all(sglang_maps(n) for n in weights), [n for n in weights if not sglang_maps(n)]
    assert ("markov_head.gate_proj.weight" in weights) == (head == "gated")
    for name in weights:
        parts = name.split(".")
        attr = parts[-2] if parts[0] in ("markov_head", "confidence_head") else parts[0]
        if parts[0] == "layers":
            attr = {
                "q_proj": "qkv_proj",
                "k_proj": "qkv_proj",
                "v_proj": "qkv_proj",
                "gate_proj": "gate_up_proj",
                "up_proj": "gate_up_proj",
            }.get(parts[-2], parts[-2])
        assert f"self.{attr} =" in source, name


@pytest.mark.parametrize("rope,rotary_dim", [("full", 64), ("partial", 32), ("interleaved", 64)])
@pytest.mark.slow
def test_every_rope_variant_is_served_as_trained(
    checkpoint, tmp_path, sglang_site, rope, rotary_dim
):
    """The exported config goes through transformers' AutoConfig and the attributes SGLang's
    draft attention reads into SGLang's own get_rope; its rotation of q/k equals our trained
    Rotary's. (A top-level partial_rotary_factor, which transformers 5.x moves into
    rope_parameters, would come back as full RoPE over 64 dims here.)"""
    from conftest import run_sglang

    from draft_models.rope import Rotary

    ckpt = variant_checkpoint(checkpoint, tmp_path / "ckpt", rope=rope)
    out = export(ckpt, tmp_path / "draft")
    got = sglang_json(run_sglang(sglang_site, "rope", out, tmp_path / "rot.pt"))
    cfg = read_draft(ckpt).cfg
    assert got["rotary_dim"] == rotary_dim and got["theta"] == cfg.rope_theta
    assert got["is_neox_style"] == (rope != "interleaved")
    ours = Rotary.for_variant(rope, cfg.head_dim, cfg.partial_rotary_factor, cfg.rope_theta)
    t = torch.load(tmp_path / "rot.pt")
    n, d = t["positions"].numel(), cfg.head_dim
    torch.testing.assert_close(ours(t["q"].view(n, 2, d), t["positions"]).view(n, -1), t["q_rot"])
    torch.testing.assert_close(ours(t["k"].view(n, 1, d), t["positions"]).view(n, -1), t["k_rot"])


def test_feature_ids_sglang_cannot_capture_are_refused(checkpoint, tmp_path):
    """-1 (the embedding output) trains, but SGLang rejects negative capture ids: export says so."""
    ckpt = variant_checkpoint(checkpoint, tmp_path / "ckpt", target_layer_ids=[-1, 15])
    with pytest.raises(ValueError, match=r"-1 \(the embedding output\) cannot be served"):
        export(ckpt, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fmt", ["sglang", "hf", "speculators"])
@pytest.mark.slow
def test_every_format_round_trips_and_decodes_as_the_checkpoint(checkpoint, tmp_path, fmt):
    """Exported in each format (fp32) and read back by what train.init_from and the serving
    CLIs use: the same draft config and weights, and the same greedy tokens, accept lengths and
    confidence logits as the checkpoint's draft on a real prompt."""
    from serving.decoder import SpeculativeDecoder
    from splitserve.checkpoint import read_init_config, read_init_draft
    from splitserve.target.models import load_causal_lm

    out = export(checkpoint, tmp_path / fmt, dtype="float32", fmt=fmt)
    config = json.loads((out / "config.json").read_text())
    names = set(load_file(str(out / "model.safetensors")))
    original = read_draft(checkpoint)
    if fmt == "speculators":
        assert config["speculators_model_type"] == "dspark" and config["sample_from_anchor"]
        assert config["aux_hidden_state_layer_ids"] == [16]  # counts the embedding as 0
        assert config["transformer_layer_config"]["num_hidden_layers"] == original.cfg.num_layers
    if fmt == "hf":  # DeepSpec's: the target's config underneath, its embedding and head copied
        assert config["model_type"] == "qwen3" and config["num_target_layers"] == 30
        assert {"embed_tokens.weight", "lm_head.weight"} <= names
    cfg, weights = read_init_draft(out)
    assert cfg == original.cfg and weights.keys() == original.weights.keys()
    assert all(torch.equal(weights[k], original.weights[k]) for k in weights)
    if fmt == "hf":  # as DeepSpec writes it, without our own record: read from its fields
        del config["splitserve_draft_config"]
        (out / "config.json").write_text(json.dumps(config))
        theirs = read_init_config(out)
        for field in (
            "num_layers",
            "block_size",
            "target_layer_ids",
            "sequential_head",
            "markov_rank",
            "mask_token_id",
            "hidden_size",
            "head_dim",
            "rope_theta",
        ):
            assert getattr(theirs, field) == getattr(original.cfg, field), field  # fmt: skip

    model_dir = prepare_target_dir(TargetConfig())
    target = load_causal_lm(model_dir, torch.device("cpu"), torch.float32)
    head = load_frozen_head(model_dir, "cpu", torch.float32)
    mine = load_exported(out, head)
    base = load_exported(export(checkpoint, tmp_path / "base", dtype="float32"), head)
    prompt = list(range(300, 340))
    got = [
        SpeculativeDecoder(target, d, runtime="static", max_len=128).generate(
            prompt, 24, record_confidence=True
        )
        for d in (mine, base)
    ]
    assert got[0].token_ids == got[1].token_ids and got[0].accept_lengths == got[1].accept_lengths
    assert got[0].confidence_logits and got[0].confidence_logits == got[1].confidence_logits


SPECULATORS_PARSE = """
import json, sys
from speculators.models.dspark import DSparkSpeculatorConfig
config = DSparkSpeculatorConfig.from_dict(json.load(open(sys.argv[1])))
print(json.dumps({"type": config.speculators_model_type, "block": config.block_size,
                  "aux": config.aux_hidden_state_layer_ids, "anchor": config.sample_from_anchor,
                  "layers": config.transformer_layer_config.num_hidden_layers,
                  "tokens": config.speculators_config.proposal_methods[0].speculative_tokens}))
"""
SPECULATORS_WRITE = """
import json, sys
from speculators.config import SpeculatorsConfig, VerifierConfig
from speculators.models.dspark import DSparkSpeculatorConfig
from speculators.proposals.greedy import GreedyTokenProposalConfig
from transformers import Qwen3Config
d = json.load(open(sys.argv[1]))
layers = Qwen3Config(**{k: d[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
    "num_key_value_heads", "head_dim", "rms_norm_eps", "vocab_size", "rope_parameters")},
    num_hidden_layers=d["num_layers"])
# their block_size counts the block's slots; without the anchor predicting, one is no proposal
# (dflash/core.py: speculative_tokens = block_size if sample_from_anchor else block_size - 1)
anchor = d.get("anchor", True)
tokens = d["block"] if anchor else d["block"] - 1
spec = SpeculatorsConfig(algorithm="dspark", default_proposal_method="greedy",
    proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=tokens)],
    verifier=VerifierConfig(name_or_path=d["target"], architectures=["LlamaForCausalLM"]))
config = DSparkSpeculatorConfig(transformer_layer_config=layers, speculators_config=spec,
    draft_vocab_size=d["vocab_size"], block_size=d["block"], sample_from_anchor=anchor,
    target_hidden_size=d["hidden_size"], mask_token_id=d["mask"],
    aux_hidden_state_layer_ids=[i + 1 for i in d["target_layer_ids"]],
    markov_rank=d["markov_rank"], markov_head_type=d["markov_head_type"])
json.dump(config.to_dict(), open(sys.argv[2], "w"))
"""


@pytest.mark.slow
def test_speculators_reads_ours_and_we_read_a_draft_it_wrote(
    checkpoint, tmp_path, speculators_site
):
    """speculators 0.9.0's own DSparkSpeculatorConfig parses our speculators export; a config its
    classes write (no SplitServe fields), beside the checkpoint's weights, is read from its own
    fields into the same draft config, and that draft decodes losslessly against the target."""
    from conftest import run_speculators

    from serving.decoder import SpeculativeDecoder
    from splitserve.checkpoint import read_draft, read_init_draft
    from splitserve.target.models import load_causal_lm

    ours = export(checkpoint, tmp_path / "ours", dtype="float32", fmt="speculators")
    code = SPECULATORS_PARSE.replace("sys.argv[1]", repr(str(ours / "config.json")))
    res = run_speculators(speculators_site, code)
    assert res.returncode == 0, res.stderr[-2000:]
    parsed = json.loads(res.stdout.strip().splitlines()[-1])
    assert parsed == {"type": "dspark", "block": 4, "aux": [16], "anchor": True, "layers": 1,
                      "tokens": 4}  # fmt: skip

    original = read_draft(checkpoint)
    sglang = json.loads(
        (export(checkpoint, tmp_path / "s", dtype="float32") / "config.json").read_text()
    )
    theirs = speculators_written(speculators_site, sglang, original, tmp_path / "theirs", block=4)
    written = json.loads((theirs / "config.json").read_text())
    assert "splitserve_draft_config" not in written
    shutil.copyfile(ours / "model.safetensors", theirs / "model.safetensors")
    cfg, weights = read_init_draft(theirs)
    trained = original.cfg
    assert (cfg.num_layers, cfg.block_size, cfg.target_layer_ids, cfg.sequential_head) == (
        trained.num_layers,
        trained.block_size,
        trained.target_layer_ids,
        trained.sequential_head,
    )
    assert (cfg.markov_rank, cfg.mask_token_id, cfg.hidden_size) == (
        trained.markov_rank,
        trained.mask_token_id,
        trained.hidden_size,
    )
    model_dir = prepare_target_dir(TargetConfig())
    target = load_causal_lm(model_dir, torch.device("cpu"), torch.float32)
    draft = load_exported(theirs, load_frozen_head(model_dir, "cpu", torch.float32))
    prompt = list(range(300, 340))
    res = SpeculativeDecoder(target, draft, runtime="static", max_len=128).generate(prompt, 24)
    want = SpeculativeDecoder(target, None, runtime="static", max_len=128).generate(prompt, 24)
    assert res.token_ids == want.token_ids


def speculators_written(site, sglang: dict, original, out, block: int, anchor: bool = True):
    """A draft directory's config.json as speculators 0.9.0's own DSparkSpeculatorConfig writes
    it (none of our fields) for the draft our SGLang export `sglang` describes, with their
    `block_size` `block` and `sample_from_anchor` `anchor`."""
    from conftest import run_speculators

    fields = {**sglang, "num_layers": sglang["num_hidden_layers"], "mask": sglang["mask_token_id"]}
    fields.update(target=str(original.model_dir), block=block, anchor=anchor)
    out.mkdir()
    (out / "fields.json").write_text(json.dumps(fields))
    code = SPECULATORS_WRITE.replace("sys.argv[1]", repr(str(out / "fields.json")))
    code = code.replace("sys.argv[2]", repr(str(out / "config.json")))
    res = run_speculators(site, code)
    assert res.returncode == 0, res.stderr[-2000:]
    (out / "fields.json").unlink()
    return out


# ----- speculators' DFlash-style slot convention (draft.sample_from_anchor=false) -----


@pytest.fixture(scope="module")
def from_masks(tmp_path_factory):
    """A DSpark trained by a real run in speculators' DFlash-style slot convention: blocks of
    the anchor + 4 masks, slots 1..4 predicting (gamma 4)."""
    run_dir = tmp_path_factory.mktemp("from_masks")
    extra = ["train.steps=2", "train.checkpoint_every=2", "draft.sample_from_anchor=false"]
    return run(compose_cfg(TINY + extra), run_dir)


def decode(draft_or_none, prompt=tuple(range(300, 340)), new=24):
    """Greedy decoding of the embedded target (fp32, static runtime) with a draft or none."""
    from serving.decoder import SpeculativeDecoder
    from splitserve.target.models import load_causal_lm

    target = load_causal_lm(prepare_target_dir(TargetConfig()), torch.device("cpu"), torch.float32)
    dec = SpeculativeDecoder(target, draft_or_none, runtime="static", max_len=128)
    return dec.generate(list(prompt), new)


@pytest.mark.slow
def test_a_draft_trained_sampling_from_the_masks_decodes_losslessly(from_masks):
    """Training in the false convention runs end to end (target worker, trainer, checkpoint)
    and what it trains proposes gamma tokens per step and decodes losslessly."""
    import math

    from serving.loading import load_decoder
    from serving.scheduler import SchedulerConfig

    assert math.isfinite(from_masks["last_loss"])
    cfg = read_draft(from_masks["checkpoint"]).cfg
    assert cfg.sample_from_anchor is False and (cfg.block_size, cfg.num_slots) == (4, 5)
    decoder, _ = load_decoder(
        from_masks["checkpoint"], scheduler=SchedulerConfig("fixed"), dtype="float32"
    )
    assert decoder.gamma == 4
    res = decoder.generate(list(range(300, 340)), 24)
    assert res.token_ids == decode(None).token_ids and max(res.widths) == 5


@pytest.mark.parametrize("fmt", ["sglang", "hf", "speculators"])
@pytest.mark.slow
def test_every_format_carries_the_slot_convention(from_masks, tmp_path, fmt):
    """Exported in each format, the false convention is written as that format counts it
    (flat layouts: block_size = gamma, SGLang adding the anchor slot; speculators': block_size
    = gamma + 1, speculative_tokens = gamma) and read back exactly: our own record, and the
    format's own fields alone; the draft read back decodes as the checkpoint's."""
    from splitserve.checkpoint import read_init_config, read_init_draft

    original = read_draft(from_masks["checkpoint"])
    out = export(from_masks["checkpoint"], tmp_path / fmt, dtype="float32", fmt=fmt)
    config = json.loads((out / "config.json").read_text())
    assert config["sample_from_anchor"] is False
    if fmt == "speculators":
        tokens = config["speculators_config"]["proposal_methods"][0]["speculative_tokens"]
        assert (config["block_size"], tokens) == (5, 4)
    else:
        assert config["block_size"] == 4
    cfg, weights = read_init_draft(out)
    assert cfg == original.cfg and all(
        torch.equal(weights[k], original.weights[k]) for k in weights
    )
    del config["splitserve_draft_config"]  # as another tool writes it: read from its fields
    (out / "config.json").write_text(json.dumps(config))
    theirs = read_init_config(out)
    assert (theirs.block_size, theirs.sample_from_anchor, theirs.num_slots) == (4, False, 5)
    head = load_frozen_head(original.model_dir, "cpu", torch.float32)
    base = export(from_masks["checkpoint"], tmp_path / "base", dtype="float32")
    got, want = decode(load_exported(out, head)), decode(load_exported(base, head))
    assert got.token_ids == want.token_ids and got.accept_lengths == want.accept_lengths


@pytest.mark.slow
def test_sglang_reads_the_slot_convention_and_gamma_of_our_export(
    checkpoint, tmp_path, sglang_site
):
    """SGLang 0.5.23's own parser on our sglang and hf exports of a false-convention draft:
    gamma is block_size (4), its verify window 5, and its DSpark draft model reads
    sample_from_anchor false (so it runs gamma + 1 query slots and drops row 0)."""
    from conftest import run_sglang

    ckpt = variant_checkpoint(checkpoint, tmp_path / "ckpt", sample_from_anchor=False)
    for fmt in ("sglang", "hf"):
        out = export(ckpt, tmp_path / fmt, fmt=fmt)
        got = sglang_json(run_sglang(sglang_site, "parse", out / "config.json", 49152))
        assert got["parsed"]["gamma"] == 4 and got["sample_from_anchor"] is False, fmt
        assert got["runtime"] == {"gamma": 4, "verify_num_draft_tokens": 5, "mask_token_id": 16}


@pytest.mark.slow
def test_a_speculators_draft_sampling_from_the_masks_loads_with_gamma_b_minus_1(
    from_masks, tmp_path, speculators_site
):
    """speculators 0.9.0's DSparkSpeculatorConfig parses our export of a false-convention draft
    (block_size 5, 4 speculative tokens); a config its own class writes with block_size B = 5 and
    sample_from_anchor false, beside the trained weights, loads as our DSpark with gamma B - 1 =
    4 in the false convention, proposes what the checkpoint proposes and decodes losslessly."""
    from conftest import run_speculators

    from splitserve.checkpoint import read_init_draft

    original = read_draft(from_masks["checkpoint"])
    ours = export(from_masks["checkpoint"], tmp_path / "ours", dtype="float32", fmt="speculators")
    code = SPECULATORS_PARSE.replace("sys.argv[1]", repr(str(ours / "config.json")))
    res = run_speculators(speculators_site, code)
    assert res.returncode == 0, res.stderr[-2000:]
    parsed = json.loads(res.stdout.strip().splitlines()[-1])
    assert (parsed["block"], parsed["anchor"], parsed["tokens"]) == (5, False, 4)

    sglang = json.loads(
        (
            export(from_masks["checkpoint"], tmp_path / "s", dtype="float32") / "config.json"
        ).read_text()
    )
    theirs = speculators_written(
        speculators_site, sglang, original, tmp_path / "theirs", block=5, anchor=False
    )
    written = json.loads((theirs / "config.json").read_text())
    assert (written["block_size"], written["sample_from_anchor"]) == (5, False)
    assert "splitserve_draft_config" not in written
    shutil.copyfile(ours / "model.safetensors", theirs / "model.safetensors")
    cfg, _ = read_init_draft(theirs)
    assert (cfg.block_size, cfg.samples_from_anchor, cfg.num_slots) == (4, False, 5)
    head = load_frozen_head(original.model_dir, "cpu", torch.float32)
    got = decode(load_exported(theirs, head))
    want = decode(load_exported(ours, head))
    assert got.token_ids == want.token_ids == decode(None).token_ids
    assert got.accept_lengths == want.accept_lengths
