"""Generate with a trained draft and its target, losslessly.

    python -m serving.generate --checkpoint RUN/checkpoints/step-N --prompt "What is 7 x 8?"
        [--temperature T] [--max-new-tokens N] [--seed S] [--json] [--block-size G] [...]

(`--help` lists every flag with its default: the model flags --target --device --dtype and the
decoding flags --block-size --scheduler --threshold --sps --sts --verify-widths --runtime.)

The target defaults to the model directory the checkpoint was trained against (its meta.json);
`--target` must have the same shape. `--json` prints one object: token_ids, text,
accept_lengths (tokens emitted per step, bonus included), steps.
"""

from __future__ import annotations

import json
import sys

from splitserve.target.chat import prompt_ids

from . import cli
from .loading import add_decoding_args, add_model_args, decoder_from_args


def build_parser():
    """This CLI's flags (its --help)."""
    ap = cli.parser("generate", "Lossless speculative generation with a SplitServe draft")
    add_model_args(ap)
    add_decoding_args(ap)
    ap.add_argument("--prompt", required=True, help="the user message to answer")
    ap.add_argument(
        "--temperature", type=cli.TEMPERATURE, default=0.0, help="0: greedy; else sampling"
    )
    ap.add_argument("--max-new-tokens", type=cli.POSITIVE, default=128, help="tokens to generate")
    ap.add_argument("--seed", type=cli.NON_NEGATIVE, default=0, help="sampling seed")
    ap.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (token_ids, text, accept_lengths, steps) instead of the text",
    )
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        decoder, tok = decoder_from_args(args)
    except (ValueError, FileNotFoundError, NotImplementedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    prompt = prompt_ids(tok, [{"role": "user", "content": args.prompt}])
    res = decoder.generate(
        prompt,
        args.max_new_tokens,
        temperature=args.temperature,
        eos_token_id=tok.eos_token_id,
        seed=args.seed,
    )
    text = tok.decode(res.token_ids, skip_special_tokens=True)
    if args.json:
        print(
            json.dumps(
                {
                    "token_ids": res.token_ids,
                    "text": text,
                    "accept_lengths": res.accept_lengths,
                    "steps": res.steps,
                }
            )
        )
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
