"""The README's "your own HF model" path, as a new user runs it: a local Qwen2-layout directory
with a tokenizer unlike SmolLM2's, `+recipe=own target.path=DIR` through the command line,
export, then speculative generation from the exported draft against the target, which must
equal target-only greedy decoding."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_mask_token import tiny_target_dir

pytestmark = pytest.mark.slow  # spawns processes or decodes with the real SmolLM2

ROOT = Path(__file__).resolve().parents[1]


def _cli(*argv: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", *argv], capture_output=True, text=True, cwd=ROOT, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_own_model_trains_exports_and_decodes_losslessly(tmp_path):
    target = tiny_target_dir(tmp_path / "my-model", "qwen2")  # q/k/v biases
    chats = tmp_path / "chats.jsonl"
    chats.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": f"hello world {w} {i}"}]}) + "\n"
            for i in range(12)
            for w in ("the", "a", "of")
        )
    )
    run = tmp_path / "run"
    _cli(
        "splitserve.train",
        "+recipe=own",
        f"target.path={target}",
        f"data.sources=[{{kind:jsonl_chat,path:{chats}}}]",
        "data.eval_prompts=1",
        "data.max_length=48",
        "target.max_new_tokens=8",
        "target.generate_batch=2",
        "draft.num_layers=1",
        "draft.markov_rank=8",
        "train.steps=2",
        "train.micro_batch=2",
        "train.warmup_steps=1",
        "train.num_anchors=4",
        "train.checkpoint_every=2",
        "train.eval_every=2",
        "log.wandb_mode=disabled",
        "log.progress=false",
        f"train.run_dir={run}",
    )
    draft_config = json.loads(
        (run / "checkpoints" / "step-00000002" / "draft" / "draft_config.json").read_text()
    )
    # the tokenizer's reserved token (<|reserved_0|>), not SmolLM2's 16; the width is the target's
    assert draft_config["mask_token_id"] == 12
    assert draft_config["hidden_size"] == 16

    out = tmp_path / "draft"
    _cli("serving.export", "--checkpoint", str(run), "--out", str(out), "--dtype", "float32")
    config = json.loads((out / "config.json").read_text())
    assert config["mask_token_id"] == 12 and config["architectures"] == ["Qwen3DSparkModel"]

    decode = ["--checkpoint", str(out), "--target", str(target), "--device", "cpu"]
    decode += ["--dtype", "float32", "--prompt", "hello world the", "--max-new-tokens", "12"]
    spec = json.loads(_cli("serving.generate", *decode, "--json").stdout.splitlines()[-1])
    assert len(spec["token_ids"]) == 12 and sum(spec["accept_lengths"]) == 12

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target).float().eval()
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "hello world the"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    plain = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=None)
    assert spec["token_ids"] == plain[0, ids.shape[1] :].tolist()  # lossless
