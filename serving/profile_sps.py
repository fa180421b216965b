"""Profile the verify step rate by width on this device and write the SPS table SGLang reads.

    python -m serving.profile_sps --out sps.json [--target DIR] [--widths 1 2 4 8 16] \
        [--context 512] [--repeats 5] [--runtime auto|eager|static]

For each width B, the target runs B tokens over a KV cache already holding `--context` tokens
on the engine decoding uses (`--runtime`, as serving.generate picks it: the static runtime's
CUDA graphs on a GPU where the target is Llama-family), then the cache is rewound;
the median over repeats gives steps per second. The default target is the embedded SmolLM2.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

from splitserve.target.models import load_causal_lm
from splitserve.target.runtime.engines import RUNTIMES, make_engine

from . import cli
from .decoder import MAX_LEN
from .sps import SpsTable


def profile(
    target, widths: list[int], context: int, repeats: int, device, runtime: str = "eager"
) -> SpsTable:
    """Verify steps/s by width on the engine `runtime` makes of `target` (as decoding does)."""
    if not widths or widths != sorted(set(widths)) or widths[0] < 1:
        raise ValueError(f"--widths must be strictly increasing integers >= 1, got {widths}")
    if context < 1 or repeats < 1:
        raise ValueError("--context and --repeats must be >= 1")
    vocab = target.config.get_text_config().vocab_size
    # the decoder's cache length: the static engine attends over the same length bucket
    max_len = max(MAX_LEN, context + widths[-1] + 1)
    engine = make_engine(target, [], runtime, max_len=max_len, widths=list(widths))
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
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                engine.forward(ids, context)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
                engine.rewind(w)  # back to `context` cached tokens
            rates.append(1.0 / statistics.median(times[1:]))
        engine.close()
    return SpsTable(list(widths), rates, widths[-1])


def build_parser():
    """This CLI's flags (its --help)."""
    ap = cli.parser("profile_sps", "Profile verify steps/s by width; write SGLang's SPS table JSON")
    ap.add_argument("--out", required=True, type=Path, help="the SPS JSON to write")
    ap.add_argument(
        "--target", type=Path, help="HF model directory (default: the embedded SmolLM2 target)"
    )
    ap.add_argument(
        "--widths",
        type=cli.POSITIVE,
        nargs="+",
        default=[1, 2, 4, 8, 16],
        help="verify widths to time, strictly increasing",
    )
    ap.add_argument(
        "--context", type=cli.POSITIVE, default=512, help="tokens already in the KV cache"
    )
    ap.add_argument("--repeats", type=cli.POSITIVE, default=5, help="timed steps per width")
    ap.add_argument(
        "--runtime",
        default="auto",
        choices=list(RUNTIMES),
        help="the engine timed, as decoding picks it: static = static KV cache and one CUDA "
        "graph per width (Llama-family targets on a GPU); auto: static where it applies",
    )
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        if args.target is None:
            from splitserve.target.embedded import ensure_smollm2

            args.target = ensure_smollm2()
        if not (args.target / "config.json").is_file():
            raise FileNotFoundError(f"{args.target} is not a HF model directory (no config.json)")
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        target = load_causal_lm(args.target, device, "auto")
        table = profile(target, args.widths, args.context, args.repeats, device, args.runtime)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.out.write_text(table.to_json())
    for w, r in zip(table.sample_batch_tokens, table.sample_steps_per_sec, strict=True):
        print(f"width {w:>4}: {r:8.1f} steps/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
