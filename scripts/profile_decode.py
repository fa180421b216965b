"""Where a decode step's time goes with a trained draft: the step as `generate` runs it, its one
CUDA graph replayed back to back, and the kernels inside that graph; speculative and target-only.

    python scripts/profile_decode.py --checkpoint CKPT [--target DIR] \
        --out docs/results/runtime_h200/profile_DRAFT.json [--prompts 10] [--tokens 128]
        [--replays 200] [--compile [--skip-parts]]

On the static runtime (bf16 on a GPU), fixed schedule, one verify width (gamma + 1: one graph
per cache-length bucket), GSM8K prompts; per decoder (`spec`, `base` = target-only):
- `step_ms`: wall time per step of whole `generate` calls after a warm-up pass over the same
  prompts (so no capture is timed; the prompts' prefills are included), and `tau`;
- `replay_ms`: the step's graph (the largest bucket used) replayed `--replays` times with one
  synchronisation at the end: the device's time per step when the host never waits.
  `host_ms` = step_ms - replay_ms: the decode loop's Python, the read of the emitted tokens
  (the host waits for the step, then launches the next: nothing overlaps) and the prefills;
- `kernels`: torch.profiler over 20 replays, per replay: how many kernels ran, the sum of their
  durations, and the 15 largest by time (name, count, ms). `gaps_ms` = replay_ms - kernel sum:
  the time the device spends between the kernels of the graph;
- `proposal_ms` (the proposal's own graph) and `verify_ms` (the target's verify graph at width 1
  and gamma + 1, over a context of the longest prompt plus half the tokens); `--skip-parts`
  leaves them out (with `--compile` each compiles again: a compiled profile with them ran past
  330 s on 2026-12-02).
On CPU (no graphs) the same code runs eagerly: a smoke run, not a measurement.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_runtime import step_ms  # noqa: E402  (scripts/)
from bench_step import per_step_ms  # noqa: E402
from benchlib import back_to_back_ms, kernel_table, write_report  # noqa: E402

from serving import cli  # noqa: E402
from serving.benchmarks import load_bench  # noqa: E402
from serving.decoder import SpeculativeDecoder  # noqa: E402
from serving.loading import load_decoder  # noqa: E402
from serving.scheduler import SchedulerConfig  # noqa: E402
from splitserve import checkpoint  # noqa: E402
from splitserve.target.chat import prompt_ids  # noqa: E402


def largest_step(dec: SpeculativeDecoder):
    """A callable running the decoder's fused step at the largest bucket the prompts reached:
    its graph's replay on a GPU, the eager step elsewhere. The request has ended, so the row
    stands still (same work, fixed shapes) at a position inside that bucket."""
    fused = dec.fused
    if fused is None or not fused.graphs:
        return None
    key = max(fused.graphs, key=lambda k: k[1])
    graph, _ = fused.graphs[key]
    return graph.replay


def main() -> int:
    ap = argparse.ArgumentParser(
        prog=cli.script_prog(__file__),
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    ap.add_argument("--checkpoint", required=True, type=Path, help="checkpoint, run or export")
    ap.add_argument("--target", type=Path, help="target directory (an export needs it)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--compile", action="store_true", help="the decoders' compile")
    ap.add_argument("--skip-parts", action="store_true", help="leave out proposal_ms and verify_ms")
    args = ap.parse_args()
    ckpt = checkpoint.resolve(args.checkpoint)
    gamma = checkpoint.read_draft(ckpt).cfg.block_size
    spec, tok = load_decoder(
        ckpt,
        args.target,
        scheduler=SchedulerConfig("fixed"),
        verify_widths=[gamma + 1],
        runtime="static",
        compile=args.compile,
    )
    device = spec.device
    base = SpeculativeDecoder(
        spec.target, None, runtime="static", max_len=spec.max_len, compile=args.compile
    )
    prompts = [
        prompt_ids(tok, [{"role": "user", "content": item[0]}])
        for item in load_bench("gsm8k", args.prompts)
    ]
    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "command": cli.command_line(ap, None),
        "checkpoint": str(ckpt),
        "compile": args.compile,
        "prompts": len(prompts),
        "tokens": args.tokens,
        "gamma": gamma,
    }
    for name, dec in (("spec", spec), ("base", base)):
        ms, tau = per_step_ms(dec, prompts, args.tokens, device)
        part = {"step_ms": ms, "tau": tau}
        replay = largest_step(dec)
        if replay is not None:
            part["replay_ms"] = back_to_back_ms(replay, args.replays, device)
            part["host_ms"] = ms - part["replay_ms"]
            part["kernels"] = kernel_table(replay, device)
            part["gaps_ms"] = part["replay_ms"] - part["kernels"]["sum_ms"]
        report[name] = part
    if not args.skip_parts:
        context = max(len(p) for p in prompts) + args.tokens // 2
        vocab = spec.target.config.vocab_size
        report["proposal_ms"] = 1000 * spec.draft_step_seconds(prompts[0], 30)
        report["verify_ms"] = {
            str(w): step_ms(dec.engine, w, context, vocab, 30, device)
            for w, dec in ((1, base), (gamma + 1, spec))
        }
    spec_r, base_r = report["spec"], report["base"]
    report["speedup"] = spec_r["tau"] * base_r["step_ms"] / spec_r["step_ms"]
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
