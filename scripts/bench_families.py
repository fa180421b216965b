"""The batch-1 target step of every static-runtime family at real shapes, against its floor.

    python scripts/bench_families.py --out docs/results/runtime_h200/families.json \
        [--shapes llama31_8b,qwen3_8b,...] [--widths 1,2,4,8,16] [--compile-widths 1,8]
    python scripts/bench_families.py --out F --identical   # CPU: the fp32 identity tests

Per shape (random bf16 weights on a GPU: a step's time does not depend on their values): the
static engine's step (static KV cache, one CUDA graph per width) at a --context-token context for
verify widths --widths, and the same step compiled by torch.compile for --compile-widths, beside
the floor measured in the same run: the bytes one width-1 step must read (every weight but the
untied embedding table, for a mixture of experts only the top-k experts a token routes to, and
the keys and values of the context) over this device's copy bandwidth (benchlib.copy_bandwidth).
`--identical` runs tests/test_static_families.py's fp32 comparisons with transformers (CPU) and
records in each family's row whether all of its passed (`cpu_fp32_identical`). Both parts update
the --out file in place (keys they do not write are kept), so the two merge into one report.
"""

from __future__ import annotations

import gc
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchlib import (  # noqa: E402
    add_runtime_switches,
    apply_runtime_switches,
    copy_bandwidth,
    step_kernels,
    step_ms,
    weight_bytes,
    write_report,
)

from serving import cli  # noqa: E402
from splitserve.target.runtime import StaticEngine  # noqa: E402

# name -> (family key in the report, HF model_type, config): public configs of each model
SHAPES = {
    "llama31_8b": (
        "llama",
        "llama",
        dict(
            hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
            tie_word_embeddings=False, max_position_embeddings=131072,
            rope_parameters=dict(
                rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                high_freq_factor=4.0, original_max_position_embeddings=8192,
            ),
        ),
    ),
    "mistral_7b": (  # v0.3's vocabulary, v0.1's window (which a 512-token context never reaches)
        "mistral",
        "mistral",
        dict(
            hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=8, vocab_size=32768,
            tie_word_embeddings=False, sliding_window=4096,
        ),
    ),
    "qwen25_7b": (
        "qwen2",
        "qwen2",
        dict(
            hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
            num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
            tie_word_embeddings=False, rope_parameters=dict(rope_type="default", rope_theta=1e6),
        ),
    ),
    "qwen3_8b": (
        "qwen3",
        "qwen3",
        dict(
            hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
            num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
            tie_word_embeddings=False, rope_parameters=dict(rope_type="default", rope_theta=1e6),
        ),
    ),
    "gemma3_4b": (
        "gemma3",
        "gemma3_text",
        dict(
            hidden_size=2560, intermediate_size=10240, num_hidden_layers=34,
            num_attention_heads=8, num_key_value_heads=4, head_dim=256, vocab_size=262208,
            sliding_window=1024, query_pre_attn_scalar=256, tie_word_embeddings=True,
            layer_types=[
                "full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(34)
            ],
            rope_parameters={
                "sliding_attention": dict(rope_type="default", rope_theta=10000.0),
                "full_attention": dict(rope_type="linear", rope_theta=1e6, factor=8.0),
            },
        ),
    ),
    "qwen3_30b_a3b": (
        "qwen3_moe",
        "qwen3_moe",
        dict(
            hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
            num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
            num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, vocab_size=151936,
            tie_word_embeddings=False, rope_parameters=dict(rope_type="default", rope_theta=1e6),
        ),
    ),
}  # fmt: skip
TINY = dict(  # --tiny: every shape shrunk, to run the script on CPU
    hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256, num_experts=8,
    num_experts_per_tok=2, sliding_window=64,
)  # fmt: skip


def build(model_type: str, config: dict, device, dtype):
    from transformers import AutoConfig, AutoModelForCausalLM

    if "layer_types" in config:
        config = {**config, "layer_types": config["layer_types"][: config["num_hidden_layers"]]}
    cfg = AutoConfig.for_model(model_type, **config)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    return model.eval()


def step_bytes(model, context: int) -> dict:
    """Bytes a width-1 step at `context` must read: weights (an untied embedding table only one
    row, routed experts only top-k of E per layer) and the context's keys and values."""
    cfg = model.config
    total = weight_bytes(model)
    embed = model.get_input_embeddings().weight
    if embed.data_ptr() != model.get_output_embeddings().weight.data_ptr():
        total -= embed.numel() * embed.element_size()
    experts = 0
    for layer in model.model.layers:
        e = getattr(layer.mlp, "experts", None)
        if e is not None:
            full = sum(p.numel() * p.element_size() for p in e.parameters())
            experts += full
            total -= full - full * e.gate_up_proj.shape[0] ** -1 * cfg.num_experts_per_tok
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * context
    kv *= embed.element_size()
    return {"weights": int(total), "kv": int(kv), "expert_weights_all": int(experts)}


def measure(name: str, args, device, dtype, bandwidth: float) -> dict:
    family, model_type, config = SHAPES[name]
    config = {**config, **(TINY if args.tiny else {})}
    t0 = time.perf_counter()
    model = build(model_type, config, device, dtype)
    layers, vocab = model.config.num_hidden_layers, model.config.vocab_size
    capture = sorted({1, layers // 2, layers - 2})  # three layers, as a DSpark draft reads
    read = step_bytes(model, args.context)
    floor_ms = 1000 * (read["weights"] + read["kv"]) / bandwidth
    out = {
        "shape": name,
        "model_type": model_type,
        "params_b": round(sum(p.numel() for p in model.parameters()) / 1e9, 3),
        "bytes_read_w1": read,
        "floor_ms": round(floor_ms, 4),
        "context": args.context,
        "widths_ms": {},
    }
    max_len = args.context + max(args.widths + args.compile_widths) + 1
    # kept beside the default modes, not summarised
    tag = "_before" if args.before else "_sdpa" if args.sdpa else ""
    modes = [("graphed" + tag, args.widths, False)] if args.widths else []
    if args.compile_widths:
        modes.append(("compiled" + tag, args.compile_widths, True))
    for mode, widths, comp in modes:
        t1 = time.perf_counter()
        engine = StaticEngine(model, capture, max_len=max_len, widths=widths, compile_step=comp)
        out["widths_ms"][mode] = {
            str(w): round(step_ms(engine, w, args.context, vocab, args.repeats, device), 4)
            for w in widths
        }
        out[f"{mode}_setup_s"] = round(time.perf_counter() - t1, 1)
        if args.profile:  # the narrowest step's kernels (their count, sum and the largest)
            w0 = min(widths)
            table = step_kernels(engine, w0, args.context, vocab, device)
            out.setdefault("kernels", {})[mode] = {"width": w0, **table}
        del engine  # it and its step form a cycle: collected below, its graphs and copies freed
        gc.collect()
        print(f"{name} {mode}: {out['widths_ms'][mode]} floor {floor_ms:.3f} ms", flush=True)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    del model
    gc.collect()
    torch._dynamo.reset()  # every shape compiles the same _step: fresh variants and limit each
    if device.type == "cuda":
        torch.cuda.empty_cache()
        out["held_after_gb"] = round(torch.cuda.memory_allocated(device) / 1e9, 2)
    return family, out


def summarise(out: dict, floor_ms: float) -> dict:
    """The headline figures from every mode measured so far (compiled where it was): the
    width-1 step, its ratio to the floor, and width 8 over width 1."""
    for key in ("step_ms", "step_over_floor", "verify_w8_over_w1"):
        out.pop(key, None)
    widths = out["widths_ms"]
    mode = "compiled" if "1" in widths.get("compiled", {}) else "graphed"
    best = widths.get(mode, {})
    out["step_mode"], out["step_ms"] = mode, best.get("1")
    if out["step_ms"] is not None:
        out["step_over_floor"] = round(out["step_ms"] / floor_ms, 3)
    if "1" in best and "8" in best:
        out["verify_w8_over_w1"] = round(best["8"] / best["1"], 3)
    return out


def identical(args) -> dict:
    """family -> whether every fp32 comparison of tests/test_static_families.py passed for it."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
           str(ROOT / "tests/test_static_families.py"), "-k", "equal"]  # fmt: skip
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    results: dict[str, bool] = {}
    for line in run.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR") and "[" in rest:
            fam = rest.split("[", 1)[1].split("]", 1)[0]
            results[fam] = results.get(fam, True) and word == "PASSED"
    if not results:
        raise SystemExit(f"no test outcomes read from pytest:\n{run.stdout[-2000:]}{run.stderr}")
    key = {model_type: family for family, model_type, _ in SHAPES.values()}
    return {key.get(t, t): ok for t, ok in results.items()}


def main(argv: list[str] | None = None) -> int:
    ap = cli.script_parser(__file__, __doc__)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated shape names")
    ap.add_argument("--widths", default="1,2,4,8,16")
    ap.add_argument("--compile-widths", default="", help="also time these widths compiled")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--tiny", action="store_true", help="shrunk shapes (a CPU smoke run)")
    ap.add_argument("--identical", action="store_true", help="the CPU fp32 tests alone")
    ap.add_argument("--profile", action="store_true", help="list the narrowest step's kernels")
    add_runtime_switches(ap, "the runtime as before 2026-12-05 (benchlib.apply_runtime_switches): "
                         "modes graphed_before / compiled_before")  # fmt: skip
    args = ap.parse_args(argv)
    apply_runtime_switches(args, args.before)
    args.widths = [int(w) for w in args.widths.split(",") if w]
    args.compile_widths = [int(w) for w in args.compile_widths.split(",") if w]
    unknown = [s for s in args.shapes.split(",") if s not in SHAPES]
    if unknown:
        ap.error(f"--shapes: unknown {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    report = json.loads(args.out.read_text()) if args.out.is_file() else {}
    command = cli.command_line(ap, argv)
    if args.identical:  # into each family's row (the measured fields, when any, stay)
        families = report.setdefault("families", {})
        for family, ok in identical(args).items():
            families.setdefault(family, {})["cpu_fp32_identical"] = ok
        report.pop("cpu_fp32_identical", None)  # where reports before 2026-12-07 kept it
        report["identical_command"] = command
        write_report(args.out, report)
        return 0
    report.update(command=command, torch=torch.__version__)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    report["device"] = torch.cuda.get_device_name() if device.type == "cuda" else platform.node()
    report["dtype"] = str(dtype).removeprefix("torch.")
    report["copy_bandwidth_gb_s"] = round(copy_bandwidth(device) / 1e9, 1)
    report.setdefault("families", {})
    for name in args.shapes.split(","):
        family, out = measure(name, args, device, dtype, report["copy_bandwidth_gb_s"] * 1e9)
        kept = report["families"].get(family, {})  # another call's modes of this shape stay
        if kept.get("shape") == name:
            widths = kept.get("widths_ms", {})
            for mode, ms in out["widths_ms"].items():
                widths[mode] = {**widths.get(mode, {}), **ms}
            out["widths_ms"] = widths
        report["families"][family] = summarise({**kept, **out}, out["floor_ms"])
        write_report(args.out, report)  # after each shape: a cut run keeps what it measured
    return 0


if __name__ == "__main__":
    sys.exit(main())
