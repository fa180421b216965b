"""The target runtime on this device, each figure beside the eager path and the memory floor.

    python scripts/bench_runtime.py --out runtime.json [--quick] [--compile]

Measured in one run (bf16 on a GPU, fp32 on CPU; medians of timed repeats after warm-up):
- floor: the target's weight bytes over this device's copy bandwidth (a device-to-device copy of
  1 GiB, bytes read + written, measured here), the least time one step can take;
- target-only decode step at batch 1 (one token over a 512-token context) and tokens/s, for the
  embedded SmolLM2-135M (real weights) and a ~1.2B Llama shape (random weights): the eager engine
  (transformers, DynamicCache, capture hooks) against the static engine (static KV cache, one CUDA
  graph per width; with --compile the static step is first compiled by torch.compile);
- verify step ms at widths 1, 2, 4, 8, 16 (SmolLM2), both engines;
- greedy decoding of GSM8K prompts with both engines in fp32: how many outputs are identical;
- draft proposal ms (a random 2-layer DSpark draft) and speculative vs target-only tokens/s with
  that draft (a random draft: tau near 1, so this measures the runtime's overhead, not a speedup).
Regeneration throughput is not measured here yet (the runtime's batched regeneration is not built).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchlib import copy_bandwidth, sync, timed, weight_bytes  # noqa: E402  (scripts/)

from draft_models import DraftConfig, TargetSpec, build_draft  # noqa: E402
from serving.benchmarks import load_bench  # noqa: E402
from serving.decoder import SpeculativeDecoder  # noqa: E402
from splitserve.target.chat import prompt_ids  # noqa: E402
from splitserve.target.embedded import ensure_smollm2  # noqa: E402
from splitserve.target.models import load_causal_lm, load_frozen_head  # noqa: E402
from splitserve.target.runtime import EagerEngine, StaticEngine  # noqa: E402


def step_ms(engine, width: int, context: int, vocab: int, repeats: int, device) -> float:
    """One forward of `width` tokens at positions context..context+width-1 (after a prompt)."""
    g = torch.Generator().manual_seed(0)
    engine.begin(context + width + 1)
    engine.forward(torch.randint(0, vocab, (context,), generator=g).to(device), 0)
    ids = torch.randint(0, vocab, (width,), generator=g).to(device)

    def one():
        engine.forward(ids, context)
        engine.accept(width, width - 1)  # keep nothing but the anchor: the same state each time

    ms = 1000 * timed(one, repeats, device)
    engine.close()
    return ms


def llama_1b(device, dtype):
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        tie_word_embeddings=True,
        rope_theta=500000.0,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    return model.eval()


def target_figures(name, model, layer_ids, args, device, widths) -> dict:
    vocab = model.config.vocab_size
    out = {"weight_bytes": weight_bytes(model)}
    for label, engine in (
        ("eager", EagerEngine(model, layer_ids)),
        (
            "static",
            StaticEngine(model, layer_ids, max_len=2048, widths=widths, compile_step=args.compile),
        ),
    ):
        out[label] = {
            str(w): step_ms(engine, w, args.context, vocab, args.repeats, device) for w in widths
        }
        print(
            f"{name} {label}: "
            + ", ".join(f"width {w}: {ms:.3f} ms" for w, ms in out[label].items()),
            flush=True,
        )
    return out


def profile_step(model, layer_ids, width, args, device) -> dict:
    """Kernels one static step launches (run without a graph, so each shows) and their summed
    GPU time: the step's floor once launch gaps are gone (what a graph replay approaches)."""
    from torch.profiler import ProfilerActivity, profile

    engine = StaticEngine(model, layer_ids, max_len=2048, widths=[], compile_step=False)
    if args.compile:
        engine.step.fn = torch.compile(engine._step, dynamic=False)
    vocab = model.config.vocab_size
    engine.begin(args.context + width + 1)
    engine.forward(torch.randint(0, vocab, (args.context,)).to(device), 0)
    ids = torch.randint(0, vocab, (width,)).to(device)
    for _ in range(3):
        engine.forward(ids, args.context)
    sync(device)
    steps = 5
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            engine.forward(ids, args.context)
        sync(device)
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    by_name: dict[str, float] = {}
    for e in kernels:
        by_name[e.name] = by_name.get(e.name, 0.0) + e.time_range.elapsed_us() / steps
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:8]
    return {
        "kernels_per_step": len(kernels) / steps,
        "kernel_ms_per_step": sum(e.time_range.elapsed_us() for e in kernels) / steps / 1000,
        "top_kernels_us": {name[:60]: round(us, 1) for name, us in top},
    }


def identical_greedy(model_dir, layer_ids, prompts, tokens, device, draft_cfg) -> dict:
    """fp32, token for token: static-engine greedy decoding against the eager engine's, and
    speculative decoding with a random draft on the static engine (its greedy proposal graphed on
    a GPU) against eager target-only decoding."""
    model = load_causal_lm(model_dir, device, torch.float32)
    torch.manual_seed(0)
    head = load_frozen_head(model_dir, device, torch.float32)
    draft = build_draft(draft_cfg, TargetSpec.from_hf_config(model.config), head).to(device)
    plain = SpeculativeDecoder(model, None, runtime="static", max_len=1024)
    spec = SpeculativeDecoder(model, draft, runtime="static", max_len=1024)
    same = same_spec = 0
    for ids in prompts:
        a = SpeculativeDecoder(model, None, runtime="eager").generate(ids, tokens).token_ids
        same += int(a == plain.generate(ids, tokens).token_ids)
        same_spec += int(a == spec.generate(ids, tokens).token_ids)
    n = len(prompts)
    return {"static_vs_eager": f"{same}/{n}", "spec_static_vs_eager": f"{same_spec}/{n}"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="fewer repeats and prompts (a smoke run)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the static step first")
    ap.add_argument("--only-steps", action="store_true", help="the target step figures alone")
    ap.add_argument(
        "--only-spec",
        action="store_true",
        help="the random-draft speculative figures and the fp32 identity check alone",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="also count the kernels of one SmolLM2 static step (width 1 and 8) and "
        "their summed GPU time, with torch.profiler",
    )
    args = ap.parse_args()
    if args.quick:
        args.repeats, args.prompts, args.tokens = 5, 2, 16
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    report = {
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor(),
        "torch": torch.__version__,
        "dtype": str(dtype),
        "context": args.context,
        "compile": args.compile,
        "command": " ".join(sys.argv),
    }
    bandwidth = copy_bandwidth(device)
    report["copy_bandwidth_gb_s"] = round(bandwidth / 1e9, 1)
    widths = [1, 2, 4, 8, 16]

    smol_dir = ensure_smollm2()
    smol = load_causal_lm(smol_dir, device, dtype)
    layer_ids = [1, 15, 27]
    if not args.only_spec:
        target_step_figures(report, smol, layer_ids, args, device, widths, bandwidth, dtype)
    if args.only_steps:
        args.out.write_text(json.dumps(report, indent=1))
        print(json.dumps({k: v for k, v in report.items() if not isinstance(v, dict)}, indent=1))
        return 0
    spec_figures(report, smol, smol_dir, layer_ids, args, device, dtype)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if not isinstance(v, dict)}, indent=1))
    return 0


def target_step_figures(report, smol, layer_ids, args, device, widths, bandwidth, dtype) -> None:
    smol_fig = target_figures("smollm2", smol, layer_ids, args, device, widths)
    report["smol_floor_ms"] = 1000 * smol_fig["weight_bytes"] / bandwidth
    report["smol_target_step_ms"] = smol_fig["static"]["1"]
    report["smol_tokens_per_s"] = 1000 / smol_fig["static"]["1"]
    report["verify_ms_by_width"] = smol_fig["static"]
    report["eager"] = {
        "smol_target_step_ms": smol_fig["eager"]["1"],
        "verify_ms_by_width": smol_fig["eager"],
    }

    if args.profile and device.type == "cuda":
        report["profile"] = {str(w): profile_step(smol, layer_ids, w, args, device) for w in (1, 8)}
        print(f"profile: {json.dumps(report['profile'])}", flush=True)

    big = llama_1b(device, dtype)
    big_fig = target_figures("llama-1b", big, [1, 7, 13], args, device, [1])
    report["llama1b_floor_ms"] = 1000 * big_fig["weight_bytes"] / bandwidth
    report["llama1b_target_step_ms"] = big_fig["static"]["1"]
    report["eager"]["llama1b_target_step_ms"] = big_fig["eager"]["1"]
    report["llama1b_weight_bytes"] = big_fig["weight_bytes"]
    del big


def spec_figures(report, smol, smol_dir, layer_ids, args, device, dtype) -> None:
    """Speculative vs target-only decoding with a random draft, per engine; on the static engine
    the greedy proposal is graphed (GraphedGreedyProposal) and its outputs must equal target-only
    decoding's on the same engine where the verify widths round alike (checked in fp32 below)."""
    items = load_bench("gsm8k", args.prompts)
    tok = __import__("transformers").AutoTokenizer.from_pretrained(smol_dir)
    prompts = [prompt_ids(tok, [{"role": "user", "content": item[0]}]) for item in items]
    torch.manual_seed(0)
    draft_cfg = DraftConfig(
        num_layers=2, block_size=7, markov_rank=128, target_layer_ids=layer_ids, mask_token_id=16
    )
    draft = build_draft(
        draft_cfg, TargetSpec.from_hf_config(smol.config), load_frozen_head(smol_dir, device, dtype)
    ).to(device=device, dtype=dtype)
    for label in ("eager", "static"):
        spec = SpeculativeDecoder(smol, draft, runtime=label, max_len=2048)
        base = SpeculativeDecoder(smol, None, runtime=label, max_len=2048)
        figures = {}
        for name, dec in (("speculative", spec), ("target_only", base)):
            dec.generate(prompts[0], 8)  # warm-up: graph capture
            sync(device)
            t0, tokens, steps, emitted = time.perf_counter(), 0, 0, 0
            for ids in prompts:
                res = dec.generate(ids, args.tokens)
                tokens += len(res.token_ids)
                steps += res.steps
                emitted += sum(res.accept_lengths)
            sync(device)
            figures[name] = {
                "tokens_per_s": tokens / (time.perf_counter() - t0),
                "tau": emitted / max(steps, 1),
            }
        figures["draft_step_ms"] = 1000 * spec.draft_step_seconds(prompts[0])
        figures["spec_speedup"] = (
            figures["speculative"]["tokens_per_s"] / figures["target_only"]["tokens_per_s"]
        )
        report.setdefault("random_draft", {})[label] = figures
        print(f"random draft, {label}: {json.dumps(figures)}", flush=True)
    report["draft_step_ms"] = report["random_draft"]["static"]["draft_step_ms"]
    report["fp32_identical"] = identical_greedy(
        smol_dir, layer_ids, prompts, args.tokens, device, draft_cfg
    )
    print(f"fp32 greedy identical: {report['fp32_identical']}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
