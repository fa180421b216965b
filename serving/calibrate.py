"""Fit STS temperatures of a draft's confidence head on held-out prompts and write the JSON SGLang
reads from `--speculative-dspark-confidence-sts-path`.

    python -m serving.calibrate --checkpoint RUN/checkpoints/step-N (--out sts.json | --score S)
        [--prompts held-out|gsm8k|mtbench|humaneval|FILE.jsonl] [--limit N] [--max-new-tokens N]
        [--min-per-class N] [--test-fraction F] [--report R.json] [--target DIR] [--device auto]
        [--dtype auto]

`held-out` (default) takes the prompts the training run held out of every source (its config is
saved in the checkpoint), so calibration never sees training prompts under `data.hold_out=prompts`
(the default; under `rows`, a run's rule before 2026-12-04, a regenerated file's held-out rows
share their prompts with training rows, and a warning counts them). An exported draft keeps no run
config: give it a jsonl_chat FILE of prompts it was not trained on (`scripts/held_out_prompts.py`
writes a recipe's, leaving out any found in the training files). The decoder runs greedy with
every draft slot verified, recording each block's raw confidence logits and how many drafts were
accepted; `draft_models.sts.fit_sts` fits one temperature per position. A `--test-fraction` of the
prompts (default half), spread evenly over the list so every source is on both sides, is kept
out of the fit: ECE and AUC of the prefix survival per position, before and after, are printed on
the fitted prompts and on those test prompts (the figures to trust), and `--report` writes both
as JSON. Blocks of one prompt stay on one side of the split. The temperatures written are those
fitted on the fit split. `--score STS.json` fits nothing: it scores a file's temperatures on
every prompt (temperatures fitted on some prompts, checked on those they will be served on).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from draft_models.sts import fit_sts, read_temperatures, score_sts
from splitserve import checkpoint
from splitserve.data import (
    Conversation,
    load_prompts,
    prompt_key,
    prompt_turns,
    read_jsonl_chat,
    saved_data_config,
)
from splitserve.target.chat import prompt_ids

from . import cli
from .benchmarks import BENCHES, load_bench
from .loading import add_model_args, load_decoder
from .scheduler import SchedulerConfig


def first_user_turns(convs: list[Conversation]) -> list[list[str]]:
    """Each conversation's first user message: the prompt a calibration decodes from."""
    return [[m["content"] for m in prompt_turns(c) if m["role"] == "user"][:1] for c in convs]


def held_out_prompts(ckpt: Path, limit: int | None) -> list[list[str]]:
    """The prompts the run held out of every source (its `data` config, saved in the checkpoint)."""
    data = saved_data_config(checkpoint.read_run_section(ckpt, "data"))
    split = load_prompts(data)
    held = split.eval[:limit]
    if len(held) < len(split.eval):
        _limited(f"the first {len(held)} of the {len(split.eval)} prompts {ckpt} held out")
    trained = {prompt_key(c) for c in split.train}
    seen = sum(prompt_key(c) in trained for c in held)
    if seen:  # only under data.hold_out=rows
        print(
            f"warning: {seen} of the {len(held)} prompts {ckpt} held out (data.hold_out="
            f"{data.hold_out}) are on its training rows too; give --prompts a file of prompts "
            "checked unseen (scripts/held_out_prompts.py) to calibrate on held-out ones only",
            file=sys.stderr,
        )
    return first_user_turns(held)


def prompt_set(text: str) -> str | Path:
    """argparse type of --prompts: held-out, a benchmark's name, or an existing jsonl_chat file."""
    if text in ("held-out", *BENCHES):
        return text
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither held-out, a benchmark ({', '.join(BENCHES)}) nor an existing "
            "jsonl_chat file"
        )
    return Path(text)


def _limited(what: str) -> None:
    """Say that --limit left prompts unread (a calibration on fewer prompts than the set has)."""
    print(f"read {what} (--limit)", file=sys.stderr)


def _records(path: Path) -> int:
    """The records of a JSON-lines file (its non-blank lines), without parsing them."""
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def load_prompt_set(prompts: str | Path, ckpt: Path, limit: int | None) -> list[list[str]]:
    """The prompts of --prompts, each as [first user message]."""
    if isinstance(prompts, Path):
        items = first_user_turns(read_jsonl_chat(prompts, limit))
        if not items:
            raise ValueError(f"--prompts {prompts} holds no conversation")
        if len(items) == limit and _records(prompts) > limit:
            _limited(f"the first {limit} prompts of {prompts}")
        for k, item in enumerate(items):
            if not item:
                raise ValueError(
                    f"--prompts {prompts}: conversation {k + 1} has no user message before its "
                    "first answer"
                )
        return items
    if prompts == "held-out":
        try:
            return held_out_prompts(ckpt, limit)
        except FileNotFoundError as exc:
            raise FileNotFoundError(
                f"{exc}; or give --prompts a benchmark or a jsonl_chat file of prompts the draft "
                "was not trained on (scripts/held_out_prompts.py)"
            ) from None
    items = load_bench(prompts, None if limit is None else limit + 1)
    if limit is not None and len(items) > limit:
        _limited(f"the first {limit} prompts of {prompts}")
    return items[:limit]


def collect(
    decoder, tok, items: list[list[str]], max_new_tokens: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per prompt: raw confidence logits [n, gamma] and accepted counts [n] of its full-width
    blocks (n may be 0)."""
    per_prompt = []
    for item in tqdm(items, desc="calibrate", unit="prompt", dynamic_ncols=True):
        ids = prompt_ids(tok, [{"role": "user", "content": item[0]}])
        res = decoder.generate(
            ids, max_new_tokens, eos_token_id=tok.eos_token_id, record_confidence=True
        )
        logits, accepted = [], []
        steps = zip(res.confidence_logits, res.verified, res.accepted, strict=True)
        for row, n_ver, n_acc in steps:
            if n_ver == decoder.gamma:  # the last step may be cut short by the token budget
                logits.append(row)
                accepted.append(n_acc)
        per_prompt.append(
            (
                torch.tensor(logits, dtype=torch.float64).reshape(-1, decoder.gamma),
                torch.tensor(accepted, dtype=torch.long),
            )
        )
    return per_prompt


def pick_test_prompts(n: int, test_fraction: float) -> list[int]:
    """The prompts of the test split: spread evenly over the list (prompt i is a test prompt when
    floor((i + 1) F) > floor(i F)), so a list built source by source gives both splits every
    source; an error if either split would be empty."""
    if n == 0:
        raise ValueError("no prompts to calibrate on (the run held out none; use --prompts)")
    test = [
        i
        for i in range(n)
        if math.floor(round((i + 1) * test_fraction, 9)) > math.floor(round(i * test_fraction, 9))
    ]
    if test_fraction > 0 and not 0 < len(test) < n:
        raise ValueError(
            f"--test-fraction {test_fraction:g} of {n} prompts leaves no prompt for fitting or "
            "none for testing; use more prompts (--limit) or --test-fraction 0"
        )
    return test


def split(
    per_prompt: list[tuple[torch.Tensor, torch.Tensor]], test: list[int]
) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor] | None]:
    """(fit blocks, test blocks or None) for the test prompts `test` (pick_test_prompts): whole
    prompts on each side, so one prompt's correlated blocks never sit on both sides."""
    test = set(test)
    parts = {
        "fit": [x for i, x in enumerate(per_prompt) if i not in test],
        "test": [x for i, x in enumerate(per_prompt) if i in test],
    }
    blocks = {}
    for name, prompts in parts.items():
        if not prompts:
            continue
        logits = torch.cat([x for x, _ in prompts])
        if logits.shape[0] == 0:
            raise ValueError(
                f"the {name} split ({len(prompts)} prompts) has no full draft block verified; "
                "raise --max-new-tokens or use more prompts"
            )
        blocks[name] = (logits, torch.cat([y for _, y in prompts]))
    return blocks["fit"], blocks.get("test")


def _json_safe(values: list[float]) -> list[float | None]:
    return [None if v != v else v for v in values]  # nan (AUC of one class) -> null


def _auc(value: float) -> str:
    return "n/a" if value != value else f"{value:.4f}"  # nan: one class only, AUC undefined


def build_parser():
    """This CLI's flags (its --help)."""
    ap = cli.parser(
        "calibrate", "Fit STS calibration of the confidence head; write SGLang's STS JSON"
    )
    add_model_args(ap)
    ap.add_argument("--out", type=Path, help="the STS JSON to write (the fit; or --score)")
    ap.add_argument(
        "--score",
        type=Path,
        help="an STS JSON to score on these prompts instead of fitting one (every prompt "
        "tested; with --report, written there)",
    )
    ap.add_argument(
        "--prompts",
        default="held-out",
        type=prompt_set,
        help="held-out: the prompts the training run held out of every source; "
        f"{' | '.join(BENCHES)}: a benchmark's; or a jsonl_chat file (its conversations' first "
        "user messages)",
    )
    ap.add_argument("--limit", type=cli.POSITIVE, help="at most this many prompts (default: all)")
    ap.add_argument("--max-new-tokens", type=cli.POSITIVE, default=256, help="tokens per answer")
    ap.add_argument(
        "--min-per-class",
        type=cli.POSITIVE,
        default=10,
        help="a position is fitted only with at least this many accepted and rejected drafts",
    )
    ap.add_argument(
        "--test-fraction",
        type=cli.PROBABILITY,
        default=0.5,
        help="share of the prompts (spread evenly over the list) kept out of the fit to measure "
        "ECE/AUC on; 0 fits on all and reports in-sample figures only",
    )
    ap.add_argument("--report", type=Path, help="also write the ECE/AUC of both splits as JSON")
    return ap


def _table(title: str, scores: dict, temperatures: list[float], notes: list[str]) -> None:
    """rate: blocks whose first k drafts were all accepted; mean: the predicted rate (above the
    rate: over-confident)."""
    print(title)
    print(
        f"{'pos':>3} {'T':>6} {'rate':>6} {'mean before':>11} {'mean after':>10} "
        f"{'ECE before':>10} {'ECE after':>9} {'AUC before':>10} {'AUC after':>9}  temperature"
    )
    for k, t in enumerate(temperatures):
        aucs = [_auc(a) for a in (scores["auc_before"][k], scores["auc_after"][k])]
        print(
            f"{k + 1:>3} {t:6.3f} {scores['rate'][k]:6.4f} {scores['mean_before'][k]:11.4f} "
            f"{scores['mean_after'][k]:10.4f} {scores['ece_before'][k]:10.4f} "
            f"{scores['ece_after'][k]:9.4f} {aucs[0]:>10} {aucs[1]:>9}  {notes[k]}"
        )


def _write_report(path: Path | None, report: dict) -> None:
    """The report as strict JSON: an undefined AUC (one class only) is null, not NaN."""
    if path is None:
        return
    for part in ("fit", "test", "scored"):
        for key in ("auc_before", "auc_after"):
            if part in report:
                report[part][key] = _json_safe(report[part][key])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, allow_nan=False))


def score_file(args, command: str, decoder, tok, items) -> None:
    """--score: the ECE/AUC of an STS file's temperatures on every prompt (e.g. temperatures
    fitted on one set of prompts, scored on the prompts they will be served on)."""
    temperatures = read_temperatures(args.score, decoder.gamma)  # before the decoding
    per_prompt = collect(decoder, tok, items, args.max_new_tokens)
    logits = torch.cat([x for x, _ in per_prompt])
    if logits.shape[0] == 0:
        raise ValueError(
            f"{len(items)} prompts gave no full draft block verified; raise --max-new-tokens or "
            "use more prompts"
        )
    accepted = torch.cat([y for _, y in per_prompt])
    scores = score_sts(logits, accepted, temperatures)
    _table(
        f"scored ({len(items)} prompts, {scores['num_samples']} blocks; the temperatures of "
        f"{args.score})",
        scores,
        temperatures,
        ["from the file"] * len(temperatures),
    )
    report = {"command": command, "prompts": str(args.prompts), "score": str(args.score)}
    _write_report(args.report, {**report, "temperatures": temperatures, "scored": scores})
    print("scored" + (f"; wrote {args.report}" if args.report else ""))


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if (args.out is None) == (args.score is None):
        ap.error("give one of --out (fit temperatures and write them) and --score STS.json")
    try:
        # raw confidence logits, every slot verified: fixed schedule, no STS, the trained block
        args.checkpoint = checkpoint.resolve(args.checkpoint)
        # first: a checkpoint without a run config is refused before any loading
        items = load_prompt_set(args.prompts, args.checkpoint, args.limit)
        decoder, tok = load_decoder(
            args.checkpoint,
            args.target,
            scheduler=SchedulerConfig("fixed"),
            device=args.device,
            dtype=args.dtype,
        )
        if not decoder.draft.cfg.confidence_head:
            raise ValueError(f"{args.checkpoint}: this draft has no confidence head to calibrate")
        if args.score is not None:
            score_file(args, cli.command_line(ap, argv), decoder, tok, items)
            return 0
        test_prompts = pick_test_prompts(len(items), args.test_fraction)  # before the decoding
        n_test = len(test_prompts)
        (logits, accepted), test = split(
            collect(decoder, tok, items, args.max_new_tokens), test_prompts
        )
        result = fit_sts(
            logits, accepted, dataset=str(args.prompts), min_per_class=args.min_per_class
        )
    except (ValueError, FileNotFoundError, NotImplementedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    fitted = score_sts(logits, accepted, result.temperatures)  # the fit's own figures, and more
    report = {
        "command": cli.command_line(ap, argv),
        "prompts": str(args.prompts),
        "temperatures": result.temperatures,
        "notes": result.notes,
        "fit": {"prompts": len(items) - n_test, **fitted},
        # the served temperatures are fitted on the fit split only
    }
    print(f"{len(items)} prompts: fitted on {len(items) - n_test}, tested on {n_test}")
    _table(
        f"fit split ({len(items) - n_test} prompts, {fitted['num_samples']} blocks; in-sample)",
        fitted,
        result.temperatures,
        result.notes,
    )
    if test is not None:
        scores = score_sts(*test, result.temperatures)
        report["test"] = {"prompts": n_test, **scores}
        _table(
            f"test split ({n_test} prompts, {scores['num_samples']} blocks; not fitted on)",
            scores,
            result.temperatures,
            [n if n == "fitted" else "kept T=1.0 (see the fit split)" for n in result.notes],
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result.sglang_json(), indent=1))
    _write_report(args.report, report)
    print(f"wrote {args.out}" + (f" and {args.report}" if args.report else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
