"""Rotary position embeddings: full, partial, interleaved (GPT-J pairs) and none.

Every variant rotates pairs of dimensions by angle pos * theta^(-2i/rotary_dim); they differ
only in *which* dimensions form a pair and how many are rotated:
- full / partial (NeoX "half split"): pair (i, i + rotary_dim/2) of the first `rotary_dim` dims;
- interleaved (GPT-J, Ling-3 MLA, `is_neox_style: false` in SGLang): pair (2i, 2i+1);
- none: identity.
"""

from __future__ import annotations

import torch
from torch import nn


class Rotary(nn.Module):
    def __init__(self, dim: int, rotary_dim: int, theta: float, interleaved: bool) -> None:
        super().__init__()
        if rotary_dim % 2 or not 0 <= rotary_dim <= dim:
            raise ValueError(f"rotary_dim={rotary_dim} must be even and within head dim {dim}")
        self.dim = dim
        self.rotary_dim = rotary_dim
        self.interleaved = interleaved
        if rotary_dim:
            inv_freq = theta ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
        else:
            inv_freq = torch.zeros(0, dtype=torch.float64)
        # Not a parameter and not saved: recomputed from the config, like SGLang's rotary cache.
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)

    @classmethod
    def for_variant(cls, variant: str, dim: int, partial_factor: float, theta: float) -> Rotary:
        if variant == "none":
            return cls(dim, 0, theta, interleaved=False)
        if variant == "partial":
            return cls(dim, int(dim * partial_factor), theta, interleaved=False)
        if variant == "full":
            return cls(dim, dim, theta, interleaved=False)
        if variant == "interleaved":
            return cls(dim, dim, theta, interleaved=True)
        raise ValueError(
            f"unknown rope variant {variant!r}; allowed: full, partial, interleaved, none"
        )

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: [tokens, heads, dim]; positions: [tokens] (absolute token positions)."""
        if self.rotary_dim == 0:
            return x
        angles = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]  # [T, rot/2]
        cos = angles.cos()[:, None, :].to(x.dtype)
        sin = angles.sin()[:, None, :].to(x.dtype)
        rot, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        if self.interleaved:
            a, b = rot[..., 0::2], rot[..., 1::2]
            out = torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)
        else:
            half = self.rotary_dim // 2
            a, b = rot[..., :half], rot[..., half:]
            out = torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)
        return torch.cat((out, rest), dim=-1)
