"""Summarise a Hydra multirun of `splitserve.train` (plus `serving.evaluate` on each job's final
checkpoint) as a Markdown table and a PNG.

    python -m serving.ablation_report SWEEP_DIR [SWEEP_DIR ...] --out DIR/NAME \
        [--temperature 0] [--json FILE]

Each job directory (Hydra's SWEEP_DIR/N) must hold `.hydra/overrides.yaml` and a complete
checkpoint; its newest evaluation at the temperature is read from RUN/eval/step-N-t<T>/<bench>.json.
Columns: the overrides that differ between jobs, the evaluated checkpoint, draft parameter count,
draft step latency (the mean over benches of each evaluation's median), the median training step
(each step's `step_s` in metrics.jsonl, the loop iteration with its wait for data; a resumed step
counted once), the simulated tau of training's last evaluation up to that step, tau per benchmark,
and each job's tau minus the first job's with a 95 % paired-bootstrap interval over items (where
the reports carry `per_item`). A job without an evaluation is listed with empty tau cells and a
warning naming the command that evaluates it, never dropped; a sweep with no evaluation at all is
refused (there is no tau to report). Results copied without their weights (no complete checkpoint,
but evaluations) are reported too, with the parameter count their summary.json recorded (none for
runs older than that field).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from draft_models.config_io import read_json
from splitserve import checkpoint
from splitserve.run_metrics import metrics_records

from . import cli
from .intervals import item_parts, macro_tau, paired_bootstrap

# where a job ran, not what it trained
BOOKKEEPING = (
    "train.run_dir=",
    "hydra.",
    "split.master_port=",
)


def _param_count(job: Path, checkpoints: list[Path]) -> int | None:
    """Draft parameters: from the last checkpoint's weight headers, or, for results copied
    without weights, from the run's summary.json."""
    if checkpoints:
        return checkpoint.param_count(checkpoints[-1] / "draft")
    summary = job / "summary.json"
    return read_json(summary, "run summary").get("draft_params") if summary.is_file() else None


def read_job(job: Path, temperature: float, ignore: tuple[str, ...] = ()) -> dict:
    """Overrides (less bookkeeping and those starting with a prefix in `ignore`), parameter
    count, the last simulated tau of training, the median training step, and the newest
    evaluation at `temperature` (of whichever checkpoint was evaluated; none is fine) with its
    draft step (the mean over benches of each evaluation's median)."""
    overrides_file = job / ".hydra" / "overrides.yaml"
    if not overrides_file.is_file():
        raise FileNotFoundError(
            f"{job} is not a Hydra job directory: missing .hydra/overrides.yaml"
        )
    overrides = [
        line[2:].strip()
        for line in overrides_file.read_text().splitlines()
        if line.startswith("- ")
    ]
    overrides = [o for o in overrides if not o.startswith(BOOKKEEPING + tuple(ignore))]
    checkpoints = checkpoint.complete_checkpoints(job)
    eval_dirs = sorted((job / "eval").glob(f"step-*-t{temperature:g}"))
    if not checkpoints and not eval_dirs:
        raise FileNotFoundError(f"{job}: the run saved no complete checkpoint")
    evals, step = {}, checkpoints[-1].name if checkpoints else None
    if eval_dirs:
        step = eval_dirs[-1].name.rsplit("-t", 1)[0]
        evals = {
            f.stem: read_json(f, "evaluation report") for f in sorted(eval_dirs[-1].glob("*.json"))
        }
    sim_tau, step_s = None, {}
    for record in metrics_records(job):
        if record.get("eval_sim_tau") is not None and f"step-{record['step']:08d}" <= step:
            sim_tau = record["eval_sim_tau"]
        if record.get("step_s") is not None:
            step_s[record["step"]] = record["step_s"]  # a step redone after a resume: its last
    latency = [e["draft_step_ms"] for e in evals.values() if e.get("draft_step_ms") is not None]
    return {
        "job": str(job),
        "overrides": overrides,
        # results copied off the machine without weights: the evaluations are still read
        "params": _param_count(job, checkpoints),
        "step": step,
        "sim_tau": sim_tau,
        "draft_step_ms": sum(latency) / len(latency) if latency else None,  # mean over benches
        "train_step_s": statistics.median(step_s.values()) if step_s else None,
        "evals": evals,
    }


def _fmt(x, spec=".2f") -> str:
    return "" if x is None else format(x, spec)


def common_overrides(rows: list[dict]) -> list[str]:
    """The overrides every job shares; the rest of each job's are what the table and the plot
    name it by."""
    return [o for o in rows[0]["overrides"] if all(o in r["overrides"] for r in rows)]


def varied(row: dict, common: list[str], sep: str = " ") -> str:
    return sep.join(o for o in row["overrides"] if o not in common) or "(defaults)"


def markdown(
    rows: list[dict], benches: list[str], temperature: float, ignore: tuple[str, ...] = ()
) -> str:
    common = common_overrides(rows)
    head = [
        "job",
        "varied overrides",
        "checkpoint",
        "draft params",
        "draft step ms",
        "train step s",
        "sim tau (train eval)",
    ]
    head += [f"tau {b}" for b in benches]
    base = rows[0]
    head += [f"{b} vs first job (95 %)" for b in benches]
    lines = [
        f"Temperature {temperature:g}; tau = tokens emitted per decode step (bonus included).",
        f"Overrides common to every job: `{' '.join(common) or '(none)'}`",
    ]
    if ignore:
        lines.append(f"Overrides left out (--ignore-override): `{' '.join(ignore)}`")
    lines += [
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        cells = [
            "/".join(Path(r["job"]).parts[-2:]),
            varied(r, common),
            r["step"],
            "" if r["params"] is None else f"{r['params']:,}",
            _fmt(r["draft_step_ms"]),
            _fmt(r["train_step_s"], ".3f"),
            _fmt(r["sim_tau"]),
        ]
        cells += [_fmt(r["evals"][b]["tau"]) if b in r["evals"] else "" for b in benches]
        cells += ["" if r is base else _difference(r, base, b) for b in benches]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "The last columns: this job's tau minus the first job's, with a 95 % interval from a "
        "paired bootstrap over the items both decoded (serving/intervals.py); an interval that "
        "holds 0 does not tell the two apart.",
    ]
    return "\n".join(lines) + "\n"


def difference(row: dict, base: dict, bench: str) -> tuple[float, float, float] | None:
    """tau(row) - tau(base) on one benchmark with its 95 % interval, rounded to 0.01; None when
    either lacks per-item parts or they decoded other items."""
    a, b = (r["evals"].get(bench) for r in (row, base))
    parts = [p and item_parts(p) for p in (a, b)]
    if not all(parts):
        return None
    ci = paired_bootstrap({bench: parts[0]}, {bench: parts[1]}, lambda x, y: x - y)
    if ci is None:
        return None
    d, lo, hi = (round(x, 2) + 0.0 for x in (a["tau"] - b["tau"], *ci))  # + 0.0: no "-0.00"
    return d, lo, hi


def _difference(row: dict, base: dict, bench: str) -> str:
    found = difference(row, base, bench)
    return "" if found is None else "{:+.2f} ({:+.2f}, {:+.2f})".format(*found)


def plot(rows: list[dict], benches: list[str], path: Path, title: str) -> list[str]:
    """tau by job and benchmark as bars, each job labelled by its varied overrides (one a line,
    as in the table: the values of every override made labels too long to read); returns the
    labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    common = common_overrides(rows)
    labels = [varied(r, common, "\n") for r in rows]
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(rows)), 4))
    width = 0.8 / max(1, len(benches))
    top = 0.0
    for i, b in enumerate(benches):
        xs = [j + i * width for j in range(len(rows))]
        ys = [r["evals"][b]["tau"] if b in r["evals"] else 0.0 for r in rows]
        ax.bar(xs, ys, width, label=b)
        top = max([top, *ys])
    ax.set_xticks([j + width * (len(benches) - 1) / 2 for j in range(len(rows))])
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylim(0, 1.2 * top or 1.0)  # room above the bars for the legend
    ax.set_ylabel("tau (tokens per step)")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper left", ncol=max(1, len(benches)), fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return labels


def jobs_of(sweep: Path) -> list[Path]:
    """The jobs of a multirun directory, in job order (or the path itself when it is one job)."""
    if (sweep / ".hydra").is_dir():
        return [sweep]
    if not sweep.is_dir():
        raise FileNotFoundError(f"{sweep} does not exist")
    jobs = sorted(
        (p for p in sweep.iterdir() if p.is_dir() and (p / ".hydra").is_dir()),
        key=lambda p: (not p.name.isdigit(), int(p.name) if p.name.isdigit() else 0, p.name),
    )
    if not jobs:
        raise FileNotFoundError(f"{sweep} holds no Hydra multirun jobs (no */.hydra)")
    return jobs


def build_parser():
    """This CLI's flags (its --help)."""
    ap = cli.parser("ablation_report", "Markdown table + PNG of a Hydra multirun ablation")
    ap.add_argument(
        "sweeps",
        nargs="+",
        type=Path,
        help="Hydra multirun directories (or single job directories)",
    )
    ap.add_argument("--out", required=True, type=Path, help="writes OUT.md and OUT.png")
    ap.add_argument("--json", type=Path, help="also write the table as JSON here")
    ap.add_argument(
        "--temperature", type=cli.TEMPERATURE, default=0.0, help="which evaluation to report"
    )
    ap.add_argument(
        "--ignore-override",
        action="append",
        default=[],
        metavar="PREFIX",
        help="leave out overrides starting with PREFIX: where a job found its inputs rather "
        "than what it trained (e.g. one file under two work directories); repeatable, and "
        "named under the table",
    )
    return ap


def records(rows: list[dict], benches: list[str], temperature: float) -> dict:
    """The table as data (the study's results.json): per job its varied overrides, checkpoint,
    parameters, draft and training step times, simulated tau, tau and acceptance by position per
    bench, and the difference to the first job with its 95 % interval."""
    common = common_overrides(rows)
    jobs = []
    for r in rows:
        evals = r["evals"]
        jobs.append(
            {
                "job": Path(r["job"]).name,
                "varied": [o for o in r["overrides"] if o not in common],
                "checkpoint": r["step"],
                "params": r["params"],
                "sim_tau": r["sim_tau"],
                "draft_step_ms": r["draft_step_ms"],
                "train_step_s": r["train_step_s"],
                "tau": {b: evals[b]["tau"] for b in benches if b in evals},
                "acceptance_by_position": {
                    b: evals[b].get("acceptance_by_position") for b in benches if b in evals
                },
                "vs_first": {
                    b: None if r is rows[0] else _as_interval(difference(r, rows[0], b))
                    for b in benches
                },
                **_macro(r, rows[0], benches),
            }
        )
    return {"temperature": temperature, "common_overrides": common, "benches": benches,
            "jobs": jobs}  # fmt: skip


def _parts(row: dict, benches: list[str]) -> dict | None:
    """bench -> per-item parts of every bench, or None when one lacks them."""
    parts = {b: item_parts(row["evals"][b]) if b in row["evals"] else None for b in benches}
    return parts if all(parts.values()) else None


def _macro(row: dict, base: dict, benches: list[str]) -> dict:
    """The macro tau (mean over benches) and its ratio to the first job's with a 95 % paired
    interval: the equal-budget goal's figure. Empty without per-item parts on every bench."""
    mine, first = _parts(row, benches), _parts(base, benches)
    if mine is None:
        return {}
    out = {"macro_tau": macro_tau(mine)}
    if first is not None and row is not base:
        ci = paired_bootstrap(mine, first, lambda x, y: x / y)
        if ci is not None:
            out["macro_ratio_vs_first"] = {
                "ratio": out["macro_tau"] / macro_tau(first),
                "lo95": ci[0],
                "hi95": ci[1],
            }
    return out


def _as_interval(found: tuple[float, float, float] | None) -> dict | None:
    return None if found is None else dict(zip(("diff", "lo95", "hi95"), found, strict=True))


def unevaluated(rows: list[dict], temperature: float) -> list[str]:
    """One line per job with no evaluation at `temperature`, naming the command that makes it."""
    return [
        f"{r['job']}: no evaluation at T={temperature:g}; make it with `python -m "
        f"serving.evaluate --checkpoint {r['job']} --temperature {temperature:g}`"
        for r in rows
        if not r["evals"]
    ]


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        ignore = tuple(args.ignore_override)
        rows = [read_job(j, args.temperature, ignore) for s in args.sweeps for j in jobs_of(s)]
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    missing = unevaluated(rows, args.temperature)
    if len(missing) == len(rows):
        print("error: no job has been evaluated, so there is no tau to report:", file=sys.stderr)
        print("\n".join(missing), file=sys.stderr)
        return 2
    for line in missing:
        print(f"warning: {line}", file=sys.stderr)
    benches = sorted({b for r in rows for b in r["evals"]})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table = markdown(rows, benches, args.temperature, ignore)
    Path(f"{args.out}.md").write_text(table)  # not with_suffix: OUT may be name-t0.7
    plot(
        rows,
        benches,
        Path(f"{args.out}.png"),
        f"{', '.join(s.name for s in args.sweeps)} (T={args.temperature:g})",
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        data = records(rows, benches, args.temperature)
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
