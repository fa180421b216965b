"""The sglang backend cannot run here; its ServerArgs are checked wherever sglang imports."""

from pathlib import Path

import pytest

from splitserve.config import RunConfig, TargetConfig


def test_server_args_request_aux_capture_at_the_draft_layers():
    pytest.importorskip("sglang.srt.server_args", reason="sglang is not installed (optional extra)")
    from splitserve.sglang_target import server_args_for

    cfg = RunConfig(target=TargetConfig(kind="path", backend="sglang", path="/models/ling", tp_size=4))
    args = server_args_for(Path("/models/ling"), cfg, [1, 11, 23, 29, 35, 41], base_gpu_id=0)
    assert args.enable_return_aux_hidden_states is True
    assert list(args.return_aux_hidden_state_layer_ids) == [1, 11, 23, 29, 35, 41]
    assert args.tp_size == 4 and args.model_path == "/models/ling"
