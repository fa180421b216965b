"""One CUDA graph per step shape: replay instead of launching every kernel from Python.

`GraphedStep(fn, widths, device)` calls `fn(ids [B, W], pos [B, W], extent)` eagerly for any
width not in `widths` and, on a GPU, replays a graph captured for each (shape, extent) with a
width in `widths` the first time it is used (`extent`: a Python int the step bakes in, such as
the cache-length bucket it attends over). A graph reads its inputs from fixed buffers and writes
its outputs to fixed tensors, so the returned tensors are overwritten by the next replay of the
same graph: use them before then.

Capture happens with the step's real inputs: the warm-up run (which torch requires before
capturing, on a side stream) performs that very step, and the replay that follows the capture
performs it again, writing the same values to the same cache positions. That keeps the first
step of a width correct without a scratch cache row.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    ids: torch.Tensor
    pos: torch.Tensor
    outputs: tuple


class GraphedStep:
    def __init__(
        self,
        fn: Callable,
        widths: list[int],
        device: torch.device,
        enabled: bool = True,
        graph_fn: Callable | None = None,
    ) -> None:
        """`graph_fn`: what the graphs capture (e.g. a torch.compile'd `fn`); default `fn`."""
        self.fn, self.graph_fn, self.widths = fn, graph_fn or fn, set(widths)
        self.enabled = enabled and torch.device(device).type == "cuda"
        self.graphs: dict[tuple, _Graph] = {}
        self.pool = torch.cuda.graph_pool_handle() if self.enabled else None

    def __call__(self, ids: torch.Tensor, pos: torch.Tensor, extent: int | None = None):
        shape = tuple(ids.shape)
        if not self.enabled or shape[1] not in self.widths:
            return self.fn(ids, pos, extent)
        key = (shape, extent)
        g = self.graphs.get(key)
        if g is None:
            g = self.graphs[key] = self._capture(ids, pos, extent)
        else:
            g.ids.copy_(ids)
            g.pos.copy_(pos)
        g.graph.replay()
        return g.outputs

    def _capture(self, ids: torch.Tensor, pos: torch.Tensor, extent: int | None) -> _Graph:
        static_ids, static_pos = ids.clone(), pos.clone()
        graph, outputs = capture(
            lambda: self.graph_fn(static_ids, static_pos, extent), ids.device, self.pool
        )
        return _Graph(graph, static_ids, static_pos, outputs)


def compiled(fn: Callable, variants: int) -> Callable:
    """`fn` torch.compile'd for capture in CUDA graphs: fixed shapes (`dynamic=False`), each
    Python int or float argument baked in, so every graph variant (a width, bucket or
    temperature) compiles once, on its first capture. Dynamo's recompile limit is raised to hold
    `variants` more variants of one function: past its default (8) it would leave the rest
    eager without a word."""
    import torch._dynamo

    cfg = torch._dynamo.config
    name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    setattr(cfg, name, max(getattr(cfg, name), variants + 8))  # the older name before 2.7
    if hasattr(cfg, "accumulated_recompile_limit"):  # every function's variants together
        cfg.accumulated_recompile_limit = max(cfg.accumulated_recompile_limit, 4 * variants)
    return torch.compile(fn, dynamic=False)


_capture_s = 0.0  # wall seconds this process has spent in `capture`


def capture_seconds() -> float:
    """Wall seconds this process has spent capturing graphs (warm-up runs included, up to a
    synchronisation): what a timing leaves out to report the steps of captured graphs, as a
    server that captured its graphs at start-up would run them (serving.evaluate)."""
    return _capture_s


def capture(fn: Callable, device: torch.device, pool=None, warmup: int = 2, before=None):
    """(graph, outputs) of `fn()` captured on `device` after `warmup` eager runs on a
    side stream (torch's requirement; a compiled fn compiles there). The warm-up runs are real
    calls of fn: capture only where running the step more than once is harmless, or pass
    `before`, called (uncaptured) before each warm-up run and before the capture, to restore
    what a run changes."""
    global _capture_s
    torch.cuda.synchronize(device)  # work queued before is not the capture's
    t0 = time.perf_counter()
    with torch.cuda.device(device):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                if before is not None:
                    before()
                fn()
            if before is not None:
                before()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            outputs = fn()
        torch.cuda.synchronize(device)
    _capture_s += time.perf_counter() - t0
    return graph, outputs
