"""Capture what a target worker sends: the outputs of chosen decoder layers and the final normed
hidden state, via forward hooks (so the convention does not depend on how a model fills
`output_hidden_states`, which for Llama returns the *normed* state in place of the last layer's)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from draft_models import SequenceSample


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(f"{type(model).__name__}: expected decoder layers at .model.layers")
    return layers


def final_norm(model: nn.Module) -> nn.Module:
    norm = getattr(getattr(model, "model", None), "norm", None)
    if not isinstance(norm, nn.Module):
        raise ValueError(f"{type(model).__name__}: expected the final norm at .model.norm")
    return norm


@contextmanager
def capture_states(model: nn.Module, layer_ids: Sequence[int]) -> Iterator[dict]:
    """Within the block, every forward stores {"layers": {i: [B, L, H]}, "final": [B, L, H]}.
    Id -1 is the embedding output (the input of layer 0), as in DeepSpec."""
    layers = decoder_layers(model)
    bad = [i for i in layer_ids if not -1 <= int(i) < len(layers)]
    if bad:
        raise ValueError(
            f"target_layer_ids {list(layer_ids)}: {bad} outside [-1, {len(layers) - 1}] "
            f"({type(model).__name__} has {len(layers)} layers; -1 is the embedding output)"
        )
    store: dict = {"layers": {}}

    def keep_layer(i):
        def hook(_module, _inputs, output):
            store["layers"][i] = output[0] if isinstance(output, tuple) else output

        return hook

    def keep_final(_module, _inputs, output):
        store["final"] = output

    modules = {-1: model.get_input_embeddings(), **dict(enumerate(layers))}
    handles = [modules[int(i)].register_forward_hook(keep_layer(int(i))) for i in layer_ids]
    handles.append(final_norm(model).register_forward_hook(keep_final))
    try:
        yield store
    finally:
        for h in handles:
            h.remove()


@torch.no_grad()
def target_sample(
    model: nn.Module, input_ids: torch.Tensor, loss_mask: torch.Tensor, layer_ids: Sequence[int]
) -> SequenceSample:
    """One target forward over a single sequence [L] -> the SequenceSample a trainer consumes."""
    with capture_states(model, layer_ids) as store:
        model(input_ids[None].to(next(model.parameters()).device), use_cache=False)
    aux = torch.cat([store["layers"][int(i)][0] for i in layer_ids], dim=-1)
    return SequenceSample(
        input_ids=input_ids,
        loss_mask=loss_mask.bool(),
        aux_hidden=aux,
        final_hidden=store["final"][0],
    )
