"""The `sglang` target backend (production): an in-process SGLang 0.5.23 engine per target worker.

UNVERIFIED: SGLang's runtime cannot run on the machines this project is developed and tested on
(its CUDA kernels do not fit them). This module is written to the 0.5.23 API as read from the
package (`ServerArgs` fields `enable_return_aux_hidden_states`, `return_aux_hidden_state_layer_ids`,
`Engine.generate(..., return_hidden_states=True)`); only `server_args_for` is tested, and only
where sglang is importable. Keep it small.

Capture: with `--enable-return-aux-hidden-states`, a request's hidden states are the concatenated
outputs of the requested layers (BailingMoeV3 captures after layer i, our convention). The final
normed state is obtained by also capturing the last layer and applying the target's final RMSNorm.
"""

from __future__ import annotations

from pathlib import Path

import torch

from draft_models import SequenceSample

from .config import RunConfig
from .data import Conversation, prompt_turns
from .targets import check_tokenizer, load_target_spec


def server_args_for(model_dir: Path, cfg: RunConfig, capture_ids: list[int], base_gpu_id: int = 0):
    """The ServerArgs of one target worker's engine (no draft: capture only)."""
    from sglang.srt.server_args import ServerArgs

    return ServerArgs(
        model_path=str(model_dir),
        tp_size=cfg.target.tp_size,
        base_gpu_id=base_gpu_id,
        dtype="bfloat16" if cfg.target.dtype == "auto" else cfg.target.dtype,
        mem_fraction_static=cfg.target.sglang_mem_fraction,
        context_length=cfg.data.max_length,
        speculative_algorithm="DSPARK",  # with the flag below: only names the capture convention
        enable_return_aux_hidden_states=True,
        return_aux_hidden_state_layer_ids=list(capture_ids),
        skip_tokenizer_init=True,
    )


class SGLangTarget:
    """Regenerate with SGLang, then one prefill with aux capture over prompt + response."""

    def __init__(self, model_dir: Path, cfg: RunConfig, layer_ids: list[int], *, device: torch.device) -> None:
        import sglang
        from safetensors import safe_open

        self.spec = load_target_spec(model_dir)
        self.tokenizer = check_tokenizer(model_dir, self.spec)
        self.cfg, self.layer_ids, self.device = cfg, list(layer_ids), device
        last = self.spec.num_layers - 1
        self.capture = self.layer_ids + ([last] if last not in self.layer_ids else [])
        args = server_args_for(model_dir, cfg, self.capture, base_gpu_id=device.index or 0)
        self.engine = sglang.Engine(server_args=args)
        norm = None
        for f in sorted(Path(model_dir).glob("*.safetensors")):
            with safe_open(str(f), framework="pt") as st:
                if "model.norm.weight" in st.keys():
                    norm = st.get_tensor("model.norm.weight")
        if norm is None:
            raise ValueError(f"{model_dir}: final norm weight model.norm.weight not found")
        self.norm = torch.nn.RMSNorm(norm.numel(), eps=self.spec.rms_norm_eps).to(device)
        self.norm.weight.data.copy_(norm.to(device))

    def produce(self, g: int, conversation: Conversation) -> SequenceSample:
        t = self.cfg.target
        prompt = self.tokenizer.apply_chat_template(prompt_turns(conversation), add_generation_prompt=True,
                                                    tokenize=True, return_dict=True)["input_ids"]
        prompt = prompt[-self.cfg.data.max_prompt_tokens:]
        setting = t.sampling[g % len(t.sampling)]
        out = self.engine.generate(input_ids=prompt, sampling_params={
            "temperature": setting.temperature, "top_p": setting.top_p,
            "max_new_tokens": max(1, min(t.max_new_tokens, self.cfg.data.max_length - len(prompt))),
            "sampling_seed": (self.cfg.train.seed * 1_000_003 + g) % (1 << 31)})
        ids = (list(prompt) + list(out["output_ids"]))[: self.cfg.data.max_length]
        full = self.engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 1}, return_hidden_states=True)
        states = torch.as_tensor(full["meta_info"]["hidden_states"][0], device=self.device)[: len(ids)]
        h = self.spec.hidden_size
        aux = states[:, : len(self.layer_ids) * h]
        final = self.norm(states[:, self.capture.index(self.spec.num_layers - 1) * h:][:, :h].float())
        mask = torch.zeros(len(ids), dtype=torch.bool)
        mask[len(prompt):] = True
        return SequenceSample(torch.tensor(ids), mask, aux.contiguous(), final.to(aux.dtype))
