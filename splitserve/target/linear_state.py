"""Rollback for targets with linear-attention (KDA) layers, whose recurrent state cannot be cropped.

During a verify forward each such layer runs its W tokens one at a time through its own one-token
decode path (the causal-conv update and the recurrent KDA step, exactly what target-only decoding
runs) and keeps a copy of its conv and recurrent state after every position: the staged states.
Once acceptance is known, the state after the last committed position (anchor + accepted drafts)
is written back and the others are dropped; the attention layers' KV caches are cropped as usual.
One token at a time keeps this reference simple and bit-faithful to target-only decoding; a GPU
path would stage the same per-position states from one fused recurrent kernel.
"""

from __future__ import annotations

import inspect
import sys
import types

import torch
from torch import nn
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, LinearAttentionCacheLayerMixin

# class-name suffixes: bailing_hybrid KDA, Qwen3-Next
LINEAR_LAYER_CLASSES = (
    "DeltaAttention",
    "GatedDeltaNet",
)


def linear_layers(model: nn.Module) -> dict[int, nn.Module]:
    """layer_idx -> linear-attention module, for the model's linear layers."""
    return {
        m.layer_idx: m
        for m in model.modules()
        if type(m).__name__.endswith(LINEAR_LAYER_CLASSES)
        and isinstance(getattr(m, "layer_idx", None), int)
    }


def has_linear_layers(model: nn.Module) -> bool:
    return bool(linear_layers(model))


# transformers binds these module-level functions to fla-core's kernels when fla imports, else to
# its pure-torch reference
# (`transformers.integrations.hub_kernels.use_kernel_func_from_hub_with_fallback`).
KERNEL_FUNCTIONS = (
    "chunk_kimi_delta_attention",
    "recurrent_kimi_delta_attention",
    "chunk_gated_delta_rule",
    "fused_recurrent_gated_delta_rule",
)


def linear_modeling_module(model: nn.Module):
    """The transformers modeling module whose globals the model's linear layers call (None if the
    model has no linear layers)."""
    layers = linear_layers(model)
    return sys.modules[type(next(iter(layers.values()))).__module__] if layers else None


def linear_kernels(model: nn.Module) -> dict[str, str]:
    """function name -> module of the implementation the model's linear layers call (e.g.
    `fla.ops.kda.chunk`, or the modeling module itself for the torch fallback): says whether the
    fast kernels are in use. Empty for a model without linear layers."""
    module = linear_modeling_module(model)
    if module is None:
        return {}
    found = {}
    for name in KERNEL_FUNCTIONS:
        fn = getattr(module, name, None)
        if fn is None:
            continue
        try:
            impl = inspect.getclosurevars(fn).nonlocals.get("implementation", fn)
        except TypeError:
            impl = fn
        found[name] = getattr(impl, "__module__", "unknown")
    return found


class LinearStateStager:
    """Wraps a model's linear-attention layers for the lifetime of one decode (a context
    manager)."""

    def __init__(self, model: nn.Module) -> None:
        self.layers = linear_layers(model)
        self.staging = False
        self.staged: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def __enter__(self) -> LinearStateStager:
        for idx, module in self.layers.items():
            original = module.forward

            def staged_forward(
                this, hidden_states, cache=None, attention_mask=None, _orig=original, _idx=idx, **kw
            ):
                if not self.staging or cache is None or hidden_states.shape[1] == 1:
                    return _orig(hidden_states, cache=cache, attention_mask=attention_mask, **kw)
                outs, states = [], []
                layer = cache.layers[_idx]
                for t in range(hidden_states.shape[1]):
                    outs.append(
                        _orig(hidden_states[:, t : t + 1], cache=cache, attention_mask=None, **kw)
                    )
                    states.append((layer.conv_states[0].clone(), layer.recurrent_states[0].clone()))
                self.staged[_idx] = states
                return torch.cat(outs, dim=1)

            module._splitserve_original_forward = original
            module.forward = types.MethodType(staged_forward, module)
        return self

    def __exit__(self, *exc) -> None:
        for module in self.layers.values():
            module.forward = module._splitserve_original_forward
            del module._splitserve_original_forward

    def commit(self, cache: DynamicCache, position: int) -> None:
        """Keep the states after staged position `position` (0 = the anchor)."""
        for idx, states in self.staged.items():
            conv, recurrent = states[position]
            layer = cache.layers[idx]
            layer.conv_states[0].copy_(conv)
            layer.recurrent_states[0].copy_(recurrent)
        self.staged = {}


def crop_cache(cache: DynamicCache, remove: int) -> None:
    """Drop the last `remove` positions from every layer that keeps per-position keys/values (all
    layers of a plain cache); linear-attention layers are restored by `LinearStateStager.commit`."""
    if remove <= 0:
        return
    for layer in cache.layers:
        if isinstance(layer, LinearAttentionCacheLayerMixin):
            if isinstance(layer, DynamicLayer):  # a layer holding both kinds of state
                DynamicLayer.crop(layer, -remove)
        else:
            layer.crop(-remove)
