"""Paired bootstrap intervals over benchmark items: is a difference in tau between two drafts
larger than the spread of the items they were measured on?

Both drafts decoded the same items, so each bootstrap draw takes the same items (with
replacement) for both and recomputes tau as emitted tokens over decode steps of the drawn
items. Used by serving.ablation_report (each job against the first, and the macro ratio) and
by hand on a study's reports (`compare_parts` on two folders of
reports, `compare_folders` on pairs of them, `ratio_of_ratios` over four runs,
`comparison_lines` to print them; `timed_comparison` and `timed_lines` for batch-1 timed
runs). `bootstrap` draws one run's items alone, for a
figure that scales with its tau (the speedup and greedy goals).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

Parts = dict[str, dict[int, tuple[int, int]]]  # bench -> {item: (emitted, steps)}


def item_parts(report: dict) -> dict[int, tuple[int, int]] | None:
    """{item: (emitted, steps)} of one serving.evaluate report; None when it has no per_item."""
    if "per_item" not in report:
        return None
    return {int(i): (e, n) for i, e, n in report["per_item"]}


def folder_parts(folder: Path, benches: list[str]) -> Parts:
    """bench -> {item: (emitted, steps)} from the `<bench>.json` reports serving.evaluate wrote
    into one folder; a report without per_item is an error (no interval can come from it)."""
    parts = {}
    for bench in benches:
        path = Path(folder) / f"{bench}.json"
        parts[bench] = item_parts(json.loads(path.read_text()))
        if not parts[bench]:
            raise ValueError(f"{path}: no per_item in the report; no interval can come from it")
    return parts


def compare_parts(a: Parts, b: Parts, name: str = "this") -> dict:
    """Draft a against draft b on the same items: each one's tau by bench (under `name` and
    "other"), the macro ratio a / b and each bench's difference a - b, each with its 95 %
    paired interval."""
    ta, tb = ({bench: macro_tau({bench: p[bench]}) for bench in p} for p in (a, b))
    out = {
        name: ta,
        "other": tb,
        "macro_ratio": macro_tau(a) / macro_tau(b),
        "macro_ratio_ci95": paired_bootstrap(a, b, lambda x, y: x / y),
    }
    for bench in a:
        ci = paired_bootstrap({bench: a[bench]}, {bench: b[bench]}, lambda x, y: x - y)
        out[f"{bench}_diff"] = ta[bench] - tb[bench]
        out[f"{bench}_diff_ci95"] = ci
    return out


def compare_folders(
    folders: dict[str, dict[str, Path]],
    pairs: list[tuple[str, str]],
    benches: list[str],
    temps: tuple[str, ...] = ("t1", "t0"),
) -> dict[str, dict]:
    """compare_parts of each pair (a, b) of runs at each temperature, keyed "{a}_vs_{b}_{t}",
    from `folders` {run: {temperature: the folder of its reports}} (the passes' compare.py)."""
    return {
        f"{a}_vs_{b}_{t}": compare_parts(
            folder_parts(folders[a][t], benches), folder_parts(folders[b][t], benches)
        )
        for t in temps
        for a, b in pairs
    }


def ratio_of_ratios(runs: list[Parts]) -> dict:
    """(a / b) / (c / d) of four runs' macro taus with its 95 % interval, the four drawn together:
    e.g. one draft's lead over another at a larger budget over its lead at a smaller one."""
    taus = [macro_tau(r) for r in runs]
    return {
        "ratio_of_ratios": (taus[0] / taus[1]) / (taus[2] / taus[3]),
        "ratio_of_ratios_ci95": paired_bootstrap_runs(runs, lambda a, b, c, d: (a / b) / (c / d)),
    }


def comparison_lines(comparisons: dict[str, dict], name: str = "this") -> list[str]:
    """compare_parts' results, keyed by what was compared, as lines to print: each one's macro
    ratio with its interval, then each bench's taus and difference with its interval; a
    ratio_of_ratios result as one line."""
    lines = []
    for key, c in comparisons.items():
        if "ratio_of_ratios" in c:
            lo, hi = c["ratio_of_ratios_ci95"]
            lines.append(f"{key}: x{c['ratio_of_ratios']:.3f} ({lo:.3f}-{hi:.3f})")
            continue
        lo, hi = c["macro_ratio_ci95"]
        lines.append(f"{key}: macro x{c['macro_ratio']:.3f} ({lo:.3f}-{hi:.3f})")
        for bench, mine in c[name].items():
            d, (lo, hi) = c[f"{bench}_diff"], c[f"{bench}_diff_ci95"]
            other = c["other"][bench]
            lines.append(f"  {bench}: {mine:.3f} vs {other:.3f}, {d:+.3f} ({lo:+.3f}, {hi:+.3f})")
    return lines


def timed_comparison(folder: Path, runs: list[str], pairs: list[tuple[str, str]]) -> dict:
    """Batch-1 timed runs (serving.evaluate on GSM8K with target-only decoding in the same run),
    `folder/<run>/gsm8k.json`: each run's tau, speedup and step costs ("rest" is the speculative
    step less the draft's proposal, an estimate: the timed step is one fused graph), and for
    each pair (a, b) the ratio of their speedups with a 95 % interval over the items, each run's
    step costs held at its own (how step costs move between runs is left out)."""
    reports = {r: json.loads((Path(folder) / r / "gsm8k.json").read_text()) for r in runs}
    speed = {
        r: {
            "tau": rep["tau"],
            "speedup": rep["speedup"],
            "speculative_step_ms": rep["speculative"]["step_ms"],
            "target_only_step_ms": rep["target_only"]["step_ms"],
            "draft_step_ms": rep["draft_step_ms"],
            "rest_of_step_ms": rep["speculative"]["step_ms"] - rep["draft_step_ms"],
        }
        for r, rep in reports.items()
    }
    parts = {r: folder_parts(Path(folder) / r, ["gsm8k"]) for r in runs}
    ratios = {}
    for a, b in pairs:
        sa, sb = speed[a]["speedup"], speed[b]["speedup"]
        ta, tb = macro_tau(parts[a]), macro_tau(parts[b])
        held = (sa / ta) / (sb / tb)  # each speedup scales with its run's tau at its step costs
        ratios[f"{a}_vs_{b}"] = {
            "speedup_ratio": sa / sb,
            "speedup_ratio_ci95": paired_bootstrap(
                parts[a], parts[b], lambda x, y, held=held: held * x / y
            ),
            "tau_ratio": ta / tb,
        }
    return {"runs": speed, "ratios": ratios}


def timed_lines(timed: dict) -> list[str]:
    """timed_comparison's result as lines to print: each run, then each ratio."""
    lines = [
        f"{r}: tau {s['tau']:.3f}, {s['speedup']:.3f}x target-only;"
        f" step {s['speculative_step_ms']:.3f} ms (draft {s['draft_step_ms']:.3f},"
        f" rest {s['rest_of_step_ms']:.3f}), target-only {s['target_only_step_ms']:.3f} ms"
        for r, s in timed["runs"].items()
    ]
    for k, v in timed["ratios"].items():
        lo, hi = v["speedup_ratio_ci95"]
        lines.append(
            f"{k}: speedup x{v['speedup_ratio']:.3f} ({lo:.3f}-{hi:.3f}), tau x{v['tau_ratio']:.3f}"
        )
    return lines


def paired_bootstrap(
    a: Parts, b: Parts, stat: Callable[[float, float], float], n: int = 2000, seed: int = 0
) -> list[float] | None:
    """95 % interval of stat(macro tau of a, macro tau of b), the macro tau being the mean over
    the benches of a (in its order) of each one's tau; None when the two did not decode the
    same benches and items."""
    return paired_bootstrap_runs([a, b], stat, n, seed)


def paired_bootstrap_runs(
    runs: list[Parts], stat: Callable[..., float], n: int = 2000, seed: int = 0
) -> list[float] | None:
    """95 % interval of stat(macro tau of each run, in order), every draw taking the same items
    for all of them: e.g. a ratio of two drafts' ratios at two budgets (four runs). None when
    the runs did not all decode the same benches and items."""
    first = runs[0]
    if any(
        r.keys() != first.keys() or any(r[bench].keys() != first[bench].keys() for bench in r)
        for r in runs[1:]
    ):
        return None
    return _interval(first, lambda draws: stat(*(_macro(r, draws) for r in runs)), n, seed)


def bootstrap(
    a: Parts, stat: Callable[[float], float], n: int = 2000, seed: int = 0
) -> list[float] | None:
    """95 % interval of stat(macro tau of a) over draws of its items: for a figure that scales
    with one run's tau (a speedup at that run's step costs); None when a has no items."""
    if not a or not all(a.values()):
        return None
    return _interval(a, lambda draws: stat(_macro(a, draws)), n, seed)


def speedup_interval(parts: Parts, speedup: float) -> list[float] | None:
    """95 % interval of a timed run's speedup over its items, both step costs held at the run's
    own: the speedup scales with the tau of the drawn items (how step costs move between runs
    and sessions is left out)."""
    tau = macro_tau(parts)
    return bootstrap(parts, lambda t: speedup * t / tau)


def macro_tau(parts: Parts) -> float:
    """The mean over the benches of each one's tau on all its items (emitted over steps)."""
    return _macro(parts, {bench: list(items) for bench, items in parts.items()})


def _macro(parts: Parts, draws: dict[str, list[int]]) -> float:
    """Mean over the benches of emitted tokens over decode steps of the drawn items."""
    taus = []
    for bench, its in draws.items():
        emitted = sum(parts[bench][i][0] for i in its)
        steps = sum(parts[bench][i][1] for i in its)
        taus.append(emitted / max(1, steps))
    return sum(taus) / len(taus)


def _interval(parts: Parts, value: Callable[[dict], float], n: int, seed: int) -> list[float]:
    """The 2.5 % and 97.5 % points of value(draws) over n draws of each bench's items (with
    replacement, the same draws for every draft the value reads)."""
    rng = random.Random(seed)
    items = {bench: sorted(parts[bench]) for bench in parts}
    values = sorted(
        value({bench: rng.choices(its, k=len(its)) for bench, its in items.items()})
        for _ in range(n)
    )
    return [round(values[int(0.025 * n)], 3), round(values[int(0.975 * n) - 1], 3)]
