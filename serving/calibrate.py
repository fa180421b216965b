"""Fit STS temperatures of a draft's confidence head on held-out prompts and write the JSON SGLang
reads from `--speculative-dspark-confidence-sts-path`.

    python -m serving.calibrate --checkpoint RUN/checkpoints/step-N --out sts.json
        [--prompts held-out|gsm8k|mtbench|humaneval] [--limit N] [--max-new-tokens N] [--device auto]

`held-out` (default) takes the prompts the training run held out of every source (its config is
saved in the checkpoint), so calibration never sees training prompts. The decoder runs greedy with
every draft slot verified, recording each block's raw confidence logits and how many drafts were
accepted; `draft_models.sts.fit_sts` fits one temperature per position. ECE and AUC of the prefix
survival per position are printed before and after.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf
from tqdm import tqdm

from draft_models.sts import fit_sts

from .benchmarks import BENCHES, load_bench
from .loading import add_decoder_args, chat_ids, decoder_from_args


def held_out_prompts(checkpoint: Path, limit: int | None) -> list[list[str]]:
    from splitserve.config import load_run_config
    from splitserve.data import load_prompts, prompt_turns

    path = Path(checkpoint) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the held-out prompts are defined by the run's config")
    cfg = load_run_config(OmegaConf.to_container(OmegaConf.load(path)))
    convs = load_prompts(cfg.data).eval[:limit]
    return [[m["content"] for m in prompt_turns(c) if m["role"] == "user"][:1] for c in convs]


def collect(decoder, tok, items: list[list[str]], max_new_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw confidence logits [N, gamma] and accepted counts [N] of every full-width block."""
    logits, accepted = [], []
    for item in tqdm(items, desc="calibrate", unit="prompt", dynamic_ncols=True):
        ids = chat_ids(tok, [{"role": "user", "content": item[0]}])
        res = decoder.generate(ids, max_new_tokens, eos_token_id=tok.eos_token_id, record_confidence=True)
        for row, n_ver, n_acc in zip(res.confidence_logits, res.verified, res.accepted):
            if n_ver == decoder.gamma:  # the last step may be cut short by the token budget
                logits.append(row)
                accepted.append(n_acc)
    if not logits:
        raise ValueError("no full draft block was verified; raise --max-new-tokens or use more prompts")
    return torch.tensor(logits, dtype=torch.float64), torch.tensor(accepted)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Fit STS calibration of the confidence head; write SGLang's STS JSON")
    add_decoder_args(ap)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--prompts", default="held-out", choices=["held-out", *BENCHES])
    ap.add_argument("--limit", type=int, help="at most this many prompts")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    args = ap.parse_args(argv)
    args.scheduler, args.sts, args.sps = "fixed", None, None  # calibrate raw logits with every slot verified
    try:
        decoder, tok = decoder_from_args(args)
        if not decoder.draft.cfg.confidence_head:
            raise ValueError(f"{args.checkpoint}: this draft has no confidence head to calibrate")
        items = (held_out_prompts(args.checkpoint, args.limit) if args.prompts == "held-out"
                 else load_bench(args.prompts, args.limit))
        logits, accepted = collect(decoder, tok, items, args.max_new_tokens)
    except (ValueError, FileNotFoundError, NotImplementedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = fit_sts(logits, accepted, dataset=args.prompts)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result.sglang_json(), indent=1))
    print(f"{len(items)} prompts, {result.num_samples} blocks")
    print(f"{'pos':>3} {'T':>6} {'ECE before':>10} {'ECE after':>9} {'AUC before':>10} {'AUC after':>9}")
    for k, t in enumerate(result.temperatures):
        print(f"{k + 1:>3} {t:6.3f} {result.ece_before[k]:10.4f} {result.ece_after[k]:9.4f} "
              f"{result.auc_before[k]:10.4f} {result.auc_after[k]:9.4f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
