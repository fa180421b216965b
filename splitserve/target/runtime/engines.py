"""Target engines: how the speculative decoder runs the frozen target for one request.

Every engine keeps one request's target state between steps (the static engine, with `rows`,
that of R requests for serving.batch_decoder) and offers three calls:
`begin(max_len)` (a new request), `forward(ids [n], start)` -> (logits [n, V] fp32, captured
features [n, m*H]) for tokens at positions start..start+n-1 (the prompt, then each verify
block), and `accept(width, accepted)` after a verify step, which keeps the anchor and the first
`accepted` drafts and forgets the rest.

- `EagerEngine` (any transformers causal LM, KDA hybrids included): a DynamicCache cropped after
  each step, capture hooks, and the per-position staging of linear-attention state.
- `StaticEngine` (the static families, `static_model.StaticDecoder`): a static KV cache, one CUDA
  graph per (verify width, cache-length bucket) on a GPU (eager on CPU, same code), features
  returned by the step itself; forgetting rejected drafts costs nothing (see StaticDecoder). Its
  `block_rows(ids, start, extent)` takes the positions as device tensors and is never graphed
  itself, for the decoders' fused step, which graphs the whole decode step; with `rows=R` the
  engine holds R requests at once (serving.batch_decoder: `prefill_rows`, then `block_rows`).
`make_engine(model, layer_ids, runtime)` picks one: `static` where the target is supported,
`eager` otherwise; `auto` = static on a GPU for supported targets, else eager.
"""

from __future__ import annotations

import contextlib

import torch
from transformers import DynamicCache

from draft_models.families import static_types

from ..capture import capture_states
from ..linear_state import LinearStateStager, crop_cache, has_linear_layers
from ..models import cache_kwarg
from .graphs import GraphedStep, compiled
from .static_model import StaticDecoder, unsupported_reason

RUNTIMES = ("auto", "eager", "static")


class EagerEngine:
    graphs = False  # the decoder graphs its draft proposal only beside a graphed target

    def __init__(self, model, layer_ids: list[int]) -> None:
        self.model, self.layer_ids = model, list(layer_ids)
        self.device = next(model.parameters()).device
        self.stager = LinearStateStager(model) if has_linear_layers(model) else None
        self.cache = None
        self._staging = contextlib.ExitStack()

    def begin(self, max_len: int) -> None:
        self.close()
        if self.stager is not None:
            self._staging.enter_context(self.stager)
        # the config tells hybrid models which layers are linear
        self.cache = DynamicCache(config=self.model.config)

    def forward(self, ids: torch.Tensor, start: int):
        pos = torch.arange(start, start + ids.shape[0], device=self.device)[None]
        if self.stager is not None:
            self.stager.staging = start > 0  # verify blocks stage every position's linear state
        with capture_states(self.model, self.layer_ids) as store:
            out = self.model(
                input_ids=ids[None],
                position_ids=pos,
                use_cache=True,
                **cache_kwarg(self.model, self.cache),
            )
        if self.stager is not None:
            self.stager.staging = False
        feats = (
            torch.cat([store["layers"][i][0] for i in self.layer_ids], -1)
            if self.layer_ids
            else None
        )
        return out.logits[0].float(), feats

    def accept(self, width: int, accepted: int) -> None:
        if self.stager is not None:  # linear layers: the staged state of the last kept position
            self.stager.commit(self.cache, accepted)
        crop_cache(self.cache, width - accepted - 1)  # rejected drafts and padding

    def rewind(self, n: int) -> None:
        """Drop the last n cached positions (timing loops; linear layers' state stays)."""
        crop_cache(self.cache, n)

    def close(self) -> None:
        self._staging.close()
        self._staging = contextlib.ExitStack()


def extent_buckets(max_len: int, smallest: int = 256) -> list[int]:
    """Cache lengths a step may attend over: powers of two from `smallest`, then max_len. A step
    attends over the smallest bucket that holds its positions, so its attention costs about what
    its context needs (at most 2x) while the graphs stay few (one per width and bucket)."""
    out, n = [], smallest
    while n < max_len:
        out.append(n)
        n *= 2
    return [*out, max_len]


class StaticEngine:
    """Verify widths in `widths` replay one CUDA graph per (width, extent bucket), captured on
    first use; any other call (the prompt) runs the same forward eagerly. `compile_step`: the
    graphs capture a torch.compile'd step (fused kernels; one compilation per graph on first
    use). `buckets`: the cache lengths steps attend over (default `extent_buckets(max_len)`)."""

    def __init__(
        self,
        model,
        layer_ids: list[int],
        *,
        max_len: int = 4096,
        widths: list[int] | None = None,
        graphs: bool | None = None,
        compile_step: bool = False,
        buckets: list[int] | None = None,
        rows: int = 1,
    ) -> None:
        self.device = next(model.parameters()).device
        self.rows = rows
        self.net = StaticDecoder(model, max_rows=rows, max_len=max_len, capture_ids=list(layer_ids))
        self.layer_ids, self.max_len = list(layer_ids), max_len
        self.buckets = sorted(buckets or extent_buckets(max_len))
        if self.buckets[-1] != max_len or self.buckets[0] < 1:
            raise ValueError(f"buckets {self.buckets} must be >= 1 and end at max_len={max_len}")
        use_graphs = self.device.type == "cuda" if graphs is None else graphs
        graphed = None
        if compile_step:  # one variant per (width, bucket)
            graphed = compiled(self._step, len(widths or []) * len(self.buckets))
        self.step = GraphedStep(
            self._step, widths or [], self.device, enabled=use_graphs, graph_fn=graphed
        )
        self.graphs = self.step.enabled  # graphs on (a GPU, not switched off)

    def _step(self, ids: torch.Tensor, pos: torch.Tensor, extent: int | None = None):
        logits, feats, _ = self.net(ids, pos, extent=extent)
        return logits.float(), feats

    def begin(self, max_len: int) -> None:
        if max_len > self.max_len:
            raise ValueError(
                f"this request needs {max_len} positions; the static cache holds "
                f"{self.max_len} (raise max_len)"
            )

    def forward(self, ids: torch.Tensor, start: int):
        end = start + ids.shape[0]
        if end > self.max_len:
            raise ValueError(f"positions up to {end - 1}; the static cache holds {self.max_len}")
        pos = torch.arange(start, end, device=self.device)[None]
        logits, feats = self.step(ids[None], pos, self.extent_for(end))
        return logits[0], feats[0] if feats is not None else None

    def extent_for(self, end: int) -> int:
        """The cache-length bucket a step writing positions below `end` attends over."""
        return next(b for b in self.buckets if b >= end)

    def block_rows(self, ids: torch.Tensor, start: torch.Tensor, extent: int):
        """(logits [R, W, V] fp32, features [R, W, m*H]) of ids [R, W] at positions start.. of
        each row (`start` a device tensor [R]), never graphed here: the call of a caller that
        captures a larger step in its own graph (the decoders' fused step), which checks
        positions and picks `extent` on the host."""
        pos = start[:, None] + torch.arange(ids.shape[1], device=self.device)
        return self.step.graph_fn(ids, pos, extent)

    def prefill_rows(self, ids: torch.Tensor, lengths: torch.Tensor):
        """Prompts of every row at once, eagerly: ids [R, L] (row r's prompt in its first
        lengths[r] slots, any padding after it) -> (logits at each prompt's last position [R, V]
        fp32, features [R, L, m*H]). Padding writes the cache past a prompt's end, where no query
        looks before a verify block has overwritten it."""
        r, n = ids.shape
        if n > self.max_len:
            raise ValueError(f"a prompt of {n} positions; the static cache holds {self.max_len}")
        pos = torch.arange(n, device=self.device).expand(r, n)
        logits, feats, _ = self.net(ids, pos, logits_at=lengths - 1, extent=self.extent_for(n))
        return logits[:, 0].float(), feats

    def accept(self, width: int, accepted: int) -> None:
        pass  # the next step overwrites the rejected positions before any query sees them

    def rewind(self, n: int) -> None:
        pass  # likewise: positions are written by the step that uses them

    def close(self) -> None:
        pass


def static_refusal(model) -> str | None:
    """Why the static runtime cannot run `model` ("runs ...; this one ..."), or None."""
    why = unsupported_reason(model.config)
    if why is None and has_linear_layers(model):
        why = f"runs {', '.join(static_types())} targets without linear-attention layers"
    return why


def static_supported(model) -> bool:
    return static_refusal(model) is None


def make_engine(
    model,
    layer_ids: list[int],
    runtime: str = "auto",
    *,
    max_len: int = 4096,
    widths: list[int] | None = None,
    compile_step: bool = False,
):
    """The engine for `runtime` (auto | eager | static); static refuses unsupported targets.
    `compile_step`: the static engine's graphs capture a torch.compile'd step; refused where no
    graphs run (the eager engine, or no GPU), since that is the only place it pays."""
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime {runtime!r} is invalid; allowed: {', '.join(RUNTIMES)}")
    on_gpu = next(model.parameters()).device.type == "cuda"
    if runtime == "static" or (runtime == "auto" and on_gpu and static_supported(model)):
        why = static_refusal(model)
        if why is not None:
            raise ValueError(f"runtime=static {why} (use eager)")
        if compile_step and not on_gpu:
            raise ValueError("compile: the compiled steps run inside CUDA graphs; no GPU here")
        return StaticEngine(
            model, layer_ids, max_len=max_len, widths=widths, compile_step=compile_step
        )
    if compile_step:
        raise ValueError(
            f"compile needs the static runtime on a GPU (CUDA graphs); runtime={runtime} picks "
            "the eager engine (transformers) here"
        )
    return EagerEngine(model, layer_ids)
