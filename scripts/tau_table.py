"""Assemble docs/ablations/tau_h200.json from the files scripts/tau_experiment.sh wrote.

    python scripts/tau_table.py --results DIR --out docs/ablations/tau_h200.json

DIR holds `eval/<draft>-t<T>/<bench>.json` (serving.evaluate, tau-only, the items evaluated),
`eval/curve-step-N/gsm8k.json` (DSpark's earlier checkpoints), `speed/<name>/gsm8k.json`
(single-stream runs with target-only decoding; `<draft>-...` for DFlash's and EAGLE-3's),
`speed/sts.json` (with `sts_report.json`: ECE/AUC on the fit and test prompts), `speed/sps.json`
(whole decode steps by verify width; `sps_verify.json`: the target's verify alone) and
`runs/<draft>/metrics.jsonl` (or `metrics.jsonl.gz`, as the passes keep it in git). The table keeps
the issue's shape ({draft: {bench: {greedy, t1}}}, budget_samples, commands) and adds acceptance by
position, macro tau, the budget curve, the speedups and the goals (value, limit, met) computed from
those figures. Where the reports carry `per_item` (serving.evaluate writes it), the two comparisons
between drafts also get a 95 % interval from a paired bootstrap over items (`settled`: the interval
lies on one side of the limit), the two greedy ones an interval of their bench's tau over its items,
and the speedup one from its run's items with both step costs held (the interval leaves out how step
costs vary between runs); without it a goal met by a small margin is not a result.

`--draft-results DRAFT=DIR` reads one draft's files (its `eval/<draft>-t<T>/`, `runs/<draft>/` and
`speed/<draft>-*/`; for DSpark also the curve and the rest of `speed/`) from another pass's folder:
a draft trained in another pass on the same files to the same budget (pass 21: DFlash here, DSpark
from pass 18), so the goals between drafts compare them at equal budgets. Given again for the same
draft it adds a folder: each file is read from the first folder, in the order given, that holds it,
and one evaluation's reports (`eval/<draft>-t<T>/`) all from the first that holds that folder, so
one row never mixes two runs' reports (pass 22: pass 19's DSpark, its T=1 reports evaluated in pass
22, its greedy ones and its run in pass 19). The weights' checksums (`checksums.txt`) and
regeneration's logs are read from DIR alone.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not

from serving import cli  # noqa: E402
from serving.intervals import (  # noqa: E402
    Parts,
    bootstrap,
    item_parts,
    macro_tau,
    paired_bootstrap,
    speedup_interval,
)
from splitserve.checkpoint import metrics_lines  # noqa: E402

DRAFTS = ("dspark", "dflash", "eagle3")
BENCHES = ("gsm8k", "mtbench", "humaneval")
TEMPS = {"greedy": "t0", "t1": "t1"}


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _r(x, nd=3):
    return None if x is None else round(x, nd)


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2 if xs else None


def assemble(
    results: Path,
    budget: int,
    micro: int,
    commands: list[str],
    notes: list[str] = (),
    samples_before: int = 0,
    draft_results: dict[str, Path | list[Path]] | None = None,
) -> dict:
    """`samples_before`: training samples the drafts had seen before these runs (runs started
    with train.init_from): the budget curve counts them, since a step counts from 0 again.
    `draft_results`: {draft: folder, or folders in the order they are searched} for drafts
    whose files are in other passes' folders."""
    unknown = set(draft_results or {}) - set(DRAFTS)
    if unknown:
        raise ValueError(f"draft_results: unknown drafts {sorted(unknown)} (allowed: {DRAFTS})")
    draft_results = {
        d: [Path(f) for f in (v if isinstance(v, list) else [v])]
        for d, v in (draft_results or {}).items()
    }
    roots = {d: Folders(draft_results.get(d, [results])) for d in DRAFTS}
    table: dict = {}
    acceptance: dict = {}
    for d in DRAFTS:
        row, acc, taus = {}, {}, {}
        for name, t in TEMPS.items():
            # one run's reports: the whole folder from the first of the draft's folders holding it
            reports = roots[d].file(f"eval/{d}-{t}")
            for bench in BENCHES:
                row.setdefault(bench, {})
                acc.setdefault(bench, {})
                rep = _load(reports / f"{bench}.json")
                taus[bench, name] = rep and rep["tau"]
                row[bench][name] = _r(taus[bench, name])
                acc[bench][name] = rep and [_r(a) for a in rep["acceptance_by_position"]]
                if rep:
                    acc[bench][f"{name}_turns"] = rep["turns"]
        row["macro"] = {  # from the benches' unrounded taus
            name: _r(sum(taus[b, name] for b in BENCHES) / len(BENCHES))
            if all(taus[b, name] is not None for b in BENCHES)
            else None
            for name in TEMPS
        }
        table[d], acceptance[d] = row, acc
    curve, item_sets = [], []
    for p in roots["dspark"].glob("eval/curve-step-*/gsm8k.json"):
        step = int(re.fullmatch(r"curve-step-(\d+)", p.parent.name).group(1))
        rep = _load(p)
        curve.append(
            {
                "step": step,
                "samples": samples_before + step * micro,
                "tau_gsm8k_greedy": _r(rep["tau"]),
            }
        )
        item_sets.append({i for i, _, _ in rep.get("per_item", [])})
    # the items every curve point was evaluated on (none known if a report lacks per_item)
    curve_items = set.intersection(*item_sets) if item_sets and all(item_sets) else None
    final = _load(roots["dspark"].file("eval/dspark-t0/gsm8k.json"))
    if curve_items and final and "per_item" in final:
        # the last checkpoint on the curve's own items (the first CURVE_LIMIT of the 200)
        parts = [(e, n) for i, e, n in final["per_item"] if i in curve_items]
        if len(parts) < len(curve_items):
            print(
                f"note: the final DSpark evaluation lacks {len(curve_items) - len(parts)} of the "
                "curve's items; the curve has no final point",
                file=sys.stderr,
            )
        else:
            curve.append(
                {
                    "step": budget // micro,
                    "samples": samples_before + budget,
                    "tau_gsm8k_greedy": _r(sum(e for e, _ in parts) / sum(n for _, n in parts)),
                    "from": "eval/dspark-t0, the curve's items",
                }
            )
    curve.sort(key=lambda c: c["step"])
    # the timed runs: `speed/<draft>-*/` of each draft from its own folders (DSpark's folders
    # also hold its runs under other names, e.g. pass 13's), in the order of their names
    others = tuple(f"{d}-" for d in DRAFTS if d != "dspark")
    timed = {
        p
        for d in DRAFTS
        for p in roots[d].glob("speed/*/gsm8k.json")
        if p.parent.name.startswith(f"{d}-")
        or (d == "dspark" and not p.parent.name.startswith(others))
    }
    speed = {}
    for p in sorted(timed, key=lambda p: (p.parent.name, str(p))):
        rep = _load(p)
        speed[p.parent.name] = {
            "tau": _r(rep["tau"]),
            "speedup": _r(rep["speedup"]),
            "speculative_tokens_per_s": _r(rep["speculative"]["tokens_per_s"], 1),
            "target_only_tokens_per_s": _r(rep["target_only"]["tokens_per_s"], 1),
            "step_ms": _r(rep["speculative"]["step_ms"]),
            "mean_verify_width": _r(rep["mean_verify_width"]),
            "identical_to_target_only": rep.get("identical_to_target_only"),
            "items": rep["items"],
            "command": rep.get("command"),  # reports since pass 12 record theirs
        }
    losses = {}
    for d in DRAFTS:
        lines = metrics_lines(roots[d].file(f"runs/{d}"))
        if lines:
            recs = [json.loads(x) for x in lines if x.strip()]
            steps = [r for r in recs if "event" not in r]
            evals = [
                {
                    "step": r["step"],
                    "loss": _r(r["eval_loss"]),
                    "sim_tau": _r(r["eval_sim_tau"]),
                }
                for r in steps
                if "eval_loss" in r
            ]
            timed = [r for r in steps[10:] if "step_s" in r]  # past the compiling first steps
            losses[d] = {
                "first_loss": _r(steps[0]["loss"]) if steps else None,
                "last_loss": _r(steps[-1]["loss"]) if steps else None,
                "last_logged_step": steps[-1]["step"] if steps else 0,
                "evals": evals,
                "median_step_s": _r(_median([r["step_s"] for r in timed])),
                "mean_data_wait_frac": _r(_mean([r.get("data_wait_frac") for r in timed])),
                "mean_target_util": _r(_mean([r.get("target_util") for r in timed])),
                "last_c_star": [_r(c) for c in steps[-1].get("c_star_rank0", [])] if steps else [],
            }
    regen = [
        json.loads(lines[-1])
        for p in sorted(results.glob("regen[0-9]*.log"))
        if (lines := [x for x in p.read_text().splitlines() if x.startswith("{")])
    ]
    out = {
        **table,
        "budget_samples": budget,
        "samples_before": samples_before,
        "commands": commands,
        "notes": list(notes),
        # where drafts trained in another pass were read from (absent when none were)
        **(
            {
                "draft_results": {
                    d: str(p[0]) if len(p) == 1 else [str(f) for f in p]
                    for d, p in draft_results.items()
                }
            }
            if draft_results
            else {}
        ),
        "acceptance_by_position": acceptance,
        "budget_curve_dspark": curve,
        "speed_gsm8k": speed,
        "training": losses,
        "regeneration": regen,  # splitserve.regenerate's summary line of each shard
    }
    for name in ("sts", "sts_report", "sps", "sps_verify"):
        data = _load(roots["dspark"].file(f"speed/{name}.json"))
        if data is not None:
            out[name] = data
    sums = results / "checksums.txt"
    if sums.is_file():  # sha256 of every draft weight file and of the export
        out["sha256"] = {
            name: digest for digest, name in (x.split() for x in sums.read_text().splitlines())
        }
    out["goals"] = goals(out, roots)
    return out


class Folders:
    """One draft's results folders in the order they are searched: a file (or folder, e.g. one
    evaluation's reports, taken whole) is read from the first that holds it, a glob from the
    first with a match."""

    def __init__(self, folders: list[Path]):
        self.folders = [Path(f) for f in folders]

    def file(self, rel: str) -> Path:
        """rel in the first folder holding it (in the first folder when none does)."""
        return next((f / rel for f in self.folders if (f / rel).exists()), self.folders[0] / rel)

    def glob(self, pattern: str) -> list[Path]:
        return next((m for f in self.folders if (m := sorted(f.glob(pattern)))), [])


def _parts(folder: Path | None, benches) -> Parts | None:
    """bench -> {item: (emitted, steps)} from the reports in one folder; None if there is no
    folder, or a report is missing or lacks per-item parts (no interval then; the folders of
    serving.intervals.folder_parts, which refuses those, are complete by construction)."""
    parts = {}
    for bench in benches:
        rep = folder and _load(folder / f"{bench}.json")
        parts[bench] = rep and item_parts(rep)
        if not parts[bench]:
            return None
    return parts


def _settled(ci: list[float], limit: float, strict: bool = False) -> bool:
    """A goal is settled when its whole 95 % interval lies on one side of its limit."""
    return (ci[0] > limit or ci[1] <= limit) if strict else (ci[0] >= limit or ci[1] < limit)


def goals(out: dict, roots: dict[str, Folders] | None = None) -> dict:
    """The issue's goals as (value, limit, met); None where a figure is missing. Where the
    reports carry per-item parts (in roots: {draft: its results folders}) each goal also gets
    its 95 % interval and `settled`."""

    def folder(d, name):
        return roots and roots[d].file(name)

    def goal(value, limit, strict=False):
        if value is None or limit is None:
            return None
        return {
            "value": value,
            "limit": _r(limit),
            "met": value > limit if strict else value >= limit,
        }

    def greedy(bench, limit):
        # tau of one bench over draws of its items (the run's own spread, not between runs)
        g = goal(out["dspark"][bench]["greedy"], limit)
        run = _parts(folder("dspark", "eval/dspark-t0"), [bench])
        if g and run:
            ci = bootstrap(run, lambda t: t)
            g |= {"tau_ci95": ci, "settled": _settled(ci, limit)}
        return g

    ds, df, ea = (out[d] for d in DRAFTS)
    speed = out["speed_gsm8k"].get("dspark-fixed", {}).get("speedup")
    vs_dflash = goal(ds["macro"]["t1"], df["macro"]["t1"] and 1.10 * df["macro"]["t1"])
    vs_eagle3 = goal(ds["macro"]["t1"], ea["macro"]["t1"], strict=True)
    parts = {d: _parts(folder(d, f"eval/{d}-t1"), BENCHES) for d in DRAFTS}
    if vs_dflash and parts["dspark"] and parts["dflash"]:
        ci = paired_bootstrap(parts["dspark"], parts["dflash"], lambda x, y: x / y)
        if ci:
            # from the unrounded taus, as serving.intervals.compare_parts gives it
            ratio = macro_tau(parts["dspark"]) / macro_tau(parts["dflash"])
            vs_dflash |= {"ratio": _r(ratio), "ratio_ci95": ci}
            vs_dflash["settled"] = _settled(ci, 1.10)
    if vs_eagle3 and parts["dspark"] and parts["eagle3"]:
        ci = paired_bootstrap(parts["dspark"], parts["eagle3"], lambda x, y: x - y)
        if ci:
            vs_eagle3 |= {"difference_ci95": ci, "settled": _settled(ci, 0.0, strict=True)}
    vs_target = goal(speed, 2.0)
    run = _parts(folder("dspark", "speed/dspark-fixed"), ["gsm8k"])
    if vs_target and run:
        ci = speedup_interval(run, speed)  # the spread of the items only
        vs_target |= {"speedup_ci95": ci, "settled": _settled(ci, 2.0)}
    return {
        "dspark greedy tau gsm8k >= 3.5": greedy("gsm8k", 3.5),
        "dspark greedy tau mtbench >= 2.5": greedy("mtbench", 2.5),
        "dspark macro tau T=1 >= 1.10 x dflash": vs_dflash,
        "dspark macro tau T=1 > eagle3": vs_eagle3,
        "speculative >= 2x target-only on the runtime (gsm8k)": vs_target,
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog=cli.script_prog(__file__), description=__doc__)
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget", type=int, required=True, help="training samples per draft")
    ap.add_argument("--micro", type=int, default=16, help="samples per step")
    ap.add_argument(
        "--samples-before",
        type=int,
        default=0,
        help="samples the drafts had seen before these runs (train.init_from); the curve adds them",
    )
    ap.add_argument("--command", action="append", default=[], help="a command that ran (repeat)")
    ap.add_argument("--note", action="append", default=[], help="a caveat to keep (repeat)")
    ap.add_argument(
        "--draft-results",
        action="append",
        default=[],
        metavar="DRAFT=DIR",
        help="read this draft's files from another pass's results folder (repeat)",
    )
    args = ap.parse_args(argv)
    if args.samples_before < 0:
        ap.error(f"--samples-before {args.samples_before}: a count of samples, 0 or more")
    draft_results: dict[str, list[Path]] = {}
    for item in args.draft_results:
        d, sep, folder = item.partition("=")
        if not sep or d not in DRAFTS or not Path(folder).is_dir():
            ap.error(f"--draft-results {item}: DRAFT=DIR, DRAFT one of {DRAFTS}, DIR a folder")
        draft_results.setdefault(d, []).append(Path(folder))
    out = assemble(
        args.results,
        args.budget,
        args.micro,
        args.command,
        args.note,
        args.samples_before,
        draft_results,
    )
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({d: out[d] for d in DRAFTS} | {"goals": out["goals"]}, indent=1))


if __name__ == "__main__":
    main()
