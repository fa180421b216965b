"""The sglang backend, checked against the installed sglang 0.5.23 package (its runtime cannot
run here): ServerArgs through SGLang's own resolution, the sampling dict through its
SamplingParams, Engine.generate's signature, and the slicing of rows shaped as SGLang returns."""

import pytest
import torch
from conftest import run_sglang
from test_export import sglang_json

from splitserve.target.backends import TargetSetup, make_backend
from splitserve.target.backends.sglang import capture_ids_for, split_captured
from splitserve.target.config import TargetConfig
from splitserve.target.embedded import ensure_smollm2


@pytest.mark.slow
def test_server_args_pass_sglangs_own_resolution(sglang_site):
    """DSPARK without a draft path plus --enable-return-aux-hidden-states is SGLang's capture-only
    mode: the whole resolution pipeline accepts our arguments for a real model directory."""
    got = sglang_json(run_sglang(sglang_site, "server_args", ensure_smollm2(), "1,15,29"))
    assert got["resolved"] and got["aux_ids"] == [1, 15, 29]
    assert got["seed"] == 1234  # SamplingParams knows sampling_seed
    assert {"input_ids", "sampling_params", "return_hidden_states"} <= set(got["generate_params"])


def test_captured_rows_split_into_aux_and_final_states():
    """SGLang concatenates the captured layers in ascending layer order; the draft's ids come
    first in the aux state, the last layer (for the final norm) is the last block."""
    layer_ids, hidden, length = [1, 11, 23, 29, 35], 4, 3
    capture = capture_ids_for(layer_ids, 42)
    assert capture == [1, 11, 23, 29, 35, 41]
    rows = torch.cat([torch.full((length, hidden), float(i)) for i in capture], dim=-1)
    aux, last = split_captured(rows, capture, layer_ids, hidden)
    assert aux.shape == (length, 5 * hidden) and last.shape == (length, hidden)
    assert aux[0, ::hidden].tolist() == [1.0, 11.0, 23.0, 29.0, 35.0] and bool((last == 41).all())
    # the final layer among the draft's own ids: captured once, used twice
    aux, last = split_captured(rows[:, -2 * hidden :], [35, 41], [35, 41], hidden)
    assert aux[0, ::hidden].tolist() == [35.0, 41.0] and bool((last == 41).all())


def _sglang_setup(**cfg) -> TargetSetup:
    """An sglang backend's setup on the embedded SmolLM2 (refused before any engine starts)."""
    return TargetSetup(
        ensure_smollm2(),
        TargetConfig(backend="sglang", **cfg),
        [1, 15],
        torch.device("cpu"),
        seed=0,
        max_length=64,
        max_prompt_tokens=32,
    )


def test_targets_whose_last_layer_sglang_never_captures_are_refused():
    with pytest.raises(ValueError, match="llama does not, so its final hidden state cannot be"):
        make_backend(_sglang_setup())


def test_teacher_forcing_is_refused_by_name_not_ignored():
    # produce always regenerates: target.regenerate=false was silently ignored before
    with pytest.raises(ValueError, match="target.regenerate=false .* runs on target.backend=hf"):
        make_backend(_sglang_setup(regenerate=False))
