"""draft.mask_token_id=null takes the target tokenizer's reserved special token (SmolLM2: 16);
an explicit id that is an ordinary text token is refused, naming it and the target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_training import compose_cfg

from draft_models import DraftConfig, TargetSpec
from splitserve.target.models import reserved_mask_token, resolve_draft

WORDS = "hello world the a of to and is in it".split()
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def qwen_style_tokenizer(path: Path, mask_token: str | None = None, reserved: bool = True):
    """A tiny Qwen2-style tokenizer saved as a HF directory: a word-level vocabulary ([UNK] 0,
    words 1..10), then added special tokens: <|endoftext|> (eos and pad, 11), <|reserved_0|>
    (12, which the chat template never writes) and <|im_start|> / <|im_end|> (13, 14, which it
    does)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(WORDS)}}
    model = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    model.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = ["<|reserved_0|>"] * reserved + ["<|im_start|>", "<|im_end|>"]
    extra = {"mask_token": mask_token} if mask_token else {}
    tok = PreTrainedTokenizerFast(
        tokenizer_object=model,
        unk_token="[UNK]",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=specials,
        **extra,
    )
    tok.chat_template = TEMPLATE
    tok.save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


def spec(vocab: int = 32) -> TargetSpec:
    return TargetSpec(
        model_type="llama",
        hidden_size=16,
        num_layers=4,
        vocab_size=vocab,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        intermediate_size=32,
    )


def test_null_takes_the_reserved_special_token_the_template_never_writes(tmp_path):
    tok = qwen_style_tokenizer(tmp_path / "tok")
    reserved = tok.convert_tokens_to_ids("<|reserved_0|>")
    # higher ids (<|im_start|>, <|im_end|>) are skipped: the chat template writes them
    assert reserved == 12 and reserved_mask_token(tok) == 12
    # loaded from the directory, as prepare, regenerate and serving do
    draft = resolve_draft(DraftConfig(num_layers=1), tmp_path / "tok", spec())
    assert draft.mask_token_id == 12
    # an added special token given explicitly is kept
    assert resolve_draft(DraftConfig(num_layers=1, mask_token_id=14), tmp_path, spec(), tok)
    # ids past the tokenizer (rows of a padded embedding) are no text either
    assert resolve_draft(DraftConfig(num_layers=1, mask_token_id=30), tmp_path, spec(), tok)


def test_the_tokenizers_own_mask_token_wins_then_pad_or_unk(tmp_path):
    with_mask = qwen_style_tokenizer(tmp_path / "a", mask_token="<mask>")
    assert reserved_mask_token(with_mask) == with_mask.convert_tokens_to_ids("<mask>")
    # no reserved token: pad is eos here, so unk ([UNK], 0)
    bare = qwen_style_tokenizer(tmp_path / "b", reserved=False)
    assert reserved_mask_token(bare) == 0


def test_an_ordinary_token_is_refused_by_id_text_and_target(tmp_path):
    tok = qwen_style_tokenizer(tmp_path / "tok")
    with pytest.raises(ValueError) as err:
        resolve_draft(DraftConfig(num_layers=1, mask_token_id=1), tmp_path / "tok", spec(), tok)
    message = str(err.value)
    assert "draft.mask_token_id=1 is the ordinary token 'hello'" in message
    assert str(tmp_path / "tok") in message and "null (its reserved token 12" in message
    with pytest.raises(ValueError, match=r"draft.mask_token_id=-1 is invalid"):
        resolve_draft(DraftConfig(num_layers=1, mask_token_id=-1), tmp_path, spec(), tok)


def test_smollm2_still_resolves_to_16_and_a_run_refuses_an_ordinary_token(tmp_path):
    """The embedded target through prepare (no worker started): 16, <empty_output>, as the
    drafts trained before null was the default; an ordinary token stops the run before its
    workers, naming the token."""
    from test_training import TINY

    from splitserve.config import load_run_config
    from splitserve.train import prepare, run

    node = compose_cfg(TINY)
    assert node.draft.mask_token_id is None  # conf/config.yaml's default
    cfg = load_run_config(node)
    ctx = prepare(cfg, node, tmp_path / "run")
    assert ctx.cfg.draft.mask_token_id == 16  # what the workers build the draft from
    with pytest.raises(ValueError, match=r"mask_token_id=1000 is the ordinary token '\(\)'"):
        run(compose_cfg(TINY + ["draft.mask_token_id=1000"]), tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


def tiny_target_dir(path: Path, model_type: str = "llama") -> Path:
    """A tiny random model of `model_type` (llama, qwen2, ...) whose tokenizer is
    `qwen_style_tokenizer`'s."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(
        model_type,
        hidden_size=16,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=32,
        vocab_size=32,
        tie_word_embeddings=True,
        eos_token_id=11,
        pad_token_id=11,
        bos_token_id=None,
    )
    AutoModelForCausalLM.from_config(cfg).save_pretrained(path)
    qwen_style_tokenizer(path)
    return path


@pytest.mark.slow
def test_a_run_on_another_tokenizer_records_its_reserved_token_and_exports_it(tmp_path):
    """Trained for real (one step, colocated) against a target with the tiny tokenizer: the
    checkpoint's draft config and the exported config.json both name its reserved token."""
    from serving.export import export
    from splitserve.train import run

    target = tiny_target_dir(tmp_path / "target")
    overrides = [
        "target.kind=path",
        f"target.path={target}",
        "target.regenerate=false",
        "draft.num_layers=1",
        "draft.markov_rank=4",
        "draft.block_size=4",
        "data.max_length=64",
        "data.eval_prompts=1",
        "data.sources=[{kind:gsm8k,path:null,limit:20,weight:1}]",
        "split.colocated=true",
        "train.micro_batch=1",
        "train.num_anchors=4",
        "train.steps=1",
        "train.checkpoint_every=1",
        "train.warmup_steps=1",
        "train.decode_eval_prompts=0",
        "log.wandb_mode=disabled",
        "log.progress=false",
    ]
    summary = run(compose_cfg(overrides), tmp_path / "run")
    saved = json.loads(Path(summary["checkpoint"], "draft", "draft_config.json").read_text())
    assert saved["mask_token_id"] == 12
    exported = export(Path(summary["checkpoint"]), tmp_path / "out")
    config = json.loads((exported / "config.json").read_text())
    assert config["mask_token_id"] == 12
    assert config["splitserve_draft_config"]["mask_token_id"] == 12
