"""Fit STS temperatures of a draft's confidence head on held-out prompts and write the JSON SGLang
reads from `--speculative-dspark-confidence-sts-path`.

    python -m serving.calibrate --checkpoint RUN/checkpoints/step-N --out sts.json
        [--prompts held-out|gsm8k|mtbench|humaneval] [--limit N] [--max-new-tokens N]
        [--min-per-class N] [--target DIR] [--device auto] [--dtype auto]

`held-out` (default) takes the prompts the training run held out of every source (its config is
saved in the checkpoint), so calibration never sees training prompts. The decoder runs greedy with
every draft slot verified, recording each block's raw confidence logits and how many drafts were
accepted; `draft_models.sts.fit_sts` fits one temperature per position. ECE and AUC of the prefix
survival per position are printed before and after.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from draft_models.config_io import load_dataclass
from draft_models.sts import fit_sts
from splitserve import checkpoint
from splitserve.data import DataConfig, load_prompts, prompt_turns
from splitserve.target.chat import prompt_ids

from . import cli
from .benchmarks import BENCHES, load_bench
from .loading import add_model_args, load_decoder
from .scheduler import SchedulerConfig


def held_out_prompts(ckpt: Path, limit: int | None) -> list[list[str]]:
    """The prompts the run held out of every source (its `data` config, saved in the checkpoint)."""
    data = load_dataclass(DataConfig, checkpoint.read_run_section(ckpt, "data"), "data")
    convs = load_prompts(data).eval[:limit]
    return [[m["content"] for m in prompt_turns(c) if m["role"] == "user"][:1] for c in convs]


def collect(
    decoder, tok, items: list[list[str]], max_new_tokens: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw confidence logits [N, gamma] and accepted counts [N] of every full-width block."""
    logits, accepted = [], []
    for item in tqdm(items, desc="calibrate", unit="prompt", dynamic_ncols=True):
        ids = prompt_ids(tok, [{"role": "user", "content": item[0]}])
        res = decoder.generate(
            ids, max_new_tokens, eos_token_id=tok.eos_token_id, record_confidence=True
        )
        steps = zip(res.confidence_logits, res.verified, res.accepted, strict=True)
        for row, n_ver, n_acc in steps:
            if n_ver == decoder.gamma:  # the last step may be cut short by the token budget
                logits.append(row)
                accepted.append(n_acc)
    if not logits:
        raise ValueError(
            "no full draft block was verified; raise --max-new-tokens or use more prompts"
        )
    return torch.tensor(logits, dtype=torch.float64), torch.tensor(accepted)


def _auc(value: float) -> str:
    return "n/a" if value != value else f"{value:.4f}"  # nan: one class only, AUC undefined


def build_parser():
    """This CLI's flags (its --help)."""
    ap = cli.parser(
        "calibrate", "Fit STS calibration of the confidence head; write SGLang's STS JSON"
    )
    add_model_args(ap)
    ap.add_argument("--out", required=True, type=Path, help="the STS JSON to write")
    ap.add_argument(
        "--prompts",
        default="held-out",
        choices=["held-out", *BENCHES],
        help="held-out: the prompts the training run held out of every source",
    )
    ap.add_argument("--limit", type=cli.POSITIVE, help="at most this many prompts (default: all)")
    ap.add_argument("--max-new-tokens", type=cli.POSITIVE, default=256, help="tokens per answer")
    ap.add_argument(
        "--min-per-class",
        type=cli.POSITIVE,
        default=10,
        help="a position is fitted only with at least this many accepted and rejected drafts",
    )
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        # raw confidence logits, every slot verified: fixed schedule, no STS, the trained block
        args.checkpoint = checkpoint.resolve(args.checkpoint)
        decoder, tok = load_decoder(
            args.checkpoint,
            args.target,
            scheduler=SchedulerConfig("fixed"),
            device=args.device,
            dtype=args.dtype,
        )
        if not decoder.draft.cfg.confidence_head:
            raise ValueError(f"{args.checkpoint}: this draft has no confidence head to calibrate")
        items = (
            held_out_prompts(args.checkpoint, args.limit)
            if args.prompts == "held-out"
            else load_bench(args.prompts, args.limit)
        )
        logits, accepted = collect(decoder, tok, items, args.max_new_tokens)
    except (ValueError, FileNotFoundError, NotImplementedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = fit_sts(logits, accepted, dataset=args.prompts, min_per_class=args.min_per_class)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result.sglang_json(), indent=1))
    print(f"{len(items)} prompts, {result.num_samples} blocks")
    print(
        f"{'pos':>3} {'T':>6} {'ECE before':>10} {'ECE after':>9} {'AUC before':>10} "
        f"{'AUC after':>9}  temperature"
    )
    for k, t in enumerate(result.temperatures):
        aucs = [_auc(a) for a in (result.auc_before[k], result.auc_after[k])]
        print(
            f"{k + 1:>3} {t:6.3f} {result.ece_before[k]:10.4f} {result.ece_after[k]:9.4f} "
            f"{aucs[0]:>10} {aucs[1]:>9}  {result.notes[k]}"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
