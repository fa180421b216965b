"""The split of an 8-GPU node from measured per-GPU rates, and the node's projected rate.

    python scripts/node_projection.py --results docs/results/throughput_h200/results.json \
        [--gpus 8] [--shapes qwen3_8b] [--trainer-from PATH --supply-from PATH --key NAME]
        [--goal 50.1] [--assume TEXT]

Reads, per shape, the trainer's samples/s on one GPU (`trainer.<shape>`, from
scripts/bench_trainer.py: `pipelined_samples_per_s`, steps queued one ahead as the training loop
runs them, where the record has it, else `samples_per_s`; `trainer_rate` says which) and the
target's samples/s on one GPU (`regeneration.<shape>`, from
scripts/bench_regen_shapes.py: `samples_per_s` when the target regenerates answers, and
`prefill_samples_per_s` when it only prefills given answers, teacher forcing), and for each supply
mode picks the number of target GPUs k that maximises min(k x target rate, (gpus - k) x trainer
rate): the node rate when targets and trainers run independently (each GPU one role, as the
split trainer runs them), with no loss to transport or stalls. Each shape's `samples_per_s` and
`split` are those of regeneration (what a run does by default), or teacher forcing when only
that was measured (`mode` says which). Writes `node_projection` into the
same file (other keys kept) and prints it. `--trainer-from` / `--supply-from` read one shape's
rates from other records of the file instead (dotted paths such as
`run7.configs.qwen3_8b_s2048_b7_amp_z0_a2_c`, `regeneration_qwen3_8b_h100`), written under `--key`.
`--goal R` (samples/s, e.g. SpecForge's 50.1) adds, per mode, what would reach R: the trainer rate
a GPU needs beside the fewest target GPUs that supply R, and the target rate a GPU needs beside
the fewest trainer GPUs that train R (rounded up to 0.01; absent where no split of the node can).
`--assume TEXT` adds an assumption of these rates to each row's `assumes` (such as rates from two
kinds of GPU), so that rerunning the recorded command keeps it.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from serving import cli  # noqa: E402

MODES = {"regenerate": "samples_per_s", "teacher_forcing": "prefill_samples_per_s"}
# the trainer's rate: steps queued one ahead as the training loop runs them (bench_trainer's
# pipelined row) where measured, else one step at a time
TRAINER_KEYS = ("pipelined_samples_per_s", "samples_per_s")
ASSUMES = (
    "each GPU one role; per-GPU rates from one-GPU runs; no loss to transport, stalls or "
    "imbalance; a sample is what each rate was measured on (see the rates' settings)"
)


def _best(gpus: int, target: float, trainer: float) -> tuple[float, int]:
    """(node rate, target GPUs) of the split with the highest rate (ties: fewer target GPUs)."""
    rate, k = max((min(k * target, (gpus - k) * trainer), -k) for k in range(1, gpus))
    return rate, -k


def best_split(gpus: int, target: float, trainer: float) -> dict:
    """The target-GPU count with the highest node rate (ties: fewer target GPUs)."""
    rate, k = _best(gpus, target, trainer)
    return {
        "samples_per_s": round(rate, 2),
        "split": {"target_gpus": k, "trainer_gpus": gpus - k},
        "bound_by": "target" if k * target < (gpus - k) * trainer else "trainer",
    }


def _up(x: float) -> float:
    """x rounded up to 0.01 (a rate that must be reached; float noise below 1e-6 ignored)."""
    return math.ceil(x * 100 - 1e-6) / 100


def _fewest(goal: float, rate: float, gpus: int) -> int:
    """GPUs at `rate` samples/s each that together give `goal` (`gpus` when none can)."""
    return math.ceil(goal / rate - 1e-9) if rate > 0 else gpus


def to_reach(gpus: int, target: float, trainer: float, goal: float) -> dict:
    """What reaches `goal` samples/s: with these targets, the fewest target GPUs that supply it
    and the trainer rate a GPU then needs; with this trainer, the fewest trainer GPUs that train
    it and the target rate a GPU then needs. A side no split of `gpus` can give is left out."""
    out: dict = {"samples_per_s": goal, "met": _best(gpus, target, trainer)[0] >= goal}
    k = _fewest(goal, target, gpus)  # target GPUs that supply the goal
    if k < gpus:
        out["with_these_targets"] = {
            "split": {"target_gpus": k, "trainer_gpus": gpus - k},
            "trainer_samples_per_s_per_gpu": _up(goal / (gpus - k)),
        }
    j = _fewest(goal, trainer, gpus)  # trainer GPUs that train it
    if j < gpus:
        out["with_this_trainer"] = {
            "split": {"target_gpus": gpus - j, "trainer_gpus": j},
            "target_samples_per_s_per_gpu": _up(goal / (gpus - j)),
        }
    return out


def trainer_rate(rec: dict) -> tuple[float | None, str]:
    """The trainer's samples/s in a record and the key it was read from (TRAINER_KEYS' order)."""
    key = next((k for k in TRAINER_KEYS if rec.get(k)), TRAINER_KEYS[-1])
    return rec.get(key), key


def record(results: dict, path: str) -> dict:
    """The record at a dotted path of the results, named in the error when absent."""
    node = results
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise SystemExit(f"no record {path!r} in the results (missing {part!r})")
        node = node[part]
    return node


def project(
    results: dict,
    gpus: int,
    shapes: list[str],
    trainer_from: str | None = None,
    supply_from: str | None = None,
    goal: float | None = None,
    assume: str | None = None,
) -> dict:
    out = {}
    for shape in shapes:
        if trainer_from:
            trainer, rate_key = trainer_rate(record(results, trainer_from))
        else:  # a results file's headline, or bench_trainer's own report's best config
            trainer, rate_key = trainer_rate(results.get("trainer", {}).get(shape, {}))
            if trainer is None:
                trainer, rate_key = trainer_rate(results.get("best", {}).get(shape, {}))
        supply = (
            record(results, supply_from)
            if supply_from
            else results.get("regeneration", {}).get(shape, {})
        )
        if trainer is None:
            where = trainer_from or f"trainer.{shape}"
            raise SystemExit(f"no {where}.{' or .'.join(TRAINER_KEYS)} in the results")
        row = {
            "trainer_samples_per_s_per_gpu": trainer,
            "trainer_rate": rate_key,
            "gpus": gpus,
            "assumes": ASSUMES if not assume else f"{ASSUMES}; {assume}",
        }
        if trainer_from or supply_from:
            row["rates_from"] = {"trainer": trainer_from or "trainer", "supply": supply_from}
        for mode, key in MODES.items():
            if supply.get(key):
                row[mode] = {"target_samples_per_s_per_gpu": supply[key]}
                row[mode].update(best_split(gpus, supply[key], trainer))
                if goal:
                    row[mode]["to_reach"] = to_reach(gpus, supply[key], trainer, goal)
        if not any(mode in row for mode in MODES):
            where = supply_from or f"regeneration.{shape}"
            raise SystemExit(f"no {where} rates ({', '.join(MODES.values())})")
        # the headline: the mode a run takes by default (target.regenerate=true) when measured
        mode = next(m for m in MODES if m in row)
        row.update(mode=mode, samples_per_s=row[mode]["samples_per_s"], split=row[mode]["split"])
        out[shape] = row
    return out


def main(argv: list[str] | None = None) -> int:
    ap = cli.script_parser(__file__, __doc__)
    ap.add_argument("--results", required=True, type=Path)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--shapes", default="qwen3_8b")
    ap.add_argument(
        "--trainer-from", help="dotted path of a record with the trainer's samples_per_s"
    )
    ap.add_argument("--supply-from", help="dotted path of a record with the target's rates")
    ap.add_argument("--key", default="node_projection", help="where the projection is written")
    ap.add_argument("--goal", type=float, help="samples/s to reach: the rates a GPU would need")
    ap.add_argument("--assume", help="an assumption of these rates, added to each row's assumes")
    args = ap.parse_args(argv)
    if args.gpus < 2:
        ap.error("--gpus must be >= 2 (one target and one trainer at least)")
    if args.goal is not None and not args.goal > 0:
        ap.error(f"--goal {args.goal}: a node rate to reach must be > 0 samples/s")
    if args.assume is not None and not args.assume.strip():
        ap.error("--assume: an empty assumption says nothing; leave it out")
    shapes = args.shapes.split(",")
    if (args.trainer_from or args.supply_from) and len(shapes) != 1:
        ap.error("--trainer-from / --supply-from name one shape's records: pass one --shapes")
    try:
        results = json.loads(args.results.read_text())
    except (OSError, ValueError) as e:
        ap.error(f"--results {args.results}: not a readable JSON results file ({e})")
    projection = project(
        results, args.gpus, shapes, args.trainer_from, args.supply_from, args.goal, args.assume
    )
    results[args.key] = projection
    results[f"{args.key}_command"] = cli.command_line(ap, argv)
    args.results.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(projection, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
