"""Assemble docs/ablations/tau_h200.json from the files scripts/tau_experiment.sh wrote.

    python scripts/tau_table.py --results DIR --out docs/ablations/tau_h200.json

DIR holds `eval/<draft>-t<T>/<bench>.json` (serving.evaluate, tau-only, the items evaluated),
`eval/curve-step-N/gsm8k.json` (DSpark's earlier checkpoints), `speed/<name>/gsm8k.json`
(single-stream runs with target-only decoding), `speed/sts.json`, `speed/sps.json` and
`runs/<draft>/metrics.jsonl`. The table keeps the issue's shape ({draft: {bench: {greedy, t1}}},
budget_samples, commands) and adds acceptance by position, macro tau, the budget curve, the
speedups and the goals (value, limit, met) computed from those figures.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

DRAFTS = ("dspark", "dflash", "eagle3")
BENCHES = ("gsm8k", "mtbench", "humaneval")
TEMPS = {"greedy": "t0", "t1": "t1"}


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _r(x, nd=3):
    return None if x is None else round(x, nd)


def assemble(
    results: Path, budget: int, micro: int, commands: list[str], notes: list[str] = ()
) -> dict:
    table: dict = {}
    acceptance: dict = {}
    for d in DRAFTS:
        row, acc = {}, {}
        for bench in BENCHES:
            row[bench], acc[bench] = {}, {}
            for name, t in TEMPS.items():
                rep = _load(results / "eval" / f"{d}-{t}" / f"{bench}.json")
                row[bench][name] = _r(rep and rep["tau"])
                acc[bench][name] = rep and [_r(a) for a in rep["acceptance_by_position"]]
                if rep:
                    acc[bench][f"{name}_turns"] = rep["turns"]
        row["macro"] = {
            name: _r(sum(row[b][name] for b in BENCHES) / len(BENCHES))
            if all(row[b][name] is not None for b in BENCHES)
            else None
            for name in TEMPS
        }
        table[d], acceptance[d] = row, acc
    curve = []
    for p in sorted(results.glob("eval/curve-step-*/gsm8k.json")):
        step = int(re.fullmatch(r"curve-step-(\d+)", p.parent.name).group(1))
        curve.append(
            {"step": step, "samples": step * micro, "tau_gsm8k_greedy": _r(_load(p)["tau"])}
        )
    curve.sort(key=lambda c: c["step"])
    speed = {}
    for p in sorted(results.glob("speed/*/gsm8k.json")):
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
        }
    losses = {}
    for d in DRAFTS:
        path = results / "runs" / d / "metrics.jsonl"
        if path.is_file():
            recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
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
            losses[d] = {
                "first_loss": _r(steps[0]["loss"]) if steps else None,
                "last_loss": _r(steps[-1]["loss"]) if steps else None,
                "last_logged_step": steps[-1]["step"] if steps else 0,
                "evals": evals,
            }
    out = {
        **table,
        "budget_samples": budget,
        "commands": commands,
        "notes": list(notes),
        "acceptance_by_position": acceptance,
        "budget_curve_dspark": curve,
        "speed_gsm8k": speed,
        "training": losses,
    }
    for name in ("sts", "sps"):
        data = _load(results / "speed" / f"{name}.json")
        if data is not None:
            out[name] = data
    sums = results / "checksums.txt"
    if sums.is_file():  # sha256 of every draft weight file and of the export
        out["sha256"] = {
            name: digest for digest, name in (x.split() for x in sums.read_text().splitlines())
        }
    out["goals"] = goals(out)
    return out


def goals(out: dict) -> dict:
    """The issue's goals as (value, limit, met); None where a figure is missing."""

    def goal(value, limit, strict=False):
        if value is None or limit is None:
            return None
        return {
            "value": value,
            "limit": _r(limit),
            "met": value > limit if strict else value >= limit,
        }

    ds, df, ea = (out[d] for d in DRAFTS)
    speed = out["speed_gsm8k"].get("dspark-fixed", {}).get("speedup")
    return {
        "dspark greedy tau gsm8k >= 3.5": goal(ds["gsm8k"]["greedy"], 3.5),
        "dspark greedy tau mtbench >= 2.5": goal(ds["mtbench"]["greedy"], 2.5),
        "dspark macro tau T=1 >= 1.10 x dflash": goal(
            ds["macro"]["t1"], df["macro"]["t1"] and 1.10 * df["macro"]["t1"]
        ),
        "dspark macro tau T=1 > eagle3": goal(ds["macro"]["t1"], ea["macro"]["t1"], strict=True),
        "speculative >= 2x target-only on the runtime (gsm8k)": goal(speed, 2.0),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python scripts/tau_table.py", description=__doc__)
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget", type=int, required=True, help="training samples per draft")
    ap.add_argument("--micro", type=int, default=16, help="samples per step")
    ap.add_argument("--command", action="append", default=[], help="a command that ran (repeat)")
    ap.add_argument("--note", action="append", default=[], help="a caveat to keep (repeat)")
    args = ap.parse_args(argv)
    out = assemble(args.results, args.budget, args.micro, args.command, args.note)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({d: out[d] for d in DRAFTS} | {"goals": out["goals"]}, indent=1))


if __name__ == "__main__":
    main()
