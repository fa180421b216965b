"""Write the prompts a run's data config holds out, as a jsonl_chat file of prompts, leaving out
any found in the given training files.

    python scripts/held_out_prompts.py --out prompts.jsonl [--exclude TRAIN.jsonl]... \
        [--limit N] [overrides, e.g. +recipe=smol_gpu]

Why: `serving.calibrate --prompts FILE` needs prompts the draft never trained on, and an exported
draft keeps no run config to name them. A recipe holds the last `data.eval_prompts` prompts of
each source out of regeneration and training, but a source may repeat a prompt's text (ShareGPT
does) and drafts trained before `data.hold_out=prompts` (2026-12-04) trained on such repeats:
`--exclude` takes the files a draft was trained on (jsonl_chat, e.g. its regenerated files) and
leaves out every held-out prompt found there, so the file holds only prompts checked unseen.
A prompt is its turns before the first answer, system turns included (as `data.prompt_key`
compares them); calibrate decodes from its first user message.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from serving import cli  # noqa: E402
from splitserve.data import load_prompts, prompt_key, prompt_turns, read_jsonl_chat  # noqa: E402
from splitserve.regenerate import compose_run_config  # noqa: E402


def build_parser():
    ap = cli.script_parser(__file__, __doc__)
    ap.add_argument("--out", type=Path, required=True, help="jsonl_chat file to write (new)")
    ap.add_argument(
        "--exclude",
        type=Path,
        action="append",
        default=[],
        help="a jsonl_chat file the draft trained on (repeat it for several): its prompts are "
        "left out",
    )
    ap.add_argument("--limit", type=cli.POSITIVE, help="at most this many prompts (default: all)")
    ap.add_argument("overrides", nargs="*", help="the run's Hydra overrides, e.g. +recipe=smol_gpu")
    return ap


def held_out(overrides: list[str], exclude: list[Path]) -> tuple[list, int]:
    """(the held-out conversations whose prompt is in no `exclude` file, how many were left out)."""
    held = load_prompts(compose_run_config(overrides).data).eval
    seen = {prompt_key(c) for path in exclude for c in read_jsonl_chat(path)}
    kept = [c for c in held if prompt_key(c) not in seen]
    return kept, len(held) - len(kept)


def main(argv=None) -> int:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    args = build_parser().parse_args(argv)
    if args.out.exists():
        print(f"error: {args.out} exists; it is never overwritten", file=sys.stderr)
        return 2
    try:
        for path in args.exclude:
            if not path.is_file():
                raise FileNotFoundError(f"--exclude {path} does not exist")
        kept, dropped = held_out(args.overrides, args.exclude)
    except (ValueError, FileNotFoundError, HydraException, OmegaConfBaseException) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    kept = kept[: args.limit]
    if not kept:
        print("error: no held-out prompt is left to write", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"messages": prompt_turns(c)}, ensure_ascii=False) + "\n" for c in kept]
    args.out.write_text("".join(lines), encoding="utf-8")
    print(
        f"wrote {len(kept)} held-out prompts to {args.out} ({dropped} left out: found in the "
        "--exclude files)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
