"""The regeneration sampler as one Triton program per row: no sort, no [B, V] temporaries.

`sampling.sample_rows` in PyTorch makes about a dozen passes over a [B, V] tensor per step (a
cast, the softmax, a segmented radix sort for the nucleus, three cumulative sums, in fp64), which
at 1,024 rows of a 49k vocabulary is hundreds of MB of traffic and several milliseconds. Here a
program reads its row's logits (98 KB in bf16) in few passes:

1. the greedy token (first maximum), and at temperature T > 0 the maximum m, the minimum and the
   softmax's normaliser z of the scaled logits s = logits / T (an online softmax). Without a
   nucleus the draw follows (4.), over the whole row with z as its total.
2. With top_p = p < 1, the candidates: every entry with s - m > ln((1 - p) z / V) - 1, copied
   with its id to a per-row scratch in vocabulary order. No other entry can be in the nucleus
   (all of them together hold less than (1 - p) z), so the search and the draw run over the
   candidates alone. More than a block of them (real SmolLM2 logits at T = 1: a median of
   2,866.5 of 49,152, 4.3 % of rows over 16,384; docs/results/throughput_h200,
   `sampler_candidates_cpu`) are first narrowed: one pass
   sums the mass and counts the entries above 16 values between that bound and m, and only
   those above the highest value whose mass above still exceeds p z (the edge lies above it)
   are kept, in place. More than `capacity` candidates: the same probe pass over the whole
   row, then a copy of the entries above its bracket if they fit, else the search and the draw
   over the whole row from that bracket.
3. the nucleus's smallest kept value (the edge), by a 16-way search over the scaled logits'
   order-preserving integer keys: each pass sums the mass above 15 candidate keys, 8 passes
   narrow any bracket of finite floats to one key. The kept set is every token whose scaled
   logit is at least the edge, the rule of `sample_rows` (the smallest value whose strictly
   greater mass is at most p z; ties all kept).
4. the draw: the kept total, then a walk of the kept mass in vocabulary order to the row's
   counter uniform times that total (clamped to the last token of nonzero probability against
   rounding).

Same law and the same rule as the PyTorch sampler, and the same scaled logits (a correctly
rounded division by T); sums are fp32 rather than fp64, so a token whose mass sits within
rounding of a boundary may be drawn differently. A token whose exp(s - m) is 0 in fp32 is never
drawn. Rows need a finite logit: +inf and NaN logits are outside both samplers' contract. Each
row's path (0 greedy, 1 no nucleus, 2 candidates above the bound, 3 candidates above the
bracket, 4 the whole row) is returned beside its token for tests and benchmarks.

Needs Triton and a CUDA device (`available()`); CPU runs never import it (its tests also run
under Triton's interpreter).
"""

import torch

from .triton_ops import available, once  # noqa: F401 (available: the module's API)

BLOCK = 1024  # vocabulary entries a program reads per iteration
PROBES = 16  # the search splits its interval into this many parts a pass
# finite fp32 values span fewer than 16^8 keys, and a pass leaves at most ceil(width / 16)
SEARCH_PASSES = 8
# candidates a row's scratch holds (fp32 value and int32 id: 128 KB a row; a call at 1,024 rows
# asks 128 MiB of the caching allocator, or of the graph's pool when captured)
CAPACITY = 16384
PATHS = ("greedy", "no nucleus", "above the bound", "above the bracket", "whole row")


def register() -> None:
    """Build and register the custom op (torch.ops.splitserve.*), once."""
    _op()


@once
def _op():
    """The custom op (built once, on first use): CUDA graphs take it whole."""
    from torch.library import triton_op, wrap_triton

    from .sampling_triton import sample_kernel

    @triton_op("splitserve::sample_rows", mutates_args={})
    def sample(
        logits: torch.Tensor, u: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor,
        nucleus: bool, capacity: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        b, v = logits.shape
        out = torch.empty(b, dtype=torch.long, device=logits.device)
        path = torch.empty(b, dtype=torch.int8, device=logits.device)
        rows = b if nucleus else 1
        capacity = min(capacity, v)  # never more than the row
        values = torch.empty(rows, capacity, dtype=torch.float32, device=logits.device)
        ids = torch.empty(rows, capacity, dtype=torch.int32, device=logits.device)
        wrap_triton(sample_kernel)[(b,)](
            logits, logits.stride(0), u, temperature, top_p, out, path, values, ids, v,
            capacity, NUCLEUS=nucleus, BLOCK=BLOCK, PROBES=PROBES,
            SEARCH_PASSES=SEARCH_PASSES, num_warps=8,
        )  # fmt: skip
        return out, path

    return sample


def sample_rows_with_paths(
    logits, u, temperature, top_p, nucleus: bool, capacity: int = CAPACITY
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next token per row of logits [B, V] and the path each row took (an index of PATHS): see
    the module docstring. `u` [B] fp32 in (0, 1), `temperature` / `top_p` [B] fp32."""
    if capacity < 1:
        raise ValueError(f"capacity must be a positive number of candidates, got {capacity}")
    b = logits.shape[0]
    for name, t in (("u", u), ("temperature", temperature), ("top_p", top_p)):
        if t.shape != (b,):  # the kernel reads one value a row, unchecked
            raise ValueError(
                f"{name} must hold one value per row, shape ({b},); got {tuple(t.shape)}"
            )
    if not torch.compiler.is_compiling():
        _op()
    logits = logits if logits.stride(-1) == 1 else logits.contiguous()
    return torch.ops.splitserve.sample_rows(
        logits, u.float().contiguous(), temperature.float().contiguous(),
        top_p.float().contiguous(), nucleus, capacity,
    )  # fmt: skip


def sample_rows(logits, u, temperature, top_p, nucleus: bool) -> torch.Tensor:
    """Next token per row of logits [B, V] (rows contiguous): see the module docstring."""
    return sample_rows_with_paths(logits, u, temperature, top_p, nucleus)[0]
