"""Paired bootstrap intervals over benchmark items: is a difference in tau between two drafts
larger than the spread of the items they were measured on?

Both drafts decoded the same items, so each bootstrap draw takes the same items (with
replacement) for both and recomputes tau as emitted tokens over decode steps of the drawn
items. Used by scripts/tau_table.py (the goals) and serving.ablation_report (each job against
the first).
"""

from __future__ import annotations

import random
from collections.abc import Callable

Parts = dict[str, dict[int, tuple[int, int]]]  # bench -> {item: (emitted, steps)}


def item_parts(report: dict) -> dict[int, tuple[int, int]] | None:
    """{item: (emitted, steps)} of one serving.evaluate report; None when it has no per_item."""
    if "per_item" not in report:
        return None
    return {int(i): (e, n) for i, e, n in report["per_item"]}


def paired_bootstrap(
    a: Parts, b: Parts, stat: Callable[[float, float], float], n: int = 2000, seed: int = 0
) -> list[float] | None:
    """95 % interval of stat(macro tau of a, macro tau of b), the macro tau being the mean over
    the benches of a (in its order) of each one's tau; None when the two did not decode the
    same benches and items."""
    if a.keys() != b.keys() or any(a[bench].keys() != b[bench].keys() for bench in a):
        return None
    rng = random.Random(seed)
    items = {bench: sorted(a[bench]) for bench in a}

    def macro(parts, draws):
        taus = []
        for bench in items:
            emitted = sum(parts[bench][i][0] for i in draws[bench])
            steps = sum(parts[bench][i][1] for i in draws[bench])
            taus.append(emitted / max(1, steps))
        return sum(taus) / len(taus)

    values = []
    for _ in range(n):
        draws = {bench: rng.choices(its, k=len(its)) for bench, its in items.items()}
        values.append(stat(macro(a, draws), macro(b, draws)))
    values.sort()
    return [round(values[int(0.025 * n)], 3), round(values[int(0.975 * n) - 1], 3)]
