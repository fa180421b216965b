"""Summarise a Hydra multirun of `splitserve.train` (plus `serving.evaluate` on each job's final
checkpoint) as a Markdown table and a PNG.

    python -m serving.ablation_report SWEEP_DIR [SWEEP_DIR ...] --out docs/ablations/NAME \
        [--temperature 0]

Each job directory (Hydra's SWEEP_DIR/N) must hold `.hydra/overrides.yaml` and a complete
checkpoint; its newest evaluation at the temperature is read from RUN/eval/step-N-t<T>/<bench>.json.
Columns: the overrides that differ between jobs, the evaluated checkpoint, draft parameter
count, draft step latency, the simulated tau of training's last evaluation up to that step, tau
per benchmark, and each job's tau minus the first job's with a 95 % paired-bootstrap interval
over items (where the reports carry `per_item`). A job without an evaluation is listed with empty
tau cells, never dropped. Results copied without their weights (no complete checkpoint, but
evaluations) are reported too, with the parameter count their summary.json recorded (runs
trained since the change that added it, after docs/ablations' pass 16; none for older ones).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from splitserve import checkpoint

from . import cli
from .intervals import item_parts, paired_bootstrap

# where a job ran, not what it trained
BOOKKEEPING = (
    "train.run_dir=",
    "hydra.",
    "split.master_port=",
)


def _param_count(job: Path, checkpoints: list[Path]) -> int | None:
    """Draft parameters: from the last checkpoint's weight headers, or, for results copied
    without weights, from the run's summary.json (runs trained after docs/ablations' pass 16)."""
    if checkpoints:
        return checkpoint.param_count(checkpoints[-1] / "draft")
    summary = job / "summary.json"
    return json.loads(summary.read_text()).get("draft_params") if summary.is_file() else None


def read_job(job: Path, temperature: float, ignore: tuple[str, ...] = ()) -> dict:
    """Overrides (less bookkeeping and those starting with a prefix in `ignore`), parameter
    count, the last simulated tau of training, and the newest evaluation at `temperature` (of
    whichever checkpoint was evaluated; none is fine)."""
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
        evals = {f.stem: json.loads(f.read_text()) for f in sorted(eval_dirs[-1].glob("*.json"))}
    sim_tau = None
    for line in checkpoint.metrics_lines(job):
        record = json.loads(line)
        if record.get("eval_sim_tau") is not None and f"step-{record['step']:08d}" <= step:
            sim_tau = record["eval_sim_tau"]
    return {
        "job": str(job),
        "overrides": overrides,
        # results copied off the machine without weights: the evaluations are still read
        "params": _param_count(job, checkpoints),
        "step": step,
        "sim_tau": sim_tau,
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
        latency = [
            e.get("draft_step_ms")
            for e in r["evals"].values()
            if e.get("draft_step_ms") is not None
        ]
        cells = [
            "/".join(Path(r["job"]).parts[-2:]),
            varied(r, common),
            r["step"],
            "" if r["params"] is None else f"{r['params']:,}",
            _fmt(sum(latency) / len(latency) if latency else None),
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


def _difference(row: dict, base: dict, bench: str) -> str:
    """tau(row) - tau(base) on one benchmark with its 95 % interval; empty when either lacks
    per-item parts or they decoded other items."""
    a, b = (r["evals"].get(bench) for r in (row, base))
    parts = [p and item_parts(p) for p in (a, b)]
    if not all(parts):
        return ""
    ci = paired_bootstrap({bench: parts[0]}, {bench: parts[1]}, lambda x, y: x - y)
    if ci is None:
        return ""
    d, lo, hi = (round(x, 2) + 0.0 for x in (a["tau"] - b["tau"], *ci))  # + 0.0: no "-0.00"
    return f"{d:+.2f} ({lo:+.2f}, {hi:+.2f})"


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


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        ignore = tuple(args.ignore_override)
        rows = [read_job(j, args.temperature, ignore) for s in args.sweeps for j in jobs_of(s)]
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    benches = sorted({b for r in rows for b in r["evals"]})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table = markdown(rows, benches, args.temperature, ignore)
    args.out.with_suffix(".md").write_text(table)
    plot(
        rows,
        benches,
        args.out.with_suffix(".png"),
        f"{', '.join(s.name for s in args.sweeps)} (T={args.temperature:g})",
    )
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
