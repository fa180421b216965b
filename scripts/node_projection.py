"""The split of an 8-GPU node from measured per-GPU rates, and the node's projected rate.

    python scripts/node_projection.py --results docs/results/throughput_h200/results.json \
        [--gpus 8] [--shapes qwen3_8b]

Reads, per shape, the trainer's samples/s on one GPU (`trainer.<shape>.samples_per_s`, from
scripts/bench_trainer.py) and the target's samples/s on one GPU (`regeneration.<shape>`, from
scripts/bench_regen_shapes.py: `samples_per_s` when the target regenerates answers, and
`prefill_samples_per_s` when it only prefills given answers, teacher forcing), and for each supply
mode picks the number of target GPUs k that maximises min(k x target rate, (gpus - k) x trainer
rate): the node rate when targets and trainers run independently (each GPU one role, as the
split trainer runs them), with no loss to transport or stalls. Writes `node_projection` into the
same file (other keys kept) and prints it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from serving import cli  # noqa: E402

MODES = {"regenerate": "samples_per_s", "teacher_forcing": "prefill_samples_per_s"}
ASSUMES = (
    "each GPU one role; per-GPU rates from one-GPU runs; no loss to transport, stalls or "
    "imbalance; a sample is what each rate was measured on (see the rates' settings)"
)


def best_split(gpus: int, target: float, trainer: float) -> dict:
    """The target-GPU count with the highest node rate (ties: fewer target GPUs)."""
    rate, k = max((min(k * target, (gpus - k) * trainer), -k) for k in range(1, gpus))
    k = -k
    return {
        "samples_per_s": round(rate, 2),
        "split": {"target_gpus": k, "trainer_gpus": gpus - k},
        "bound_by": "target" if k * target < (gpus - k) * trainer else "trainer",
    }


def project(results: dict, gpus: int, shapes: list[str]) -> dict:
    out = {}
    for shape in shapes:
        trainer = (  # a results file's headline, or bench_trainer's own report's best config
            results.get("trainer", {}).get(shape, {}).get("samples_per_s")
            or results.get("best", {}).get(shape, {}).get("samples_per_s")
        )
        supply = results.get("regeneration", {}).get(shape, {})
        if trainer is None:
            raise SystemExit(f"no trainer.{shape}.samples_per_s in the results")
        row = {"trainer_samples_per_s_per_gpu": trainer, "gpus": gpus, "assumes": ASSUMES}
        for mode, key in MODES.items():
            if supply.get(key):
                row[mode] = {"target_samples_per_s_per_gpu": supply[key]}
                row[mode].update(best_split(gpus, supply[key], trainer))
        if not any(mode in row for mode in MODES):
            raise SystemExit(f"no regeneration.{shape} rates ({', '.join(MODES.values())})")
        out[shape] = row
    return out


def main(argv: list[str] | None = None) -> int:
    ap = cli.script_parser(__file__, __doc__)
    ap.add_argument("--results", required=True, type=Path)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--shapes", default="qwen3_8b")
    args = ap.parse_args(argv)
    if args.gpus < 2:
        ap.error("--gpus must be >= 2 (one target and one trainer at least)")
    results = json.loads(args.results.read_text())
    results["node_projection"] = project(results, args.gpus, args.shapes.split(","))
    results["node_projection_command"] = cli.command_line(ap, argv)
    args.results.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results["node_projection"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
