"""The Triton sampler (splitserve/target/runtime/sampling_kernels.py) against the PyTorch one it
replaces on CUDA (sampling.sample_rows' own path): the same token per row for greedy, full and
nucleus rows, ties at the nucleus's edge all kept, and in a CUDA graph (skipped without a GPU and
Triton; run on the device machine: `python -m pytest -q tests/test_gpu_sampling.py`). The
arithmetic tests also run on CPU tensors in fp32 under Triton's interpreter
(tests/test_kernels_interpreted.py)."""

import pytest
import torch
from interpreted import DEVICE, kernels_run, on_gpu_only

from draft_models.sampling import counter_row_uniform
from splitserve.target.runtime import sampling, sampling_kernels

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not kernels_run(sampling_kernels), reason="needs a CUDA device and Triton"),
]


def rows(n: int, vocab: int, seed: int = 0):
    """n rows of logits [n, V] (V not a multiple of the kernel's block) at mixed spreads (near
    uniform to peaked), with temperatures 0 / 0.7 / 1 / 1.3 and top_p 0.5 / 0.9 / 0.95 / 1
    across them, one seed and position each."""
    g = torch.Generator().manual_seed(seed)
    spread = torch.tensor([0.05, 1.0, 3.0, 6.0, 12.0]).repeat(n // 5 + 1)[:n, None]
    logits = torch.randn(n, vocab, generator=g) * spread
    temperature = torch.tensor([0.0, 0.7, 1.0, 1.3]).repeat(n)[:n]
    top_p = torch.tensor([0.5, 0.9, 0.95, 1.0]).repeat_interleave(4).repeat(n)[:n]
    seed_ = torch.arange(n) * 7 + 11
    pos = torch.arange(n) % 13 + 1
    put = lambda t: t.to(DEVICE)  # noqa: E731
    return put(logits), put(seed_), put(pos), put(temperature), put(top_p)


def reference(logits, seed, pos, temperature, top_p, nucleus):
    """sample_rows' PyTorch path, in fp32 on the CPU."""
    cpu = [t.cpu() for t in (logits.float(), seed, pos, temperature, top_p)]
    return sampling.sample_rows(*cpu, nucleus=nucleus)


def kernel(logits, seed, pos, temperature, top_p, nucleus):
    u = counter_row_uniform(seed, pos)
    return sampling_kernels.sample_rows(logits, u, temperature, top_p, nucleus).cpu()


@pytest.mark.parametrize("nucleus", [False, True])
def test_the_kernel_draws_the_pytorch_samplers_tokens(nucleus):
    """64 rows over 2,500 entries (three blocks, the last partial): every row's token equals the
    PyTorch sampler's (greedy rows their first maximum; T > 0 rows the same inverse-CDF draw,
    over the nucleus where top_p < 1 and `nucleus`)."""
    args = rows(64, 2500)
    got, want = kernel(*args, nucleus), reference(*args, nucleus)
    assert got.dtype == torch.long and torch.equal(got, want)
    # and the rows are not trivial: temperature > 0 moved draws off the greedy token, and the
    # nucleus moved some draws
    greedy = reference(*args[:3], torch.zeros_like(args[3]), args[4], nucleus)
    assert (got != greedy).sum() > 10
    assert (got != reference(*args, not nucleus)).any()


def test_every_path_of_the_nucleus_draws_the_same_tokens():
    """With a scratch of 64 candidates some nucleus rows fit it above the bound, some only
    above the bracket the probes find, and some take the whole row: each path draws the PyTorch
    sampler's token (and the paths are those the docstring names: greedy rows 0, rows without a
    nucleus 1); at the default capacity the same tokens."""
    args = rows(64, 2500)
    want = reference(*args, True)
    u = counter_row_uniform(args[1], args[2])
    tokens, path = sampling_kernels.sample_rows_with_paths(*args[:1], u, *args[3:], True, 64)
    taken = torch.bincount(path.cpu().long(), minlength=5)
    assert torch.equal(tokens.cpu(), want) and (taken[2:] > 0).all(), taken
    assert taken[0] == args[3].eq(0).sum() and taken[1] == (args[3].gt(0) & args[4].ge(1)).sum()
    tokens, path = sampling_kernels.sample_rows_with_paths(*args[:1], u, *args[3:], True)
    assert torch.equal(tokens.cpu(), want)
    with pytest.raises(ValueError, match="capacity"):
        sampling_kernels.sample_rows_with_paths(*args[:1], u, *args[3:], True, 0)


def test_tiny_temperatures_over_large_logits_and_a_nucleus_near_one():
    """At T = 1e-6 scaled logits reach 3e7-3e8, where m + (a bound a few units below it) rounds
    to m: the candidates are chosen relative to m, so rows of tied maxima keep every tie and a
    peaked row its maximum (not token 0). top_p 0.999 keeps nearly the whole row. Each at the
    default capacity and at 64 candidates, as the PyTorch sampler draws."""
    logits, seed, pos, temperature, top_p = rows(24, 2500, seed=6)
    logits[:8] = -5.0
    logits[:4, [7, 900, 1800]] = 34.0  # three tied maxima
    logits[4:8, 1234] = 300.0  # one peak
    temperature[:8], top_p[:8] = 1e-6, 0.5
    temperature[8:], top_p[8:] = 1.0, 0.999
    args = (logits, seed, pos, temperature, top_p)
    want = reference(*args, True)
    assert set(want[:4].tolist()) <= {7, 900, 1800} and want[4:8].eq(1234).all()
    u = counter_row_uniform(seed, pos)
    for capacity in (sampling_kernels.CAPACITY, 64):
        got, _ = sampling_kernels.sample_rows_with_paths(
            logits, u, temperature, top_p, True, capacity
        )
        assert torch.equal(got.cpu(), want), capacity


def test_masked_logits_a_first_block_of_minus_inf_and_a_nucleus():
    """Rows whose first 1,100 entries (more than a block) are -inf, as a vocabulary mask makes
    them: the softmax and the nucleus are over the rest, as in the PyTorch sampler."""
    logits, seed, pos, temperature, top_p = rows(16, 2500, seed=4)
    logits[:, :1100] = float("-inf")
    args = (logits, seed, pos, temperature.clamp_min(0.5), top_p)
    got = kernel(*args, nucleus=True)
    assert got.min() >= 1100 and torch.equal(got, reference(*args, True))


def test_ties_at_the_nucleus_edge_are_all_kept_and_greedy_takes_the_first_maximum():
    """Probabilities 0.5, 0.25, 0.25 (and a tail of -inf-like entries): at top_p 0.6 both tied
    tokens are kept (the draws of 300 seeds hit all three in proportion, as the PyTorch
    sampler's do); at top_p 0.4 only
    the first; greedy rows take the first of two equal maxima."""
    n, vocab = 300, 1000
    logits = torch.full((n, vocab), -1e4)
    logits[:, :3] = torch.log(torch.tensor([0.5, 0.25, 0.25]))
    seed, pos = torch.arange(n), torch.full((n,), 3)
    ones = torch.ones(n)
    put = lambda *ts: [t.to(DEVICE) for t in ts]  # noqa: E731
    drawn = kernel(*put(logits, seed, pos, ones, ones * 0.6), nucleus=True)
    freq = torch.bincount(drawn, minlength=3)[:3].float() / n
    torch.testing.assert_close(freq, torch.tensor([0.5, 0.25, 0.25]), atol=0.08, rtol=0)
    assert torch.equal(drawn, reference(logits, seed, pos, ones, ones * 0.6, True))
    only = kernel(*put(logits, seed, pos, ones, ones * 0.4), nucleus=True)
    assert only.eq(0).all()
    tied = torch.zeros((2, vocab))
    tied[:, [5, 900]] = 3.0
    first = kernel(*put(tied, seed[:2], pos[:2], torch.zeros(2), ones[:2]), nucleus=True)
    assert first.tolist() == [5, 5]


def test_no_token_of_probability_zero_and_one_value_per_row():
    """Rows holding nearly all their mass in the first block, then a block that underflows
    (logits of -1e4: probability 0 in fp32, yet kept without a nucleus) and a block of tiny but
    nonzero mass, drawn at uniforms up to the largest fp32 below 1: every draw is a token of
    nonzero probability, however the fp32 sums and running sums round (carrying the running
    mass as a separate sum drew token 1024, the first underflowed one, under the interpreter).
    Per-row inputs of another length are refused by name (the kernel would read past them)."""
    n, vocab = 240, 3000
    g = torch.Generator().manual_seed(9)
    logits = torch.randn(n, vocab, generator=g) * 2.0
    logits[:, 1024:2048] = -1e4
    logits[:, 2048:] = -40.0
    near_one = 1.0 - torch.tensor([2.0**-24, 2.0**-23, 2.0**-22, 2.0**-20, 2.0**-16, 1e-3])
    u = near_one.repeat(n // 6)
    temperature = torch.tensor([1.0, 0.7, 1.3]).repeat(n // 3)
    top_p = torch.tensor([1.0, 1.0, 1.0, 0.999999, 0.95]).repeat(n // 5)
    args = [t.to(DEVICE) for t in (logits, u, temperature, top_p)]
    for capacity in (sampling_kernels.CAPACITY, 64):
        got, _ = sampling_kernels.sample_rows_with_paths(*args, True, capacity)
        chosen = logits.gather(1, got.cpu()[:, None])[:, 0]
        assert chosen.gt(-1e3).all(), got[chosen.le(-1e3)].tolist()
    with pytest.raises(ValueError, match="u must hold one value per row"):
        sampling_kernels.sample_rows_with_paths(args[0], args[1][:1], *args[2:], True)


@on_gpu_only
def test_the_kernel_in_a_cuda_graph_and_from_bf16_logits():
    """Replayed in a CUDA graph with new logits in place, bf16 logits at a 49k vocabulary: the
    same tokens as the PyTorch sampler over the same (bf16-rounded) logits."""
    logits, seed, pos, temperature, top_p = rows(256, 49152, seed=1)
    logits = logits.bfloat16()
    run = lambda: sampling.sample_rows(logits, seed, pos, temperature, top_p, True)  # noqa: E731
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run()
    logits.copy_(rows(256, 49152, seed=2)[0].bfloat16())
    graph.replay()
    want = reference(logits, seed, pos, temperature, top_p, True)
    assert (out.cpu() != want).sum() <= 2  # fp32 sums against fp64: rounding at an edge
