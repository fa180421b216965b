"""Generate with a trained draft and its target, losslessly.

    python -m serving.generate --checkpoint RUN/checkpoints/step-N --prompt "What is 7 x 8?"
        [--target DIR] [--temperature T] [--max-new-tokens N] [--block-size G]
        [--scheduler fixed|threshold|prefix] [--sps sps.json] [--sts sts.json] [--device auto] [--json]

The target defaults to the model directory the checkpoint was trained against (its meta.json);
`--target` must have the same shape. `--json` prints one object: token_ids, text,
accept_lengths (tokens emitted per step, bonus included), steps.
"""

from __future__ import annotations

import argparse
import json
import sys

from .loading import add_decoder_args, chat_ids, decoder_from_args


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Lossless speculative generation with a SplitServe draft")
    add_decoder_args(ap)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        decoder, tok = decoder_from_args(args)
    except (ValueError, FileNotFoundError, NotImplementedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    prompt = chat_ids(tok, [{"role": "user", "content": args.prompt}])
    res = decoder.generate(prompt, args.max_new_tokens, temperature=args.temperature,
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
