"""A toy draft architecture registered from outside the library (tests/test_registry.py): one
MLP head per block position over the fused target feature before the anchor plus the anchor's
embedding (Medusa-like). It exists to prove that an architecture plugs in with one module and one
registration, and nothing in draft_models/, splitserve/ or serving/ is edited for it."""

from __future__ import annotations

import torch
from torch import nn

from draft_models import DraftArch, DraftModel, DraftOutput, draft_loss, pick, register_arch
from draft_models.models import init_weights


class ToyDraft(DraftModel):
    def __init__(self, cfg, target_head) -> None:
        super().__init__(cfg, target_head)
        h = cfg.hidden_size
        self.position_heads = nn.ModuleList(
            nn.Sequential(nn.Linear(h, h), nn.SiLU(), nn.Linear(h, h))
            for _ in range(cfg.block_size)
        )
        self.norm = nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        init_weights(self)

    def predict(self, feature: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        """Feature of the position before each anchor [N, m*H] + anchor tokens [N] -> [N, G, H]."""
        x = self.fuse_context(feature) + self.target_head.embed(anchor).to(self.fc.weight.dtype)
        return self.norm(torch.stack([head(x) for head in self.position_heads], dim=1))

    def forward(self, batch, backend: str = "auto") -> DraftOutput:
        return DraftOutput(
            hidden=self.predict(
                batch.ctx_features[batch.anchor_ctx_row], batch.block_input_ids[:, 0]
            )
        )


class ToyProposer:
    def __init__(self, draft: ToyDraft, gamma: int, sts) -> None:
        self.draft, self.gamma, self.last = draft, gamma, None
        self.confidence_logits = None

    def commit(self, feats: torch.Tensor, tokens: torch.Tensor, start: int) -> None:
        # the feature of the last committed position: the one before the next anchor
        self.last = feats[-1:]

    def propose(self, anchor: torch.Tensor, pos: int, temperature: float, generator):
        hidden = self.draft.predict(self.last, anchor)[0]
        tokens, dists = [], []
        for k in range(self.gamma):
            token, probs = pick(
                self.draft.target_head.logits(hidden[k : k + 1])[0].float(), temperature, generator
            )
            tokens.append(token)
            dists.append(probs)
        survival = torch.ones(self.gamma, dtype=torch.float64, device=anchor.device)
        return torch.cat(tokens), (torch.stack(dists) if temperature > 0 else None), survival


def register() -> None:
    register_arch(
        DraftArch(
            name="toy",
            model=ToyDraft,
            proposer=ToyProposer,
            loss=draft_loss,
            samples_from_anchor=True,
            defaults={
                "sequential_head": "none",
                "confidence_head": False,
                "loss": {"ce_weight": 0.5, "distill_weight": 0.5, "confidence_weight": 0.0},
            },
        ),
        replace=True,
    )


register()
