"""Reading time of the training sources, per record, at growing sizes: a quadratic reader shows
as time per record growing with the record count; a linear one stays flat.

    python scripts/bench_data.py --out docs/results/splits/data_read.json [--sizes 1000 2000 4000 0]

Size 0 means every record. The ShareGPT file (the largest source, read by its line-aware reader)
is timed with the project's reader and, as the baseline measured in the same run, with the reader
this project shipped before (it counted newlines from the start of the file for every record).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from splitserve.data import default_path, read_gsm8k, read_sharegpt  # noqa: E402


def quadratic_sharegpt(path: Path, limit: int | None) -> int:
    """The old reader's cost model: records found the same way, each one's line number counted
    from the start of the text (what made reading quadratic). Returns the record count."""
    text = path.read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    pos, count = text.index("[") + 1, 0
    while limit is None or count < limit:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            break
        try:
            _, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            break
        text.count("\n", 0, pos)  # the old per-record line number
        count += 1
        pos = end
    return count


def timed(fn, *args) -> tuple[float, int]:
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result if isinstance(result, int) else len(result)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000, 0])
    ap.add_argument(
        "--baseline-max",
        type=int,
        default=4000,
        help="largest size the quadratic baseline is timed at (it takes minutes beyond)",
    )
    args = ap.parse_args()
    rows = []
    for kind, reader in (("sharegpt", read_sharegpt), ("gsm8k", read_gsm8k)):
        path = default_path(kind)
        prev_n = prev_s = prev_base = None  # the previous size's records, seconds, baseline seconds
        for size in args.sizes:
            limit = size or None
            seconds, records = timed(reader, path, limit)
            row = {
                "source": kind,
                "limit": size or "all",
                "records": records,
                "seconds": round(seconds, 3),
                "us_per_record": round(1e6 * seconds / max(records, 1), 1),
            }
            if prev_n is not None and records > prev_n:
                row["marginal_us_per_record"] = round(
                    1e6 * (seconds - prev_s) / (records - prev_n), 1
                )
            base_s = None
            if kind == "sharegpt" and size and size <= args.baseline_max:
                base_s, _ = timed(quadratic_sharegpt, path, limit)
                row["baseline_seconds"] = round(base_s, 3)
                if prev_base is not None:
                    row["baseline_marginal_us_per_record"] = round(
                        1e6 * (base_s - prev_base) / (records - prev_n), 1
                    )
            prev_n, prev_s, prev_base = records, seconds, base_s
            rows.append(row)
            print(json.dumps(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"machine": platform.platform(), "python": platform.python_version(), "rows": rows},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
