import pytest
import torch

from draft_models.rope import Rotary

DIM, THETA = 16, 10000.0


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def rotate(r: Rotary, x, pos):
    return r.double()(x, torch.tensor(pos))


def test_partial_with_factor_one_equals_full():
    x, pos = rand(5, 3, DIM), [0, 3, 7, 100, 4096]
    full = Rotary.for_variant("full", DIM, 0.5, THETA)
    partial = Rotary.for_variant("partial", DIM, 1.0, THETA)
    torch.testing.assert_close(rotate(partial, x, pos), rotate(full, x, pos), rtol=0, atol=0)


def test_partial_rotates_only_the_leading_fraction():
    x, pos = rand(4, 2, DIM), [1, 2, 3, 50]
    out = rotate(Rotary.for_variant("partial", DIM, 0.25, THETA), x, pos)
    torch.testing.assert_close(out[..., 4:], x[..., 4:], rtol=0, atol=0)
    assert not torch.allclose(out[..., :4], x[..., :4])


def test_interleaved_equals_half_split_up_to_a_fixed_permutation():
    # De-interleave (0,2,4,...,1,3,5,...) maps GPT-J pairs (2i, 2i+1) onto NeoX pairs (i, i+D/2).
    perm = torch.cat((torch.arange(0, DIM, 2), torch.arange(1, DIM, 2)))
    x, pos = rand(6, 2, DIM), [0, 1, 5, 17, 333, 9000]
    inter = rotate(Rotary.for_variant("interleaved", DIM, 1.0, THETA), x, pos)
    half = rotate(Rotary.for_variant("full", DIM, 1.0, THETA), x[..., perm], pos)
    torch.testing.assert_close(inter[..., perm], half, rtol=1e-12, atol=1e-12)
    # ...and the permutation matters: without it the two differ.
    assert not torch.allclose(inter, rotate(Rotary.for_variant("full", DIM, 1.0, THETA), x, pos))


@pytest.mark.parametrize(
    "variant,factor", [("full", 1.0), ("partial", 0.5), ("interleaved", 1.0), ("none", 1.0)]
)
def test_dot_product_depends_only_on_relative_distance(variant, factor):
    r = Rotary.for_variant(variant, DIM, factor, THETA)
    q, k = rand(1, 4, DIM, seed=1), rand(1, 4, DIM, seed=2)

    def score(m, n):
        return (rotate(r, q, [m]) * rotate(r, k, [n])).sum(-1)

    for m, n in [(5, 2), (40, 1), (3, 3), (0, 9)]:
        for shift in (1, 17, 1000):
            torch.testing.assert_close(
                score(m + shift, n + shift), score(m, n), rtol=1e-9, atol=1e-9
            )
    if variant != "none":
        assert not torch.allclose(score(5, 2), score(6, 2))  # the distance itself does matter


def test_bad_rotary_shapes_are_refused():
    with pytest.raises(ValueError, match="rotary_dim"):
        Rotary(16, 5, THETA, interleaved=False)
    with pytest.raises(ValueError, match="allowed: full, partial, interleaved, none"):
        Rotary.for_variant("yarn", 16, 1.0, THETA)
