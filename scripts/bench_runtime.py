"""The target runtime on this device, each figure beside the eager path and the memory floor.

    python scripts/bench_runtime.py --out docs/results/runtime_h200/runtime_h200.json [--quick]
        [--compile] [--draft RUN] [--regen]

Measured in one run (bf16 on a GPU, fp32 on CPU; medians of timed repeats after warm-up):
- floor: the target's weight bytes over this device's copy bandwidth (a device-to-device copy of
  1 GiB, bytes read + written, measured here), the least time one step can take;
- target-only decode step at batch 1 (one token over a 512-token context) and tokens/s, for the
  embedded SmolLM2-135M (real weights) and a ~1.2B Llama shape (random weights): the eager engine
  (transformers, DynamicCache, capture hooks) against the static engine (static KV cache, one CUDA
  graph per width; with --compile the static step is first compiled by torch.compile);
- verify step ms at widths 1, 2, 4, 8, 16 (SmolLM2), both engines;
- greedy decoding of GSM8K prompts in fp32, token for token against the eager engine's
  target-only decoding: the static engine alone, and speculative decoding on it with random
  DSpark, DFlash and EAGLE-3 drafts (their greedy proposals graphed on a GPU);
- draft proposal ms (a random 2-layer DSpark draft) and speculative vs target-only tokens/s with
  that draft (a random draft: tau near 1, so this measures the runtime's overhead, not a speedup);
- `--draft RUN`: a trained draft (a checkpoint or run directory) with serving.evaluate's
  measurement on --prompts GSM8K and MT-Bench items (both turns), greedy, and GSM8K at
  temperature 1, fixed schedule, on the static runtime, and greedy on the eager engine for
  --eager-prompts of the GSM8K items: tau, speculative and target-only tokens/s, speedup, draft
  step;
- `--regen`: regeneration samples/s and new tokens/s at the trainer's batch (scripts/bench_regen
  with 256 sequences in flight, up to 256 new tokens): the `static` backend over
  --regen-samples samples and the `hf` backend (HF generate) over --regen-eager-samples.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchlib import copy_bandwidth, step_ms, sync, weight_bytes  # noqa: E402  (scripts/)

from draft_models import DraftConfig, TargetSpec, build_draft  # noqa: E402
from serving import cli  # noqa: E402
from serving.benchmarks import load_bench  # noqa: E402
from serving.decoder import SpeculativeDecoder  # noqa: E402
from splitserve.target.chat import prompt_ids  # noqa: E402
from splitserve.target.embedded import ensure_smollm2  # noqa: E402
from splitserve.target.models import load_causal_lm, load_frozen_head  # noqa: E402
from splitserve.target.runtime import EagerEngine, StaticEngine  # noqa: E402
from splitserve.target.runtime.graphs import compiled  # noqa: E402


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
    engines = [
        ("eager", EagerEngine(model, layer_ids)),
        (
            "static",
            StaticEngine(model, layer_ids, max_len=2048, widths=widths, compile_step=args.compile),
        ),
    ]
    for label, engine in engines[args.skip_eager :]:
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
        engine.step.fn = compiled(engine._step, 1)
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


RANDOM_DRAFTS = {  # random drafts of each architecture (what the fp32 identity check runs)
    "dspark": dict(num_layers=2, block_size=7, markov_rank=128),
    "dflash": dict(arch="dflash", num_layers=2, block_size=7, sequential_head="none",
                   confidence_head=False),
    "eagle3": dict(arch="eagle3", num_layers=1, block_size=7, sequential_head="none",
                   confidence_head=False),
}  # fmt: skip


def random_draft(arch, model_dir, config, layer_ids, device, dtype):
    torch.manual_seed(0)
    cfg = DraftConfig(**RANDOM_DRAFTS[arch], target_layer_ids=layer_ids, mask_token_id=16)
    head = load_frozen_head(model_dir, device, dtype)
    return build_draft(cfg, TargetSpec.from_hf_config(config), head).to(device=device, dtype=dtype)


def identical_greedy(model_dir, layer_ids, prompts, tokens, device) -> dict:
    """fp32, token for token against eager target-only decoding: static-engine greedy decoding,
    and speculative decoding on the static engine with a random draft of each architecture (its
    greedy proposal graphed on a GPU)."""
    model = load_causal_lm(model_dir, device, torch.float32)
    reference = [
        SpeculativeDecoder(model, None, runtime="eager").generate(ids, tokens).token_ids
        for ids in prompts
    ]
    decoders = {"static_vs_eager": SpeculativeDecoder(model, None, runtime="static", max_len=1024)}
    for arch in RANDOM_DRAFTS:
        draft = random_draft(arch, model_dir, model.config, layer_ids, device, torch.float32)
        decoders[f"spec_{arch}_static_vs_eager"] = SpeculativeDecoder(
            model, draft, runtime="static", max_len=1024
        )
    out = {}
    for key, dec in decoders.items():
        pairs = zip(prompts, reference, strict=True)
        same = sum(dec.generate(ids, tokens).token_ids == ref for ids, ref in pairs)
        out[key] = f"{same}/{len(prompts)}"
    return out


def trained_figures(report, args, device) -> None:
    """serving.evaluate's measurement of a trained draft: static runtime on GSM8K and MT-Bench,
    the eager engine on the first --eager-prompts GSM8K items."""
    from types import SimpleNamespace

    from serving.evaluate import run_bench
    from serving.loading import load_decoder
    from serving.scheduler import SchedulerConfig
    from splitserve import checkpoint

    ckpt = checkpoint.resolve(Path(args.draft))
    bench_args = SimpleNamespace(
        max_new_tokens=args.draft_tokens, temperature=0.0, seed=0, no_baseline=False, procs=1
    )
    trained = {"checkpoint": str(ckpt)}
    runs = (("static", ("gsm8k", "mtbench", "gsm8k_t1")), ("eager", ("gsm8k",)))
    for runtime, benches in runs:
        decoder, tok = load_decoder(ckpt, scheduler=SchedulerConfig("fixed"), runtime=runtime)
        warm = prompt_ids(tok, [{"role": "user", "content": "Hello"}])
        decoder.generate(warm, 16)  # graph capture, allocator warm-up
        for bench in benches:
            n = args.prompts if runtime == "static" else args.eager_prompts
            bench_args.temperature = 1.0 if bench.endswith("_t1") else 0.0
            items = load_bench(bench.removesuffix("_t1"), n)
            fig = run_bench(decoder, tok, items, bench_args, f"{runtime} {bench}")
            trained.setdefault(runtime, {})[bench] = fig
            print(
                f"trained draft, {runtime} {bench}: tau {fig['tau']:.3f}, speedup "
                f"{fig['speedup']:.3f}, spec {fig['speculative']['tokens_per_s']:.1f} tok/s, "
                f"target-only {fig['target_only']['tokens_per_s']:.1f} tok/s",
                flush=True,
            )
        del decoder
    report["trained_draft"] = trained
    for bench in ("gsm8k", "mtbench"):
        fig = trained["static"][bench]
        report[f"tau_{bench}"] = fig["tau"]
        report[f"spec_speedup_{bench}"] = fig["speedup"]
        report[f"spec_speedup_over_tau_{bench}"] = fig["speedup"] / fig["tau"]
    report["trained_draft_step_ms"] = trained["static"]["gsm8k"]["draft_step_ms"]
    report.setdefault("eager", {})["spec_speedup_gsm8k"] = trained["eager"]["gsm8k"]["speedup"]
    report["eager"]["tau_gsm8k"] = trained["eager"]["gsm8k"]["tau"]


def regen_figures(report, args, device) -> None:
    """Regeneration at the trainer's batch (scripts/bench_regen.run_backend)."""
    from argparse import Namespace

    from bench_regen import prompt_conversations, run_backend

    rows = {}
    for name, n in (("static", args.regen_samples), ("hf", args.regen_eager_samples)):
        regen_args = Namespace(
            samples=n, slots=256, max_new_tokens=256, max_length=512, max_prompt_tokens=256,
            layer_ids=[1, 15, 28],
        )  # fmt: skip
        rows[name], _ = run_backend(name, regen_args, prompt_conversations(n), device)
        print(f"regeneration: {json.dumps(rows[name])}", flush=True)
    report["regen"] = rows
    report["regen_samples_per_s"] = rows["static"]["samples_per_s"]
    report["regen_tokens_per_s"] = rows["static"]["new_tokens_per_s"]
    report.setdefault("eager", {})["regen_samples_per_s"] = rows["hf"]["samples_per_s"]
    report["eager"]["regen_tokens_per_s"] = rows["hf"]["new_tokens_per_s"]


def goals(report: dict, compiled: dict | None = None) -> dict:
    """The issue's goals against this run's figures (and a --compile run's, if given): each with
    its value, its limit, the ratio value / limit and whether it is met."""

    def goal(value, limit, higher_is_better=False):
        met = value >= limit if higher_is_better else value <= limit
        return {"value": value, "limit": limit, "ratio": value / limit, "met": met}

    out = {}
    runs = {"graphs": report, **({"graphs+compile": compiled} if compiled else {})}
    for name, r in runs.items():
        v = r["verify_ms_by_width"]
        out[f"smol_target_step_ms <= 1.0 ({name})"] = goal(r["smol_target_step_ms"], 1.0)
        out[f"llama1b_target_step_ms <= 2 x floor ({name})"] = goal(
            r["llama1b_target_step_ms"], 2 * r["llama1b_floor_ms"]
        )
        out[f"verify width 8 <= 1.3 x width 1 ({name})"] = goal(v["8"], 1.3 * v["1"])
    if "tau_gsm8k" in report:
        out["spec_speedup_gsm8k >= 0.75 x tau_gsm8k"] = goal(
            report["spec_speedup_gsm8k"], 0.75 * report["tau_gsm8k"], higher_is_better=True
        )
    if "regen_samples_per_s" in report:
        out["regen_samples_per_s >= 100"] = goal(
            report["regen_samples_per_s"], 100.0, higher_is_better=True
        )
    return out


def main() -> int:
    ap = cli.script_parser(__file__, __doc__)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="fewer repeats and prompts (a smoke run)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the static step first")
    ap.add_argument("--only-steps", action="store_true", help="the target step figures alone")
    ap.add_argument(
        "--skip-eager",
        action="store_true",
        help="leave out the eager engine's target steps and random-draft decoding",
    )
    ap.add_argument(
        "--only-spec",
        action="store_true",
        help="the random-draft speculative figures and the fp32 identity check alone",
    )
    ap.add_argument("--draft", help="a trained draft: checkpoint or run directory")
    ap.add_argument("--draft-tokens", type=int, default=128, help="new tokens per trained turn")
    ap.add_argument("--eager-prompts", type=int, default=5, help="GSM8K items on the eager engine")
    ap.add_argument("--regen", action="store_true", help="also measure regeneration")
    ap.add_argument(
        "--annotate",
        type=Path,
        metavar="COMPILED_JSON",
        help="measure nothing: add the goals block to --out (a finished run's JSON), with this "
        "--compile --only-steps run's figures beside it",
    )
    ap.add_argument("--regen-samples", type=int, default=1024)
    ap.add_argument("--regen-eager-samples", type=int, default=256)
    ap.add_argument(
        "--profile",
        action="store_true",
        help="also count the kernels of one SmolLM2 static step (width 1 and 8) and "
        "their summed GPU time, with torch.profiler",
    )
    args = ap.parse_args()
    if args.annotate:  # no measurement: the goals block of a finished run's JSON
        report = json.loads(args.out.read_text())
        compiled = json.loads(args.annotate.read_text()) if args.annotate.is_file() else None
        report["goals"] = goals(report, compiled)
        args.out.write_text(json.dumps(report, indent=1))
        print(json.dumps(report["goals"], indent=1))
        return 0
    if args.quick:
        args.repeats, args.prompts, args.tokens, args.draft_tokens = 5, 2, 16, 16
        args.eager_prompts, args.regen_samples, args.regen_eager_samples = 1, 64, 16
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
        "command": cli.command_line(ap, None),
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
    del smol
    if args.draft:
        trained_figures(report, args, device)
    if args.regen:
        regen_figures(report, args, device)
    if not args.only_spec:
        report["goals"] = goals(report)
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
    if not args.skip_eager:
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
    if not args.skip_eager:
        report["eager"]["llama1b_target_step_ms"] = big_fig["eager"]["1"]
    report["llama1b_weight_bytes"] = big_fig["weight_bytes"]
    del big


def spec_figures(report, smol, smol_dir, layer_ids, args, device, dtype) -> None:
    """Speculative vs target-only decoding with a random draft, per engine; on the static engine
    the proposal is graphed (GraphedProposal) and its greedy outputs must equal target-only
    decoding's on the same engine where the verify widths round alike (checked in fp32 below)."""
    items = load_bench("gsm8k", args.prompts)
    tok = __import__("transformers").AutoTokenizer.from_pretrained(smol_dir)
    prompts = [prompt_ids(tok, [{"role": "user", "content": item[0]}]) for item in items]
    draft = random_draft("dspark", smol_dir, smol.config, layer_ids, device, dtype)
    for label in ("eager", "static")[args.skip_eager :]:
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
    report["fp32_identical_detail"] = identical_greedy(
        smol_dir, layer_ids, prompts, args.tokens, device
    )
    report["fp32_identical"] = report["fp32_identical_detail"]["static_vs_eager"]
    print(f"fp32 greedy identical: {report['fp32_identical_detail']}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
