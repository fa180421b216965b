"""Print (or run) the SGLang 0.5.23 command that serves a target with an exported DSpark draft.

    python -m serving.launch --target /models/Ling-3.0-flash --draft draft_for_sglang \
        [--python /envs/sglang/bin/python] [--tp-size 4] [--port 30000] [--exec]

The command starts with `python` (SGLang lives in an environment of its own, not this
project's): `--python` names the interpreter SGLang is installed in, which `--exec` runs. The
draft directory is what `python -m serving.export` wrote; its `sps.json` / `sts.json`, when
present, are passed to SGLang (and `SGLANG_RAGGED_VERIFY_MODE=compact`, which makes the scheduler
trim verify tokens, needs the SPS table). Where sglang is importable the flags are validated by
sglang's own argument parser (`prepare_server_args`) before anything is printed or run.
UNVERIFIED end to end: SGLang cannot run on the machines this project is developed on.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from draft_models.config_io import read_json
from draft_models.formats import SGLANG_PRUNED
from splitserve import checkpoint

from . import cli


def build_command(
    target: str, draft: Path, tp_size: int = 1, port: int = 30000, extra: list[str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """(argv after `python -m sglang.launch_server`, extra environment). The draft is named by
    its absolute path: the command runs from SGLang's own environment, likely elsewhere."""
    draft = Path(draft).resolve()
    for name in ("config.json", *checkpoint.weight_files(draft)):  # one file or index + shards
        if not (draft / name).is_file():
            raise FileNotFoundError(
                f"{draft / name} is missing: pass a directory written by `python -m serving.export`"
            )
    config = read_json(draft / "config.json", "exported draft config")
    if config.get("speculators_model_type") is not None:
        raise ValueError(
            f"{draft} is a draft in vLLM speculators' layout "
            f"(speculators_model_type={config['speculators_model_type']!r}), which SGLang "
            "0.5.23's DSPARK does not read (nested config; slot k predicts anchor+k): export "
            "the checkpoint with `python -m serving.export --checkpoint CKPT --out DIR` (sglang, "
            "the default)"
        )
    if not any(a.endswith("DSparkModel") for a in config.get("architectures", [])):
        raise ValueError(
            f"{draft}/config.json is not a DSpark draft "
            f"(architectures={config.get('architectures')})"
        )
    k = config.get("draft_vocab_size")
    if k and config.get("vocab_size") and k < config["vocab_size"]:
        raise ValueError(f"{draft}: " + SGLANG_PRUNED.format(k=k, v=config["vocab_size"]))
    argv = [
        "--model-path",
        str(target),
        "--speculative-algorithm",
        "DSPARK",
        "--speculative-draft-model-path",
        str(draft),
        "--speculative-dspark-block-size",
        str(config["block_size"]),
        "--tp-size",
        str(tp_size),
        "--port",
        str(port),
    ]
    env: dict[str, str] = {}
    if (draft / "sps.json").is_file():
        argv += ["--speculative-dspark-sps-table-path", str(draft / "sps.json")]
        env["SGLANG_RAGGED_VERIFY_MODE"] = "compact"
    if (draft / "sts.json").is_file():
        argv += ["--speculative-dspark-confidence-sts-path", str(draft / "sts.json")]
    return argv + list(extra or []), env


def shell_line(argv: list[str], env: dict[str, str], python: str = "python") -> str:
    """The command line that serves (`build_command`'s argv and environment), as printed by this
    CLI and by serving.export: the interpreter is SGLang's, named by `python`."""
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    command = shlex.join([python, "-m", "sglang.launch_server", *argv])
    return f"{prefix} {command}" if prefix else command


def validate_with_sglang(argv: list[str]) -> bool:
    """Parse the flags with sglang's own parser; False when sglang is not importable here."""
    try:
        from sglang.srt.server_args import prepare_server_args
    except ImportError:
        return False
    prepare_server_args(argv)
    return True


def build_parser():
    """This CLI's flags (its --help)."""
    ap = cli.parser("launch", "Serve a target with an exported DSpark draft through SGLang 0.5.23")
    ap.add_argument(
        "--target", required=True, help="target model directory (as sglang's --model-path)"
    )
    ap.add_argument(
        "--draft", required=True, type=Path, help="directory written by `python -m serving.export`"
    )
    ap.add_argument("--tp-size", type=cli.POSITIVE, default=1, help="tensor parallel GPUs")
    ap.add_argument("--port", type=cli.int_at_least(1, 65535), default=30000, help="server port")
    ap.add_argument(
        "--python",
        default="python",
        help="the interpreter of the environment SGLang is installed in (printed, and run by "
        "--exec)",
    )
    ap.add_argument(
        "--exec", action="store_true", help="run the command (with --python) instead of printing it"
    )
    return ap


def main(args_in=None) -> int:
    ap = build_parser()
    args, extra = ap.parse_known_args(args_in)
    try:
        if not Path(args.target).exists():
            raise FileNotFoundError(f"--target {args.target} does not exist")
        python = shutil.which(args.python)  # a name on PATH, or a path to an executable
        if python is None and (args.exec or os.sep in args.python):
            raise FileNotFoundError(f"--python {args.python} is not an executable interpreter")
        argv, env = build_command(args.target, args.draft, args.tp_size, args.port, extra)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    validated = validate_with_sglang(argv)
    print(shell_line(argv, env, args.python))
    if not validated:
        print(
            "note: sglang is not importable by this interpreter; flags not validated by "
            "sglang's parser",
            file=sys.stderr,
        )
    if args.exec:
        command = [python, "-m", "sglang.launch_server", *argv]
        os.execve(python, command, {**os.environ, **env})
    return 0


if __name__ == "__main__":
    sys.exit(main())
