"""What every serving CLI shares: its parser (usage reads `python -m serving.X`, every flag's help
shows its default) and argument types that refuse out-of-range numbers, naming the flag and the
allowed range (argparse then exits with code 2 before anything is loaded)."""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path


class _HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: X)" to a flag's help, unless there is no default to show (None, a
    store_true flag) or the help already says what the default is."""

    def _get_help_string(self, action):
        text = action.help or ""
        no_default = action.default is None or action.default is False
        if no_default or action.default is argparse.SUPPRESS or "default" in text:
            return text
        return super()._get_help_string(action)


def parser(module: str, description: str) -> argparse.ArgumentParser:
    """The parser of `python -m serving.<module>`."""
    return argparse.ArgumentParser(
        prog=f"python -m serving.{module}",
        description=description,
        formatter_class=_HelpWithDefaults,
    )


def script_prog(path: str) -> str:
    """The prog of a benchmark script's parser, from its own file (`python scripts/X.py`), so
    the command its report records cannot drift from the script's name."""
    return f"python scripts/{Path(path).name}"


def script_parser(path: str, doc: str) -> argparse.ArgumentParser:
    """A benchmark script's parser: its prog from its file (script_prog), its description the
    first line of its docstring, defaults shown in --help."""
    return argparse.ArgumentParser(
        prog=script_prog(path),
        description=doc.split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )


def command_line(ap: argparse.ArgumentParser, argv: list[str] | None) -> str:
    """The command that ran (the parser's prog, `python -m serving.X` or `python scripts/X.py`,
    and its flags, shell-quoted), for a report: its figures can then be reproduced from the
    report alone. Every serving module and benchmark script records it this way."""
    return f"{ap.prog} {shlex.join(sys.argv[1:] if argv is None else argv)}".rstrip()


def int_at_least(low: int, high: int | None = None):
    """argparse type: an integer in [low, high] (no upper bound when high is None)."""
    allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {allowed}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} is out of range: allowed {allowed}")
        return value

    parse.__name__ = "int"
    return parse


def float_in(low: float, high: float = math.inf, *, low_open: bool = False):
    """argparse type: a finite number in [low, high] (or (low, high] with low_open)."""
    left = "(" if low_open else "["
    allowed = (
        f"a number >= {low:g}" if high == math.inf else f"a number in {left}{low:g}, {high:g}]"
    )
    if low_open and high == math.inf:
        allowed = f"a number > {low:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {allowed}") from None
        too_low = value <= low if low_open else value < low
        if not math.isfinite(value) or too_low or value > high:
            raise argparse.ArgumentTypeError(f"{value:g} is out of range: allowed {allowed}")
        return value

    parse.__name__ = "float"
    return parse


POSITIVE = int_at_least(1)
NON_NEGATIVE = int_at_least(0)
TEMPERATURE = float_in(0.0)
PROBABILITY = float_in(0.0, 1.0)
