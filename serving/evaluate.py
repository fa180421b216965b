"""Measure what a draft delivers at decode time, against target-only decoding in the same run.

    python -m serving.evaluate --checkpoint RUN/checkpoints/step-N --bench gsm8k,mtbench,humaneval
        [--limit N] [--temperature T] [--max-new-tokens N] [--out DIR]
        [decoder flags as serving.generate]

Per benchmark it writes and prints one JSON object: tau (mean tokens emitted per decode step,
bonus included), conditional acceptance by draft position (accepted / reached, where a position
is reached when it was verified and every earlier draft was accepted), the fraction of verified
draft tokens that were rejected, mean verify width, step time and tokens/s of speculative and of
target-only decoding (same target, same prompts, same process), and for greedy decoding how many
outputs equal the target-only output; `draft_step_ms` is the median time of one draft proposal.
`acceptance.png` plots acceptance by position. The default --out is RUN/eval/step-N-tT.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from splitserve.target.chat import prompt_ids

from . import cli
from .benchmarks import load_bench
from .decoder import DecodeResult, SpeculativeDecoder
from .loading import add_decoding_args, add_model_args, decoder_from_args


@dataclass
class Tally:
    """Running sums over every decode step of one benchmark."""

    gamma: int
    tokens: int = 0
    emitted: int = 0  # tokens emitted by decode steps (all but the prefill's first token)
    steps: int = 0
    wall_s: float = 0.0
    verified: int = 0
    accepted: int = 0
    width_sum: int = 0
    reached: list[int] = field(default_factory=list)
    hits: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.reached, self.hits = [0] * self.gamma, [0] * self.gamma

    def speed(self) -> dict:
        return {
            "tokens": self.tokens,
            "steps": self.steps,
            "wall_s": self.wall_s,
            "step_ms": 1000 * self.wall_s / max(1, self.steps),
            "tokens_per_s": self.tokens / self.wall_s,
        }

    def add(self, res: DecodeResult, wall_s: float) -> None:
        self.tokens += len(res.token_ids)
        self.steps += res.steps
        self.emitted += sum(res.accept_lengths)
        self.wall_s += wall_s
        self.verified += sum(res.verified)
        self.accepted += sum(res.accepted)
        self.width_sum += sum(res.widths)
        for n_ver, n_acc in zip(res.verified, res.accepted, strict=True):
            for k in range(min(n_ver, n_acc + 1)):
                self.reached[k] += 1
                self.hits[k] += int(k < n_acc)


def _timed(
    decoder: SpeculativeDecoder, ids: list[int], args, eos: int, seed: int
) -> tuple[DecodeResult, float]:
    if decoder.device.type == "cuda":
        torch.cuda.synchronize(decoder.device)
    t0 = time.perf_counter()
    res = decoder.generate(
        ids, args.max_new_tokens, temperature=args.temperature, eos_token_id=eos, seed=seed
    )
    if decoder.device.type == "cuda":
        torch.cuda.synchronize(decoder.device)
    return res, time.perf_counter() - t0


def run_bench(
    decoder: SpeculativeDecoder, tok, items: list[list[str]], args, desc: str = ""
) -> dict:
    baseline = SpeculativeDecoder(
        decoder.target, None, runtime=decoder.runtime, max_len=decoder.max_len
    )
    spec, base = Tally(decoder.gamma), Tally(1)
    identical = turns = 0
    for i, item in enumerate(tqdm(items, desc=desc, unit="item", dynamic_ncols=True)):
        spec_msgs, base_msgs = [], []
        for turn in item:
            spec_msgs.append({"role": "user", "content": turn})
            base_msgs.append({"role": "user", "content": turn})
            seed = args.seed + i
            res, wall = _timed(decoder, prompt_ids(tok, spec_msgs), args, tok.eos_token_id, seed)
            ref, ref_wall = _timed(
                baseline, prompt_ids(tok, base_msgs), args, tok.eos_token_id, seed
            )
            spec.add(res, wall)
            base.add(ref, ref_wall)
            turns += 1
            identical += int(res.token_ids == ref.token_ids)
            spec_msgs.append(
                {
                    "role": "assistant",
                    "content": tok.decode(res.token_ids, skip_special_tokens=True),
                }
            )
            base_msgs.append(
                {
                    "role": "assistant",
                    "content": tok.decode(ref.token_ids, skip_special_tokens=True),
                }
            )
    report = {
        "items": len(items),
        "turns": turns,
        "temperature": args.temperature,
        "max_new_tokens": args.max_new_tokens,
        "block_size": decoder.gamma,
        "scheduler": decoder.scheduler.mode,
        "tau": spec.emitted / max(1, spec.steps),
        "acceptance_by_position": [
            h / r if r else None for h, r in zip(spec.hits, spec.reached, strict=True)
        ],
        "reached_by_position": spec.reached,
        "wasted_verify_fraction": (spec.verified - spec.accepted) / spec.verified
        if spec.verified
        else 0.0,
        "mean_verify_width": spec.width_sum / max(1, spec.steps),
        "speculative": spec.speed(),
        "target_only": base.speed(),
    }
    report["speedup"] = (
        report["speculative"]["tokens_per_s"] / report["target_only"]["tokens_per_s"]
    )
    report["draft_step_ms"] = 1000 * decoder.draft_step_seconds(
        prompt_ids(tok, [{"role": "user", "content": items[0][0]}])
    )
    if args.temperature == 0:
        report["identical_to_target_only"] = f"{identical}/{turns}"
    return report


def plot_acceptance(reports: dict[str, dict], path: Path, title: str) -> dict:
    """Conditional acceptance by draft position, one line per benchmark. Positions no step ever
    reached (every earlier draft was never all accepted) are drawn as hollow markers at zero
    and labelled, so a short curve is not mistaken for missing data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    gamma = max(len(r["acceptance_by_position"]) for r in reports.values())
    unreached_labelled = False
    for bench, r in reports.items():
        ys = r["acceptance_by_position"]
        reached = [(k + 1, y) for k, y in enumerate(ys) if y is not None]
        line = ax.plot(
            [k for k, _ in reached],
            [y for _, y in reached],
            marker="o",
            label=f"{bench} (tau {r['tau']:.2f}, {r['turns']} answers)",
        )[0]
        missing = [k + 1 for k, y in enumerate(ys) if y is None]
        if missing:
            ax.plot(
                missing,
                [0.0] * len(missing),
                linestyle="none",
                marker="o",
                markersize=9,
                markerfacecolor="white",
                markeredgecolor=line.get_color(),
                label=None if unreached_labelled else "never reached (drawn at 0)",
            )
            unreached_labelled = True
    ax.set_xticks(range(1, gamma + 1))
    ax.set_xlabel("draft position k (1 = the first drafted token)")
    ax.set_ylabel("acceptance rate at k, given 1..k-1 accepted")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return {
        "xticks": [float(t) for t in ax.get_xticks()],
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "unreached": {
            b: [k + 1 for k, y in enumerate(r["acceptance_by_position"]) if y is None]
            for b, r in reports.items()
        },
    }


def build_parser():
    """This CLI's flags (its --help)."""
    ap = cli.parser(
        "evaluate", "Evaluate a draft: tau, acceptance by position, speed vs target-only"
    )
    add_model_args(ap)
    add_decoding_args(ap)
    ap.add_argument(
        "--bench",
        default="gsm8k,mtbench,humaneval",
        help="comma-separated: gsm8k, mtbench, humaneval",
    )
    ap.add_argument("--limit", type=cli.POSITIVE, default=20, help="items per benchmark")
    ap.add_argument(
        "--temperature", type=cli.TEMPERATURE, default=0.0, help="0: greedy; else sampling"
    )
    ap.add_argument("--max-new-tokens", type=cli.POSITIVE, default=256, help="tokens per answer")
    ap.add_argument("--seed", type=cli.NON_NEGATIVE, default=0, help="sampling seed of item 0")
    ap.add_argument("--out", type=Path, help="output directory (default: RUN/eval/step-N-tT)")
    ap.add_argument(
        "--no-plot", action="store_true", help="skip acceptance.png (no matplotlib needed)"
    )
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    benches = [b for b in args.bench.split(",") if b]
    try:
        items = {b: load_bench(b, args.limit) for b in benches}
        decoder, tok = decoder_from_args(args)
    except (ValueError, FileNotFoundError, NotImplementedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ckpt = args.checkpoint.resolve()
    out = args.out or ckpt.parent.parent / "eval" / f"{ckpt.name}-t{args.temperature:g}"
    out.mkdir(parents=True, exist_ok=True)
    reports = {}
    for bench in benches:
        report = {
            "bench": bench,
            "checkpoint": str(ckpt),
            **run_bench(decoder, tok, items[bench], args, bench),
        }
        (out / f"{bench}.json").write_text(json.dumps(report, indent=1))
        print(json.dumps(report))
        reports[bench] = report
    if not args.no_plot:
        plot_acceptance(
            reports,
            out / "acceptance.png",
            f"{ckpt.parent.parent.name}/{ckpt.name}, T={args.temperature:g}",
        )
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
