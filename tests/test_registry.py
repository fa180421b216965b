"""Registries: a draft architecture and a target backend plug in from outside the library."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import toy_arch  # noqa: F401  (registers arch "toy", as a user's own module would)
from test_training import ROOT, TINY
from transformers import AutoModelForCausalLM

from draft_models import DraftConfig, arch_names, get_arch
from serving.export import export
from serving.loading import load_decoder
from serving.scheduler import SchedulerConfig
from splitserve.target.backends import (
    TargetBackend,
    TargetSetup,
    backend_names,
    make_backend,
    register_backend,
)
from splitserve.target.chat import prompt_ids
from splitserve.target.config import TargetConfig


def test_builtin_tables():
    assert arch_names()[:3] == ("dspark", "dflash", "eagle3") and "toy" in arch_names()
    assert get_arch("dspark").export is not None and get_arch("dflash").export is None
    assert {"hf", "sglang"} <= set(backend_names())
    with pytest.raises(
        ValueError, match=r"draft.arch='medusa' is invalid; allowed: dspark, dflash, eagle3"
    ):
        get_arch("medusa")


def test_registry_defaults_apply_to_unset_fields():
    cfg = DraftConfig.for_arch("toy", block_size=3)
    assert (cfg.sequential_head, cfg.confidence_head, cfg.block_size, cfg.loss.ce_weight) == (
        "none",
        False,
        3,
        0.5,
    )


@pytest.mark.slow
def test_a_toy_architecture_trains_decodes_losslessly_and_is_refused_by_export(tmp_path):
    """Registered from tests/toy_arch.py only: two training steps through the real command line
    (`plugins=[toy_arch] draft=toy`: worker processes, gloo, DeepSpeed, the plugin imported in
    each), then lossless greedy decoding of its checkpoint, then export's refusal naming why."""
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "splitserve.train",
        "plugins=[toy_arch]",
        "draft=toy",
        *TINY,
        "train.steps=2",
        "train.checkpoint_every=2",
        f"train.run_dir={run_dir}",
        f"hydra.run.dir={tmp_path}/hydra",
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(ROOT)])}
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["last_loss"] == summary["last_loss"]  # finite, not nan
    # the registered defaults applied: no heads, the toy's loss weights
    cfg = json.loads(
        (run_dir / "checkpoints" / "step-00000002" / "draft" / "draft_config.json").read_text()
    )
    assert (cfg["arch"], cfg["sequential_head"], cfg["confidence_head"]) == ("toy", "none", False)
    assert (cfg["loss"]["ce_weight"], cfg["loss"]["distill_weight"]) == (0.5, 0.5)
    ckpt = summary["checkpoint"]

    decoder, tok = load_decoder(ckpt, scheduler=SchedulerConfig("fixed"), device="cpu")
    prompt = prompt_ids(tok, [{"role": "user", "content": "What is 12 plus 30?"}])
    res = decoder.generate(prompt, 20)
    target = AutoModelForCausalLM.from_pretrained(decoder.target.name_or_path, dtype=torch.float32)
    ids = torch.tensor([prompt])
    ref = target.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=20,
        min_new_tokens=20,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )
    assert res.token_ids == ref[0, len(prompt) :].tolist()
    assert max(res.widths) > 1  # the toy's drafts were verified

    with pytest.raises(
        ValueError, match="cannot export .*arch=toy: no SGLang export mapping is registered"
    ):
        export(ckpt, tmp_path / "exported")
    assert not (tmp_path / "exported").exists()


def smol_setup(backend: str) -> TargetSetup:
    from splitserve.target.embedded import ensure_smollm2

    return TargetSetup(
        ensure_smollm2(),
        TargetConfig(backend=backend),
        [1],
        torch.device("cpu"),
        seed=0,
        max_length=64,
        max_prompt_tokens=32,
    )


def test_a_target_backend_registers_by_name(tmp_path):

    @register_backend("echo")
    class Echo(TargetBackend):
        def produce(self, g, conversation):
            raise NotImplementedError

    assert "echo" in backend_names()
    backend = make_backend(smol_setup("echo"))
    assert isinstance(backend, Echo) and backend.spec.num_layers == 30 and backend.budget(60) == 4
    with pytest.raises(
        ValueError, match="target.backend='nope' is invalid; allowed: hf, sglang, static, echo"
    ):
        make_backend(smol_setup("nope"))


def test_an_architecture_is_selected_by_its_group_option_not_by_arch_alone(tmp_path):
    """`draft.arch=dflash` over the default draft=dspark would keep DSpark's heads and loss
    weights: refused, naming the option that gives dflash's own defaults."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "splitserve.train",
            "draft.arch=dflash",
            f"hydra.run.dir={tmp_path}/run",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "draft.arch=dflash on top of draft=dspark's defaults; select draft=dflash" in out.stderr
