"""Registries: a draft architecture and a target backend plug in from outside the library."""

import json

import pytest
import torch
import toy_arch  # noqa: F401  (registers arch "toy", as a user's own module would)
from test_training import TINY, compose_cfg
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
from splitserve.train import run


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


def test_a_toy_architecture_trains_decodes_losslessly_and_is_refused_by_export(tmp_path):
    """Registered from tests/toy_arch.py only: two training steps through the real trainer (worker
    processes, gloo, DeepSpeed; the plugin is imported in each), then lossless greedy decoding of
    its checkpoint, then export's refusal naming the reason."""
    summary = run(
        compose_cfg(
            TINY
            + [
                "plugins=[toy_arch]",
                "draft.arch=toy",
                "draft.sequential_head=none",
                "draft.confidence_head=false",
                "train.steps=2",
                "train.checkpoint_every=2",
            ]
        ),
        tmp_path / "run",
    )
    assert summary["steps"] == 2 and summary["last_loss"] == summary["last_loss"]  # finite, not nan
    ckpt = summary["checkpoint"]
    assert (
        json.loads(
            (
                tmp_path / "run" / "checkpoints" / "step-00000002" / "draft" / "draft_config.json"
            ).read_text()
        )["arch"]
        == "toy"
    )

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
        ValueError, match="target.backend='nope' is invalid; allowed: hf, sglang, echo"
    ):
        make_backend(smol_setup("nope"))
