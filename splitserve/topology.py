"""Who does what on the node, and which sample travels which route.

The global sample stream is indexed by g = 0, 1, 2, ...; optimizer step s consumes
g in [s * R * B, (s + 1) * R * B) for R trainers taking B = micro_batch * grad_accum samples each,
trainer r the slice starting at s * R * B + r * B. Each trainer is fed by a fixed list of target
workers, the k-th sample a trainer consumes (counted over all steps) coming from source k mod
len(sources), so its sources share the work evenly even when they outnumber B. Everything
is a pure function of (step, rank), so a resumed run needs no cursor but the step, and each
produced sample has exactly one consumer. Held-out evaluation samples use ids g < 0:
eval prompt i is g = -(i + 1) and goes to trainer i mod R, before any training sample.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


def sample_name(g: int) -> str:
    """Sample id g in words, for logs: a negative id is held-out prompt -g, not a bad id."""
    return f"held-out sample {-g}" if g < 0 else f"sample {g}"


@dataclass(frozen=True)
class Topology:
    num_targets: int
    num_trainers: int
    samples_per_trainer_step: int  # B = micro_batch * grad_accum
    num_eval: int = 0

    def __post_init__(self) -> None:
        if self.num_targets < 1 or self.num_trainers < 1:
            raise ValueError(
                f"need at least one target and one trainer process, got {self.num_targets} + "
                f"{self.num_trainers}"
            )

    def sources(self, trainer: int) -> list[int]:
        """Target workers that feed `trainer`."""
        if self.num_targets >= self.num_trainers:
            return [t for t in range(self.num_targets) if t % self.num_trainers == trainer]
        return [trainer % self.num_targets]

    def route(self, g: int) -> tuple[int, int]:
        """(target, trainer) of sample g."""
        if g < 0:
            i = -g - 1
            trainer = i % self.num_trainers
            j = i // self.num_trainers
        else:
            b = self.samples_per_trainer_step
            step, offset = divmod(g, self.num_trainers * b)
            trainer, j = divmod(offset, b)
            # position in this trainer's own stream: its sources take turns across steps
            j += step * b
        src = self.sources(trainer)
        return src[j % len(src)], trainer

    def eval_ids(self, trainer: int) -> list[int]:
        return [-(i + 1) for i in range(self.num_eval) if i % self.num_trainers == trainer]

    def trainer_samples(self, trainer: int, start_step: int, steps: int) -> Iterator[int]:
        """The ids `trainer` consumes, in order: its eval samples, then steps
        start_step..steps-1."""
        yield from self.eval_ids(trainer)
        b, r = self.samples_per_trainer_step, self.num_trainers
        for s in range(start_step, steps):
            base = s * r * b + trainer * b
            yield from range(base, base + b)

    def target_samples(self, target: int, start_step: int, steps: int) -> Iterator[int]:
        """The ids `target` produces, in the order its trainers consume them."""
        evals = [g for t in range(self.num_trainers) for g in self.eval_ids(t)]
        yield from (g for g in sorted(evals, reverse=True) if self.route(g)[0] == target)
        b, r = self.samples_per_trainer_step, self.num_trainers
        for g in range(start_step * r * b, steps * r * b):
            if self.route(g)[0] == target:
                yield g
