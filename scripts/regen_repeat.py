"""Does regeneration repeat itself in one process, and where does a repeat first part?

    python scripts/regen_repeat.py --out docs/results/runtime_h200/repeat.json [--samples 512]
        [--repeats 2] [--same-engine] [--no-graphs] [--sdpa default|math] [--deterministic]
        [--device auto] [overrides...]

Why: five regenerations of one recipe and seed on H200s wrote five files, and two processes on
one machine agreed on 201 of 939 samples (2026-12-03), where the static backend's samples
should depend only on their prompt, seed and logits (splitserve/target/runtime/sampling.py).
What this script then found: docs/results/runtime_h200 (`regeneration.repeats`). It regenerates
samples 0..N-1 of the run's prompt stream (the overrides are a training run's, as
`splitserve.regenerate` takes them) `--repeats` times in one process, each on a fresh engine (a
new cache and CUDA-graph capture; `--same-engine` reuses the first), and compares every repeat
with the first, sample by sample:

- the tokens, and the first position where they part (`first_token_diff`);
- the captured final states (the LM head's input) over the positions both repeats fed the same
  tokens: the prompt's (the prefill) and the answer's up to the parting. `first_state_diff` is
  the first position whose state is not bit-identical.

A state that differs before the tokens part says the forward is not repeatable (which switches
change that: `--no-graphs`, `--sdpa math`, `--deterministic` =
torch.use_deterministic_algorithms(warn_only) with CUBLAS_WORKSPACE_CONFIG; an op with no
deterministic version only warns, and the report lists the warnings); tokens that part after
bit-identical states point past the state: the LM head's product or the sampler (a sampled
row's nucleus sort and cumsum; a greedy row's argmax). Only the first prefill's samples (the
first `target.generate_batch`) have the same prefill shapes in every repeat: a later sample's
prefill group depends on which rows finished first, so once any sample parts, later prompts
can round with other shapes (bf16) and their states differ without any kernel misbehaving. The
report counts them apart (`first_prefill`). Only the static backend (`target.backend=static`,
the GPU default for Llama-family targets) is built here.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from benchlib import write_report

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not
from serving import cli  # noqa: E402
from splitserve.regenerate import (  # noqa: E402
    compose_run_config,
    fitting_ids,
    pick_device,
    target_and_stream,
)


def compare(a_ids, b_ids, a_final, b_final, prompt_len: int) -> dict:
    """One sample's two repeats: ids [L], final states [L, H]. Positions before the first token
    that differs were fed the same tokens in both, so their states should be bit-identical."""
    n = min(a_ids.numel(), b_ids.numel())
    differs = (a_ids[:n] != b_ids[:n]).nonzero()
    same_length = a_ids.numel() == b_ids.numel()
    first_token = int(differs[0]) if differs.numel() else (None if same_length else n)
    # the state at position t is computed from tokens 0..t: comparable up to the first differing
    # token, exclusive
    upto = n if first_token is None else first_token
    delta = (a_final[:upto].float() - b_final[:upto].float()).abs().amax(-1)  # [upto]
    moved = (delta > 0).nonzero()
    return {
        "tokens_equal": first_token is None,
        "first_token_diff": first_token,  # a position in the sequence (prompt included)
        "prompt_len": prompt_len,
        "first_state_diff": int(moved[0]) if moved.numel() else None,
        "prompt_state_max_abs": float(delta[:prompt_len].max()) if upto and prompt_len else 0.0,
        "state_max_abs": float(delta.max()) if upto else 0.0,
    }


def summarize(rows: list[dict], temperatures: list[float]) -> dict:
    """Counts over the samples of one repeat against the first."""
    parted = [r for r in rows if not r["tokens_equal"]]
    state_first = [
        r
        for r in parted
        if r["first_state_diff"] is not None and r["first_state_diff"] < r["first_token_diff"]
    ]
    by_setting: dict[str, dict] = {}
    for r, t in zip(rows, temperatures, strict=True):
        s = by_setting.setdefault(f"temperature={t:g}", {"samples": 0, "tokens_equal": 0})
        s["samples"] += 1
        s["tokens_equal"] += r["tokens_equal"]
    into = sorted(r["first_token_diff"] - r["prompt_len"] for r in parted)
    return {
        "samples": len(rows),
        "tokens_equal": len(rows) - len(parted),
        "prompt_states_differ": sum(r["prompt_state_max_abs"] > 0 for r in rows),
        "states_differ_before_tokens": len(state_first),
        "tokens_differ_after_identical_states": len(parted) - len(state_first),
        "median_answer_tokens_before_parting": statistics.median(into) if into else None,
        "state_max_abs": max((r["state_max_abs"] for r in rows), default=0.0),
        "by_setting": by_setting,
    }


def main(argv=None) -> None:
    p = cli.script_parser(__file__, __doc__)
    p.add_argument("--out", type=Path, required=True, help="JSON report to write")
    p.add_argument("--samples", type=cli.int_at_least(1), default=512, help="samples 0..N-1")
    p.add_argument("--repeats", type=cli.int_at_least(2), default=2, help="runs of them")
    p.add_argument("--same-engine", action="store_true", help="reuse the first run's engine")
    p.add_argument("--no-graphs", action="store_true", help="eager steps (no CUDA graphs)")
    p.add_argument("--sdpa", choices=("default", "math"), default="default", help="attention")
    p.add_argument(
        "--deterministic", action="store_true", help="torch.use_deterministic_algorithms"
    )
    p.add_argument("--device", default="auto", help="auto (GPU when available) | cpu | cuda[:i]")
    p.add_argument("overrides", nargs="*", help="the run's Hydra overrides (+recipe=smol_gpu)")
    args = p.parse_args(argv)
    if args.deterministic:  # cuBLAS reads it when its handle is made: before any CUDA work
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
    device = pick_device(args.device)
    cfg = compose_run_config(args.overrides)
    if cfg.target.backend not in ("static", "auto") or not cfg.target.regenerate:
        p.error(
            f"target.backend={cfg.target.backend}, target.regenerate={cfg.target.regenerate}: "
            "this compares the static backend's regeneration (backend static, regenerate true)"
        )
    graphs = device.type == "cuda" and not args.no_graphs
    attention = contextlib.nullcontext
    if args.sdpa == "math":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        attention = lambda: sdpa_kernel([SDPBackend.MATH])  # noqa: E731
    with attention(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        backend, stream = target_and_stream(cfg, device)  # `auto` resolved here
        if cfg.target.backend != "static":
            p.error(f"target.backend=auto runs {cfg.target.backend} here; this needs static")
        gs = fitting_ids(stream, backend.tokenizer, cfg.data.max_prompt_tokens, range(args.samples))
        convs = [stream[g] for g in gs]
        temperatures = [backend.setting(g).temperature for g in gs]
        slots, runs, walls, engines = backend.engine.slots, [], [], 0
        for r in range(args.repeats):
            if r == 0 or not args.same_engine:  # built under this script's switches
                backend.engine = None  # the old engine's cache freed before the new one's
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                backend.engine = backend.new_engine(graphs)
                engines += 1
            t0 = time.perf_counter()
            got = [None] * len(gs)
            for i, sample in backend.produce_stream(gs, convs):
                mask = sample.loss_mask.bool()  # False on the prompt, then the answer
                prompt_len = int(mask.long().argmax()) if mask.any() else mask.numel()
                got[i] = (sample.input_ids.cpu(), sample.final_hidden.cpu(), prompt_len)
            walls.append(round(time.perf_counter() - t0, 2))
            runs.append(got)
            print(f"repeat {r}: {len(gs)} samples in {walls[-1]} s", flush=True)
    first = runs[0]
    against = []
    for r in range(1, args.repeats):
        rows = [compare(a[0], b[0], a[1], b[1], a[2]) for a, b in zip(first, runs[r], strict=True)]
        first_group = min(len(rows), slots)  # one prefill, the same in every repeat
        against.append(
            {
                "repeat": r,
                **summarize(rows, temperatures),
                "first_prefill": summarize(rows[:first_group], temperatures[:first_group]),
                "per_sample": rows,
            }
        )
    report = {
        "command": cli.command_line(p, argv),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "dtype": str(backend.dtype),
        "graphs": graphs,
        "sdpa": args.sdpa,
        "deterministic": args.deterministic,
        "same_engine": args.same_engine,
        "slots": slots,
        "samples_asked": args.samples,
        "samples": len(gs),
        "engines_built": engines,
        "wall_s": walls,
        # what ran without a deterministic version, among other warnings (--deterministic)
        "warnings": sorted({f"{w.category.__name__}: {w.message}"[:300] for w in caught}),
        "against_first": against,
    }
    write_report(args.out, report)


if __name__ == "__main__":
    main()
