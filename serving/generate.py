"""Generate with a trained draft and its target, losslessly.

    python -m serving.generate --checkpoint RUN/checkpoints/step-N --prompt "What is 7 x 8?"
        [--target DIR] [--temperature T] [--max-new-tokens N] [--block-size G]
        [--scheduler fixed|threshold|prefix] [--sps sps.json] [--sts sts.json] [--json]

The target defaults to the model directory the checkpoint was trained against (its meta.json);
`--target` must have the same shape. `--json` prints one object: token_ids, text,
accept_lengths (tokens emitted per step, bonus included), steps.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file

from draft_models import DSparkDraft
from draft_models.sts import read_temperatures

from .decoder import SpeculativeDecoder
from .export import read_checkpoint
from .scheduler import SchedulerConfig
from .sps import SpsTable


def load_decoder(checkpoint: Path, target_dir: Path | None = None, *, scheduler: SchedulerConfig,
                 sps: Path | None = None, sts: Path | None = None, block_size: int | None = None):
    """(decoder, tokenizer) for a SplitServe checkpoint, on CPU in fp32."""
    from transformers import AutoModelForCausalLM

    from splitserve.targets import check_tokenizer, load_frozen_head, load_target_spec

    cfg, trained_on, _ = read_checkpoint(checkpoint)
    if target_dir is None:
        target_dir = Path(json.loads((Path(checkpoint) / "meta.json").read_text())["model_dir"])
    if not (Path(target_dir) / "config.json").is_file():
        raise FileNotFoundError(f"target {target_dir} is not a HF model directory (no config.json)")
    spec = load_target_spec(target_dir)
    if asdict(spec) != asdict(trained_on):
        diff = sorted(k for k, v in asdict(spec).items() if asdict(trained_on)[k] != v)
        raise ValueError(f"checkpoint {checkpoint} was trained for a different target: {target_dir} differs in {diff}")
    tokenizer = check_tokenizer(target_dir, spec)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    draft = DSparkDraft(cfg, load_frozen_head(target_dir, "cpu", torch.float32)) if cfg.arch != "eagle3" else None
    if draft is None:
        raise NotImplementedError("EAGLE-3 drafts are not decoded by the reference decoder yet")
    draft.load_state_dict(load_file(str(Path(checkpoint) / "draft" / "model.safetensors")), strict=True)
    temps = read_temperatures(sts, cfg.block_size) if sts is not None else None
    table = SpsTable.load(sps) if sps is not None else None
    decoder = SpeculativeDecoder(target, draft, scheduler=scheduler, sps=table, sts_temperatures=temps,
                                 block_size=block_size)
    return decoder, tokenizer


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Lossless speculative generation with a SplitServe draft")
    ap.add_argument("--checkpoint", required=True, type=Path)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--target", type=Path, help="target model directory (default: the one trained against)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--block-size", type=int, help="draft tokens per step (at most the trained block size)")
    ap.add_argument("--scheduler", default="fixed", choices=["fixed", "threshold", "prefix"])
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--sps", type=Path, help="SPS table JSON (scheduler=prefix)")
    ap.add_argument("--sts", type=Path, help="STS calibration JSON")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        scheduler = SchedulerConfig(mode=args.scheduler, threshold=args.threshold)
        scheduler.validate()
        decoder, tok = load_decoder(args.checkpoint, args.target, scheduler=scheduler, sps=args.sps, sts=args.sts,
                                    block_size=args.block_size)
    except (ValueError, FileNotFoundError, NotImplementedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    prompt = tok.apply_chat_template([{"role": "user", "content": args.prompt}], add_generation_prompt=True,
                                     tokenize=True, return_dict=True)["input_ids"]
    res = decoder.generate(list(prompt), args.max_new_tokens, temperature=args.temperature,
                           eos_token_id=tok.eos_token_id, seed=args.seed)
    text = tok.decode(res.token_ids, skip_special_tokens=True)
    if args.json:
        print(json.dumps({"token_ids": res.token_ids, "text": text, "accept_lengths": res.accept_lengths,
                          "steps": res.steps}))
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
