"""The `sglang` target backend (production): an in-process SGLang 0.5.23 engine per target worker.

Checked against the installed sglang 0.5.23 package (tests/test_sglang_target.py, in the same
isolated environment as the export test): `server_args_for`'s ServerArgs pass SGLang's own
resolution (DSPARK without a draft path is the documented capture-only mode), the sampling dict
is accepted by SGLang's SamplingParams, the keyword arguments of `Engine.generate` exist in its
signature, and `split_captured` is tested on rows shaped as SGLang returns them.
UNVERIFIED: an engine has never run (SGLang's runtime cannot run on the machines this project is
developed on).

What SGLang returns (read from 0.5.23): with `enable_return_aux_hidden_states`, a request's
`meta_info["hidden_states"][0]` holds one row per prefill token, the outputs of the captured
layers concatenated in ascending layer order; the final normed state is never returned, so the
last layer is captured too and normed here with the target's final RMSNorm. Only model classes
that capture after a layer itself can capture the last one (BailingMoeV3ForCausalLM, i.e. Ling
targets); for others this backend refuses. A radix-cache prefix hit or a chunked prefill would
drop rows, hence `disable_radix_cache` and a chunk as long as the longest sample; SGLang honours
a per-request `sampling_seed` only under deterministic inference, hence that flag (regeneration
must be reproducible for resume).
"""

from __future__ import annotations

from pathlib import Path

import torch

from draft_models import SequenceSample
from draft_models.families import family, final_capture_types

from ...data import Conversation
from ..config import TargetConfig, regeneration_seed, resolve_dtype
from .base import TargetBackend, TargetSetup, register_backend


def capture_ids_for(layer_ids: list[int], num_layers: int) -> list[int]:
    """The layers the engine captures: the draft's (ascending, as SGLang orders them) and the
    last one, whose output normed is the final hidden state."""
    return sorted(set(layer_ids) | {num_layers - 1})


def split_captured(
    states: torch.Tensor, capture_ids: list[int], layer_ids: list[int], hidden: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows [L, len(capture_ids) * hidden] (layer outputs in capture_ids order) -> (aux [L,
    len(layer_ids) * hidden] in layer_ids order, the last layer's output [L, hidden])."""
    if states.shape[-1] != len(capture_ids) * hidden:
        raise ValueError(
            f"SGLang returned rows of width {states.shape[-1]}, expected "
            f"{len(capture_ids)} captured layers x hidden {hidden}"
        )
    block = {i: states[:, j * hidden : (j + 1) * hidden] for j, i in enumerate(capture_ids)}
    return torch.cat([block[i] for i in layer_ids], dim=-1), block[max(capture_ids)]


def server_args_for(
    model_dir: Path,
    cfg: TargetConfig,
    capture_ids: list[int],
    *,
    context_length: int,
    base_gpu_id: int = 0,
):
    """The ServerArgs of one target worker's engine: capture only, no draft."""
    from sglang.srt.server_args import ServerArgs

    return ServerArgs(
        model_path=str(model_dir),
        device="cuda",
        tp_size=cfg.tp_size,
        base_gpu_id=base_gpu_id,
        dtype=str(resolve_dtype(cfg.dtype, "cuda")).removeprefix("torch."),
        mem_fraction_static=cfg.sglang_mem_fraction,
        context_length=context_length,
        speculative_algorithm="DSPARK",  # with the flag below: names the capture convention only
        enable_return_aux_hidden_states=True,
        return_aux_hidden_state_layer_ids=list(capture_ids),
        disable_radix_cache=True,  # a prefix hit returns no rows for the cached tokens
        chunked_prefill_size=max(context_length, 8192),  # middle chunks' rows are not kept
        enable_deterministic_inference=True,  # else sampling_seed is ignored
        skip_tokenizer_init=True,
    )


def sampling_params(temperature: float, top_p: float, max_new_tokens: int, seed: int) -> dict:
    """The per-request sampling dict (SGLang's SamplingParams keywords)."""
    return {
        "temperature": temperature,
        "top_p": top_p,
        "max_new_tokens": max_new_tokens,
        "sampling_seed": seed,
    }


@register_backend("sglang")
class SGLangTarget(TargetBackend):
    """Regenerate with SGLang, then one prefill with aux capture over prompt + response."""

    tensor_parallel = True  # one engine spans target.tp_size GPUs

    def __init__(self, setup: TargetSetup) -> None:
        super().__init__(setup)
        if not self.cfg.regenerate:  # produce always regenerates: refuse rather than ignore it
            raise ValueError(
                "target.backend=sglang regenerates every answer; target.regenerate=false "
                "(teacher forcing on the dataset's answers) runs on target.backend=hf or static"
            )
        if not family(self.spec.model_type).captures_final_layer:
            raise ValueError(
                f"target.backend=sglang needs a target whose SGLang model captures its last layer "
                f"(model types {', '.join(final_capture_types())}: Ling targets); "
                f"{self.spec.model_type} does not, so its final hidden state cannot be obtained. "
                "Use target.backend=hf"
            )
        if min(self.layer_ids) < 0:
            raise ValueError(
                f"target.backend=sglang: layer ids {self.layer_ids} include -1 (the "
                "embedding output), which SGLang cannot capture"
            )
        import sglang
        from safetensors import safe_open

        self.capture = capture_ids_for(self.layer_ids, self.spec.num_layers)
        args = server_args_for(
            setup.model_dir,
            self.cfg,
            self.capture,
            context_length=setup.max_length,
            base_gpu_id=self.device.index or 0,
        )
        self.engine = sglang.Engine(server_args=args)
        norm = None
        for f in sorted(Path(setup.model_dir).glob("*.safetensors")):
            with safe_open(str(f), framework="pt") as st:
                if "model.norm.weight" in st.keys():
                    norm = st.get_tensor("model.norm.weight")
        if norm is None:
            raise ValueError(f"{setup.model_dir}: final norm weight model.norm.weight not found")
        self.norm = torch.nn.RMSNorm(norm.numel(), eps=self.spec.rms_norm_eps).to(self.device)
        self.norm.weight.data.copy_(norm.to(self.device))

    def produce(self, g: int, conversation: Conversation) -> SequenceSample:
        prompt = self.prompt(conversation)
        setting = self.setting(g)
        out = self.engine.generate(
            input_ids=prompt,
            sampling_params=sampling_params(
                setting.temperature,
                setting.top_p,
                self.budget(len(prompt)),
                regeneration_seed(self.setup.seed, g),
            ),
        )
        ids, mask = self.with_mask(prompt, out["output_ids"])
        ids, mask = ids[: self.setup.max_length], mask[: self.setup.max_length]
        full = self.engine.generate(
            input_ids=ids.tolist(), sampling_params={"max_new_tokens": 1}, return_hidden_states=True
        )
        rows = torch.as_tensor(full["meta_info"]["hidden_states"][0], device=self.device)[
            : len(ids)
        ]
        aux, last = split_captured(rows, self.capture, self.layer_ids, self.spec.hidden_size)
        final = self.norm(last.float())
        return SequenceSample(ids, mask, aux.contiguous(), final.to(aux.dtype))
