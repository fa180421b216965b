"""Profile the step rate by verify width on this device and write the SPS table SGLang reads.

    python -m serving.profile_sps --out sps.json [--target DIR] [--widths 1 2 4 8 16] \
        [--context 512] [--repeats 5] [--runtime auto|eager|static] [--compile]
    python -m serving.profile_sps --out sps.json --checkpoint CKPT [--widths 1 2 ... gamma+1] \
        [--context 512] [--repeats 5] [--new-tokens 256] [--runtime ...] [--compile] [--device]
        [--dtype]

Without `--checkpoint`, the target's verify step alone: for each width B the target runs B tokens
over a KV cache already holding `--context` tokens on the engine decoding uses (`--runtime`, as
serving.generate picks it: the static runtime's CUDA graphs on a GPU where the target is of
one of its families), then the cache is rewound; the median over repeats gives steps per second. The
default target is the embedded SmolLM2.

With `--checkpoint`, the whole speculative decode step of serving.decoder at each width: the
draft's proposal, the verify of B tokens, acceptance and the draft's commit, host work included
(a fixed schedule of B - 1 drafts; two requests after a `--context`-token prompt, of
`--new-tokens` and half as many tokens: their difference in time over their difference in
steps). That is the cost the prefix scheduler weighs (the paper's
"engine steps per second"): where a small target's verify costs little beside the draft and the
host, a verify-only table makes a step without drafts look cheaper than it is. The whole-step
table is of one request on this repository's decoder; SGLang's batched engine has other step
costs, so a table meant for `serving.export --sps` / SGLang should be profiled on SGLang
(`sglang.benchmark.dspark_sps_profiler`) or be the verify-only one.
"""

from __future__ import annotations

import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch

from splitserve import checkpoint
from splitserve.target.models import load_causal_lm
from splitserve.target.runtime.engines import RUNTIMES, make_engine

from . import cli
from .decoder import MAX_LEN
from .loading import add_compile_arg, add_device_args, load_decoder, pick_device
from .scheduler import SchedulerConfig
from .sps import SpsTable


def _synced(fn, device) -> tuple[float, object]:
    """(wall seconds, result) of fn(), the device's queued work included on both ends."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0, out


def profile(
    target,
    widths: list[int],
    context: int,
    repeats: int,
    device,
    runtime: str = "eager",
    compile: bool = False,
) -> SpsTable:
    """Verify steps/s by width on the engine `runtime` makes of `target` (as decoding does;
    `compile`: as decoding with --compile does)."""
    if not widths or widths != sorted(set(widths)) or widths[0] < 1:
        raise ValueError(f"--widths must be strictly increasing integers >= 1, got {widths}")
    if context < 1 or repeats < 1:
        raise ValueError("--context and --repeats must be >= 1")
    vocab = target.config.get_text_config().vocab_size
    # the decoder's cache length: the static engine attends over the same length bucket
    max_len = max(MAX_LEN, context + widths[-1] + 1)
    engine = make_engine(
        target, [], runtime, max_len=max_len, widths=list(widths), compile_step=compile
    )
    print(f"engine {type(engine).__name__}, context {context}")
    g = torch.Generator().manual_seed(0)
    rates = []
    with torch.no_grad():
        engine.begin(max_len)
        engine.forward(torch.randint(0, vocab, (context,), generator=g).to(device), 0)
        for w in widths:
            ids = torch.randint(0, vocab, (w,), generator=g).to(device)
            times = []
            for _ in range(repeats + 1):  # the first is a warm-up (and a graph's capture)
                times.append(_synced(partial(engine.forward, ids, context), device)[0])
                engine.rewind(w)  # back to `context` cached tokens
            rates.append(1.0 / statistics.median(times[1:]))
        engine.close()
    return SpsTable(list(widths), rates, widths[-1])


def _fixed_steps(widths: list[int], w: int) -> int:
    """The steps of one request that ran at width w: all of them but a tail narrowed by the token
    budget (each narrower than w). Anything else means the fixed schedule did not hold."""
    body = list(widths)
    while body and body[-1] < w:
        body.pop()
    if any(x != w for x in body):
        raise ValueError(
            f"width {w}: a timed request ran at widths {sorted(set(widths))}, not at {w} but "
            "for its budget-narrowed last steps"
        )
    return len(body)


def profile_steps(decoder, widths: list[int], context: int, repeats: int, new_tokens: int):
    """Whole speculative decode steps/s by verify width (see the module docstring). A step's
    time is the difference of two requests, `new_tokens` and half as many after the same prompt,
    over the difference of their steps: the prefill is in both and cancels. Each request ends in
    a step or two narrowed by its token budget (cheaper, if anything, than a step at w); the
    difference has at least 4 steps at w, and the net count of narrowed ones in it is printed."""
    if not widths or widths != sorted(set(widths)) or widths[0] < 1:
        raise ValueError(f"--widths must be strictly increasing integers >= 1, got {widths}")
    if widths[-1] > decoder.gamma + 1:
        raise ValueError(
            f"--widths {widths}: a step of this draft verifies at most gamma + 1 = "
            f"{decoder.gamma + 1} tokens"
        )
    if missing := [w for w in widths if w not in decoder.verify_widths]:
        raise ValueError(f"--widths {missing}: not verify widths of this decoder")
    if context < 1 or repeats < 1 or new_tokens < 4 * widths[-1]:
        raise ValueError(
            f"--context and --repeats must be >= 1 and --new-tokens >= 4 x the largest width "
            f"({4 * widths[-1]})"
        )
    vocab = decoder.target.config.get_text_config().vocab_size
    prompt = torch.randint(0, vocab, (context,), generator=torch.Generator().manual_seed(0))
    prompt = prompt.tolist()

    def timed(n: int):
        return _synced(partial(decoder.generate, prompt, n), decoder.device)

    print(f"whole decode steps, context {context}, {new_tokens} new tokens per request")
    rates, kept = [], decoder.scheduler
    try:
        for w in widths:
            decoder.scheduler = SchedulerConfig("fixed", length=w - 1)
            per_step, narrowed = [], 0
            for _ in range(repeats + 1):  # the first is a warm-up (and the graphs' captures)
                long_s, long_res = timed(new_tokens)
                short_s, short_res = timed(new_tokens // 2)
                at_w = _fixed_steps(long_res.widths, w) - _fixed_steps(short_res.widths, w)
                steps = long_res.steps - short_res.steps
                if at_w < 4:  # a draft that accepts everything needs new_tokens >= 8 w
                    raise ValueError(
                        f"width {w}: the longer request ran only {at_w} more steps at width {w} "
                        "than the shorter one; raise --new-tokens"
                    )
                narrowed += abs(steps - at_w)
                per_step.append(max(long_s - short_s, 1e-9) / steps)
            rates.append(1.0 / statistics.median(per_step[1:]))
            print(
                f"  width {w}: {narrowed} budget-narrowed steps in the differences of "
                f"{repeats + 1} request pairs"
            )
    finally:
        decoder.scheduler = kept
    return SpsTable(list(widths), rates, widths[-1])


def build_parser():
    """This CLI's flags (its --help)."""
    ap = cli.parser(
        "profile_sps",
        "Profile steps/s by verify width (the target's verify, or with --checkpoint whole "
        "speculative steps); write SGLang's SPS table JSON",
    )
    ap.add_argument("--out", required=True, type=Path, help="the SPS JSON to write")
    ap.add_argument(
        "--target",
        type=Path,
        help="HF model directory (default: the embedded SmolLM2 target; with --checkpoint, the "
        "target it was trained against)",
    )
    ap.add_argument(
        "--widths",
        type=cli.POSITIVE,
        nargs="+",
        help="verify widths to time, strictly increasing (default: 1 2 4 8 16; with "
        "--checkpoint every width from 1 to gamma + 1)",
    )
    ap.add_argument(
        "--context", type=cli.POSITIVE, default=512, help="tokens already in the KV cache"
    )
    ap.add_argument("--repeats", type=cli.POSITIVE, default=5, help="timed runs per width")
    ap.add_argument(
        "--checkpoint",
        type=Path,
        help="a draft checkpoint (or run directory): time whole speculative decode steps with it",
    )
    ap.add_argument(
        "--new-tokens",
        type=cli.int_at_least(2),
        default=256,
        help="with --checkpoint: tokens decoded by the longer of each pair of timed requests "
        "(the shorter decodes half); at least 8 x the largest width where the draft is "
        "accepted in full, as on a repetitive continuation",
    )
    add_device_args(ap)
    ap.add_argument(
        "--runtime",
        default="auto",
        choices=list(RUNTIMES),
        help="the engine timed, as decoding picks it: static = static KV cache and one CUDA "
        "graph per width (the static families, on a GPU); auto: static where it applies",
    )
    add_compile_arg(ap)
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        if args.checkpoint is not None:
            decoder, _ = load_decoder(
                checkpoint.resolve(args.checkpoint),
                args.target,
                scheduler=SchedulerConfig("fixed"),
                device=args.device,
                dtype=args.dtype,
                runtime=args.runtime,
                compile=args.compile,
            )
            widths = args.widths or list(range(1, decoder.gamma + 2))
            table = profile_steps(decoder, widths, args.context, args.repeats, args.new_tokens)
        else:
            if args.target is None:
                from splitserve.target.embedded import ensure_smollm2

                args.target = ensure_smollm2()
            if not (args.target / "config.json").is_file():
                raise FileNotFoundError(
                    f"{args.target} is not a HF model directory (no config.json)"
                )
            device = pick_device(args.device)
            target = load_causal_lm(args.target, device, args.dtype)
            widths = args.widths or [1, 2, 4, 8, 16]
            table = profile(
                target, widths, args.context, args.repeats, device, args.runtime, args.compile
            )
    except (ValueError, FileNotFoundError, NotImplementedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.out.write_text(table.to_json())
    for w, r in zip(table.sample_batch_tokens, table.sample_steps_per_sec, strict=True):
        print(f"width {w:>4}: {r:8.1f} steps/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
