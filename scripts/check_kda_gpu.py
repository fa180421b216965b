"""fla-core's KDA kernels under a bailing_hybrid target, on a GPU: bound, right, lossless, faster.

    python scripts/check_kda_gpu.py --out docs/results/splits/kda_gpu.json \
        [--target conf/target/ling3_mini_gpu.yaml]

For each dtype (float32, bfloat16) it records which implementation transformers bound for the
KDA functions (`serving.linear_state.linear_kernels`), compares the target's logits with fla's
kernels against transformers' pure-torch reference on the same input, decodes random prompts
greedily with the speculative decoder (random-weight DSpark draft; verify steps stage and roll
back the KDA state) and with the target alone and counts identical outputs, and times target-only
decoding with fla and with the reference. Needs a CUDA device and fla-core installed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from draft_models import DraftConfig, TargetSpec, build_draft  # noqa: E402
from serving.decoder import SpeculativeDecoder  # noqa: E402
from serving.scheduler import SchedulerConfig  # noqa: E402
from splitserve.target.embedded import ensure_ling3_mini  # noqa: E402
from splitserve.target.linear_state import KERNEL_FUNCTIONS, linear_kernels, linear_modeling_module  # noqa: E402
from splitserve.target.models import load_frozen_head  # noqa: E402


@contextlib.contextmanager
def torch_reference(model):
    """Swap the model's kernel functions for transformers' pure-torch versions (`__wrapped__`)."""
    module = linear_modeling_module(model)
    saved = {n: getattr(module, n) for n in KERNEL_FUNCTIONS if hasattr(module, n)}
    try:
        for name, fn in saved.items():
            setattr(module, name, getattr(fn, "__wrapped__", fn))
        yield
    finally:
        for name, fn in saved.items():
            setattr(module, name, fn)


def note(*what) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *what, flush=True)


def timed_decode(model, prompt: list[int], tokens: int) -> float:
    sync = torch.cuda.synchronize if next(model.parameters()).is_cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    SpeculativeDecoder(model, None).generate(prompt, tokens)
    sync()
    return tokens / (time.perf_counter() - t0)


def check(
    model_dir: Path, dtype: torch.dtype, prompts: int, tokens: int, seed: int, device: str
) -> dict:
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    note(dtype, "target loaded; kernels:", linear_kernels(target))
    vocab = target.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (1, 512), generator=g).to(device)
    with torch.no_grad():
        fast = target(ids).logits.float()
        with torch_reference(target):
            ref = target(ids).logits.float()
    note("logits compared, max abs diff", (fast - ref).abs().max().item())
    torch.manual_seed(seed)
    cfg = DraftConfig(num_layers=1, block_size=4, markov_rank=16, mask_token_id=16)
    draft = build_draft(
        cfg, TargetSpec.from_hf_config(target.config), load_frozen_head(model_dir, device, dtype)
    ).to(device, dtype)
    outcomes = []
    for mode in (SchedulerConfig("fixed"), SchedulerConfig("threshold", threshold=0.1)):
        dec = SpeculativeDecoder(target, draft, scheduler=mode)
        for _ in range(prompts):
            prompt = torch.randint(
                0, vocab, (int(torch.randint(8, 64, (1,), generator=g)),), generator=g
            ).tolist()
            plain = SpeculativeDecoder(target, None).generate(prompt, tokens).token_ids
            res = dec.generate(prompt, tokens)
            outcomes.append(
                {
                    "mode": mode.mode,
                    "identical": res.token_ids == plain,
                    "first_difference": next(
                        (
                            i
                            for i, (a, b) in enumerate(zip(res.token_ids, plain, strict=False))
                            if a != b
                        ),
                        None,
                    ),
                    "verify_steps": len(res.widths),
                    "max_width": max(res.widths),
                    "accepted": int(sum(res.accepted)),
                }
            )
            note(outcomes[-1])
    note("timing target-only decoding")
    prompt = torch.randint(0, vocab, (32,), generator=g).tolist()
    timed_decode(target, prompt, 8)  # warm-up (Triton compilation)
    fla_tps = timed_decode(target, prompt, 128)
    with torch_reference(target):
        timed_decode(target, prompt, 8)
        ref_tps = timed_decode(target, prompt, 128)
    return {
        "dtype": str(dtype).replace("torch.", ""),
        "kernels": linear_kernels(target),
        "logits_max_abs_diff_vs_torch_reference": (fast - ref).abs().max().item(),
        "logits_max_abs": ref.abs().max().item(),
        "argmax_agreement_vs_torch_reference": (fast.argmax(-1) == ref.argmax(-1))
        .float()
        .mean()
        .item(),
        "lossless": {
            "identical": sum(o["identical"] for o in outcomes),
            "of": len(outcomes),
            "cases": outcomes,
        },
        "target_only_tokens_per_s": {"bound_kernels": fla_tps, "torch_reference": ref_tps},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--target",
        default=str(ROOT / "conf" / "target" / "ling3_mini_gpu.yaml"),
        help="a target YAML whose `mini` block shapes the bailing_hybrid",
    )
    ap.add_argument("--prompts", type=int, default=3, help="prompts per scheduler mode")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--device", default="cuda", help="cuda (fla's kernels); cpu only checks this script"
    )
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("check_kda_gpu needs a CUDA device (fla-core's kernels are GPU-only)")
    mini = yaml.safe_load(Path(args.target).read_text()).get("mini") or {}
    model_dir = ensure_ling3_mini(mini, seed=args.seed)
    name = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    report = {
        "device": name,
        "torch": torch.__version__,
        "mini": mini,
        "runs": [
            check(model_dir, dt, args.prompts, args.tokens, args.seed, args.device)
            for dt in (torch.float32, torch.bfloat16)
        ],
    }
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(
        json.dumps(
            {
                r["dtype"]: {k: v for k, v in r.items() if k != "lossless"}
                | {"identical": f"{r['lossless']['identical']}/{r['lossless']['of']}"}
                for r in report["runs"]
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
