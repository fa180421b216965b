"""What one speculative decode step costs on the runtime, against a target-only step, and what
the speed goal (2x target-only tokens/s) then asks of the draft's tau.

    python scripts/bench_step.py --out docs/results/runtime_h200/step_h200.json [--compile]
        [--quick]

SmolLM2-135M (bf16 on a GPU) with a random DSpark draft (2 layers, gamma 7, fixed schedule) on
GSM8K prompts, static runtime, all in one run:
- `spec_step_ms` / `target_step_ms`: wall time per decode step of whole `generate` calls (the
  fused step: one graph replay and one host read per step; the prompt's prefill included),
  speculative at verify width 8 (the only width: a block cut by the token budget is padded) and
  target-only at width 1;
- its parts, each as its own graph replay: the draft's proposal (`proposal_ms`) and the target's
  verify at widths 1 and 8 (`verify_ms`); `rest_ms` = spec step - proposal - verify at width 8
  (acceptance, the draft's commit, the host read);
- `tau_for_2x` = 2 x spec step / target-only step: the tau a draft needs for 2x at these costs
  (speedup = tau x target-only step / spec step, since a step emits tau tokens on average).
`--compile`: the decoders' `compile` (serving.decoder): the fused steps (speculative and
target-only) compiled whole, the verify steps and the proposal each compiled, inside the graphs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_runtime import random_draft, step_ms  # noqa: E402  (scripts/)
from benchlib import sync, write_report  # noqa: E402

from serving import cli  # noqa: E402
from serving.benchmarks import load_bench  # noqa: E402
from serving.decoder import SpeculativeDecoder  # noqa: E402
from splitserve.target.chat import prompt_ids  # noqa: E402
from splitserve.target.embedded import ensure_smollm2  # noqa: E402
from splitserve.target.models import load_causal_lm  # noqa: E402

LAYER_IDS = [1, 15, 27]
MAX_LEN = 2048


def decoder(model, draft, compile_step: bool) -> SpeculativeDecoder:
    widths = [draft.cfg.block_size + 1] if draft is not None else None  # one graph shape
    return SpeculativeDecoder(
        model, draft, runtime="static", max_len=MAX_LEN, verify_widths=widths, compile=compile_step
    )


def per_step_ms(dec, prompts, tokens: int, device) -> tuple[float, float]:
    """(ms per step over whole generate calls, tau), after one warm-up call per prompt (graph
    captures for every cache-length bucket and width the prompts reach)."""
    for ids in prompts:
        dec.generate(ids, tokens)
    sync(device)
    t0, steps, emitted = time.perf_counter(), 0, 0
    for ids in prompts:
        res = dec.generate(ids, tokens)
        steps += res.steps
        emitted += sum(res.accept_lengths)
    sync(device)
    return 1000 * (time.perf_counter() - t0) / steps, emitted / steps


def main() -> int:
    ap = argparse.ArgumentParser(
        prog=cli.script_prog(__file__),
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--compile", action="store_true", help="torch.compile every graphed step")
    ap.add_argument("--quick", action="store_true", help="2 prompts, 16 tokens (a smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.prompts, args.tokens, args.repeats = 2, 16, 3
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    smol_dir = ensure_smollm2()
    model = load_causal_lm(smol_dir, device, dtype)
    tok = __import__("transformers").AutoTokenizer.from_pretrained(smol_dir)
    prompts = [
        prompt_ids(tok, [{"role": "user", "content": item[0]}])
        for item in load_bench("gsm8k", args.prompts)
    ]
    draft = random_draft("dspark", smol_dir, model.config, LAYER_IDS, device, dtype)
    spec, base = decoder(model, draft, args.compile), decoder(model, None, args.compile)
    spec_ms, tau = per_step_ms(spec, prompts, args.tokens, device)
    base_ms, _ = per_step_ms(base, prompts, args.tokens, device)
    context = max(len(p) for p in prompts) + args.tokens // 2
    vocab = model.config.vocab_size
    verify = {  # each on the engine that graphs that width
        w: step_ms(dec.engine, w, context, vocab, args.repeats, device)
        for w, dec in ((1, base), (8, spec))
    }
    proposal = 1000 * spec.draft_step_seconds(prompts[0], args.repeats)
    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "dtype": str(dtype),
        "command": cli.command_line(ap, None),
        "compile": args.compile,
        "prompts": len(prompts),
        "tokens": args.tokens,
        "verify_context": context,
        "spec_step_ms": spec_ms,
        "random_draft_tau": tau,
        "target_step_ms": base_ms,
        "proposal_ms": proposal,
        "verify_ms": {str(w): ms for w, ms in verify.items()},
        "rest_ms": spec_ms - proposal - verify[8],
        "tau_for_2x": 2 * spec_ms / base_ms,
    }
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
