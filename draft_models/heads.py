"""The frozen target head and DSpark's sequential and confidence heads.

Sequential heads produce, for each block slot k, a rank-r latent z_k from the previously chosen
token x_{k-1}; the vocabulary bias is B_k = markov_w2(z_k). Keeping the latent separate lets the
loss fold the bias into the chunked LM-head matmul ([h ; z] @ [E ; W2]^T) instead of
materialising a [rows, vocab] bias tensor.
"""

from __future__ import annotations

import torch
from torch import nn


class FrozenTargetHead:
    """The target's embedding and LM head, shared by reference.

    Deliberately *not* an nn.Module: assigning it to a draft registers nothing, so these tensors
    never appear in the draft's parameters(), state_dict() or optimizer, and are never saved.
    """

    def __init__(self, embed_weight: torch.Tensor, lm_head_weight: torch.Tensor) -> None:
        if embed_weight.shape[1] != lm_head_weight.shape[1]:
            raise ValueError(
                f"embedding width {embed_weight.shape[1]} != LM head width "
                f"{lm_head_weight.shape[1]}"
            )
        self.embed_weight = embed_weight.detach().requires_grad_(False)
        self.lm_head_weight = lm_head_weight.detach().requires_grad_(False)

    @classmethod
    def from_hf_model(cls, model: nn.Module) -> FrozenTargetHead:
        return cls(model.get_input_embeddings().weight, model.get_output_embeddings().weight)

    @property
    def vocab_size(self) -> int:
        return int(self.lm_head_weight.shape[0])

    @property
    def hidden_size(self) -> int:
        return int(self.lm_head_weight.shape[1])

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return nn.functional.embedding(ids, self.embed_weight)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden.to(self.lm_head_weight.dtype) @ self.lm_head_weight.T

    def to(self, device=None, dtype=None) -> FrozenTargetHead:
        same = self.embed_weight.data_ptr() == self.lm_head_weight.data_ptr()
        embed = self.embed_weight.to(device=device, dtype=dtype)
        return FrozenTargetHead(
            embed, embed if same else self.lm_head_weight.to(device=device, dtype=dtype)
        )


class MarkovHead(nn.Module):
    """B(x_{k-1}, .) = W1[x_{k-1}] W2: a low-rank bigram correction (SGLang type "vanilla").

    W1 is indexed by the previous token's *target* id (the anchor may be any target token); W2
    scores the draft's output vocabulary: `out_size` ids of a pruned vocabulary (as speculators'
    MarkovHead: W1 [V, r], W2 [r, K]), else the whole vocabulary."""

    sglang_type = "vanilla"

    def __init__(
        self, vocab_size: int, rank: int, hidden_size: int, out_size: int | None = None
    ) -> None:
        super().__init__()
        self.rank = rank
        self.markov_w1 = nn.Embedding(vocab_size, rank)
        self.markov_w2 = nn.Linear(rank, out_size or vocab_size, bias=False)

    def prev_embedding(self, prev_tokens: torch.Tensor) -> torch.Tensor:
        return self.markov_w1(prev_tokens)

    def init_state(self, n: int, like: torch.Tensor) -> torch.Tensor | None:
        return None

    def step(self, state, prev_tokens: torch.Tensor, hidden: torch.Tensor):
        """One left-to-right step: (latent z_k [N, r], next state). Reads only x_{k-1}."""
        return self.markov_w1(prev_tokens), state

    def latents(self, prev_tokens: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """Teacher-forced latents for whole blocks: prev_tokens [N, G], hidden [N, G, H]."""
        return self.markov_w1(prev_tokens)


class GatedMarkovHead(MarkovHead):
    """The Markov embedding gated by the slot's hidden state (SGLang type "gated"):
    z_k = sigmoid(gate_proj([h_k ; W1[x_{k-1}]])) * W1[x_{k-1}], bias B_k = W2 z_k."""

    sglang_type = "gated"

    def __init__(
        self, vocab_size: int, rank: int, hidden_size: int, out_size: int | None = None
    ) -> None:
        super().__init__(vocab_size, rank, hidden_size, out_size)
        self.gate_proj = nn.Linear(hidden_size + rank, rank)

    def _gated(self, prev_tokens: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        emb = self.markov_w1(prev_tokens)
        gate = torch.sigmoid(self.gate_proj(torch.cat((hidden.to(emb.dtype), emb), dim=-1)))
        return gate * emb

    def step(self, state, prev_tokens, hidden):
        return self._gated(prev_tokens, hidden), state

    def latents(self, prev_tokens, hidden):
        return self._gated(prev_tokens, hidden)


class RNNHead(MarkovHead):
    """Gated recurrent state s_k over [s_{k-1}; W1[x_{k-1}]; h_k] (SGLang type "rnn");
    output latent tanh(W_o z_k). The state restarts at zero in every block."""

    sglang_type = "rnn"

    def __init__(
        self, vocab_size: int, rank: int, hidden_size: int, out_size: int | None = None
    ) -> None:
        super().__init__(vocab_size, rank, hidden_size, out_size)
        self.joint_proj = nn.Linear(2 * rank + hidden_size, 3 * rank)

    def init_state(self, n: int, like: torch.Tensor) -> torch.Tensor:
        return like.new_zeros(n, self.rank)

    def step(self, state, prev_tokens, hidden):
        z = torch.cat((state, self.markov_w1(prev_tokens), hidden.to(state.dtype)), dim=-1)
        gate, candidate, output = self.joint_proj(z).chunk(3, dim=-1)
        gate = torch.sigmoid(gate)
        new_state = gate * state + (1.0 - gate) * torch.tanh(candidate)
        return torch.tanh(output), new_state

    def latents(self, prev_tokens, hidden):
        state = self.init_state(prev_tokens.shape[0], hidden)
        out = []
        for k in range(prev_tokens.shape[1]):
            z, state = self.step(state, prev_tokens[:, k], hidden[:, k])
            out.append(z)
        return torch.stack(out, dim=1)


SEQUENTIAL_HEAD_CLASSES = {"markov": MarkovHead, "gated": GatedMarkovHead, "rnn": RNNHead}


class ConfidenceHead(nn.Module):
    """c_k = sigmoid(w . [h_k ; W1[x_{k-1}]]): P(slot k survives | slots < k survived)."""

    def __init__(self, hidden_size: int, markov_rank: int) -> None:
        super().__init__()
        self.with_markov = markov_rank > 0
        self.proj = nn.Linear(hidden_size + markov_rank, 1)

    def clip_gradients(self, max_norm: float) -> None:
        """Clip each of this head's tensors' gradient to `max_norm` as backward produces it
        (before DeepSpeed accumulates it or clips the whole draft's norm)."""

        def clip(grad: torch.Tensor) -> torch.Tensor:
            norm = grad.float().norm()
            return grad * (max_norm / (norm + 1e-6)).clamp(max=1.0).to(grad.dtype)

        for p in self.parameters():
            p.register_hook(clip)

    def forward(self, hidden: torch.Tensor, prev_embedding: torch.Tensor | None) -> torch.Tensor:
        """Returns the raw logit (STS temperatures divide it before the sigmoid)."""
        features = torch.cat((hidden, prev_embedding), dim=-1) if self.with_markov else hidden
        return self.proj(features).squeeze(-1)
