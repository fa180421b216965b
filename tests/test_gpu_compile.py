"""The fast paths that only Inductor's GPU code generation exercises (skipped without a CUDA
device; run on the device machine: `python -m pytest -q tests/test_gpu_compile.py`). Both cases
failed on an H100 with torch 2.11 (2026-12-05) while every CPU test passed: Inductor passes a
Python float to a user Triton kernel as fp64 (the decode attention's `scale`), and its split
scan could not generate the sampler's cumsum over a 49k vocabulary."""

import pytest
import torch
from test_static_families import family_target

from splitserve.target.runtime import attention_kernels
from splitserve.target.runtime.regen import Regenerator, Request
from splitserve.target.runtime.static_model import StaticDecoder

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not attention_kernels.available(), reason="needs a CUDA device and Triton"),
]
CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from nothing and must produce graphs: past its recompile limit dynamo
    falls back to eager without a word, which would pass a compiled-against-eager comparison."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield counters
    torch._dynamo.reset()


@pytest.mark.parametrize("model_type", ["llama", "gemma3_text", "qwen3_moe"])
def test_a_compiled_step_with_the_kernels_inside_equals_the_eager_step(
    model_type, monkeypatch, fresh_dynamo
):
    """kernels_in_compile: the decode attention (and the MoE pair GEMV) traced into a
    torch.compile'd step give the eager step's logits and states (fp32, where a fused kernel's
    rounding stays far below the tolerance; the tiny models' logits spread ~0.1)."""
    monkeypatch.setattr(StaticDecoder, "use_decode_kernel", True)
    monkeypatch.setattr(StaticDecoder, "kernels_in_compile", True)
    monkeypatch.setattr(StaticDecoder, "gemv_in_compile", True)
    model = family_target(model_type, head_dim=16).to(CUDA)
    seq = torch.randint(1, 96, (1, 40), generator=torch.Generator().manual_seed(3)).to(CUDA)
    nets = [StaticDecoder(model, max_rows=1, max_len=64, capture_ids=[0, 2]) for _ in range(2)]
    # the runtime takes the decode kernel in bf16 / fp16 only; it computes in any dtype (run in
    # fp32 by tests/test_kernels_interpreted.py): on here in fp32, so both steps run it
    attention_kernels.register()
    for net in nets:
        net.decode_kernel = True
    if model_type == "qwen3_moe":  # and the pair GEMV at width 1 (no dtype gate)
        assert all(net.pair_gemv for net in nets)
    step = torch.compile(nets[0], fullgraph=True, dynamic=False)
    for net in nets:
        net(seq[:, :20], torch.arange(20, device=CUDA)[None], fresh=True)
    start = 20
    for width in (1, 8):
        ids, pos = seq[:, start : start + width], torch.arange(start, start + width, device=CUDA)
        got, want = step(ids, pos[None]), nets[1](ids, pos[None])
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, atol=2e-3, rtol=2e-3)  # TF32 in the kernels' dots
        start += width
    assert fresh_dynamo["stats"]["unique_graphs"] >= 1  # compiled, not an eager fallback


def test_a_compiled_regeneration_step_samples_as_the_eager_one(monkeypatch, fresh_dynamo):
    """compile_step on a 49,152-token vocabulary (SmolLM2's), greedy and at T=1 with a nucleus:
    the graphed, compiled step gives the uncompiled step's tokens. The final norm is scaled so
    the logits spread as a trained model's (std ~5, not ~0.1): over a near-uniform vocabulary a
    fused kernel's rounding (~1e-6) moves a nucleus's edge token in or out for ~0.3 % of draws
    (measured on CPU), and one such draw failed this test on an H100 (2026-12-06)."""
    model = family_target("llama", vocab_size=49152).to(CUDA)
    with torch.no_grad():
        model.model.norm.weight.mul_(50)
    g = torch.Generator().manual_seed(6)
    requests = [
        Request(torch.randint(0, 49152, (n,), generator=g), 12, seed=i, temperature=t, top_p=p)
        for i, (n, t, p) in enumerate([(9, 0.0, 1.0), (5, 1.0, 0.9), (13, 1.0, 1.0)])
    ]
    runs = []
    for compiled in (True, False):
        monkeypatch.setattr(Regenerator, "compile_step", compiled)
        engine = Regenerator(model, [0, 1], slots=2, max_len=32, eos=(), nucleus=True)
        runs.append(engine.run(requests))
        if compiled:  # compiled, not an eager fallback
            assert fresh_dynamo["stats"]["unique_graphs"] >= 1
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a.ids, b.ids)
