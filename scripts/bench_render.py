"""The host's rendering work per training sample, and how much of it `splitserve.target.ahead`
takes off a target worker's critical path.

    python scripts/bench_render.py --out docs/results/runtime_h200/render_cpu.json [--samples 500]
        [--wait-ms 4] [--source gsm8k|sharegpt] [--max-length 1024]

On the embedded SmolLM2's tokenizer and the source's training conversations (GSM8K: question,
answer; ShareGPT: multi-turn), per sample: `render_with_loss_mask` whole and cut to
--max-length (what a teacher-forced target renders: `TargetBackend.teacher_forced`),
`prompt_ids` of the turns before the first answer (what a regenerating one renders) and one
whole render (`apply_chat_template`: the unit of all of them; the loss mask renders the
conversation up to each answer twice, so a long multi-turn conversation costs far more than its
cut), and in how many conversations the cut render is the whole one's first --max-length tokens
and mask (all of them, or the cut is wrong).

Then the static backend's teacher-forced loop shape: render a sample, then wait `--wait-ms` with
the GIL released (time.sleep, standing in for the device and the sends: a stand-in, not a GPU
measurement), inline and with the rendering done `ahead`. Inline costs render + wait a sample;
ahead, about the larger of the two.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

import torch
from benchlib import write_report
from transformers import AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, installed or not
from serving import cli  # noqa: E402
from splitserve.data import default_path, prompt_turns, read_gsm8k, read_sharegpt  # noqa: E402
from splitserve.target.ahead import ahead  # noqa: E402
from splitserve.target.chat import prompt_ids, render_with_loss_mask  # noqa: E402
from splitserve.target.embedded import ensure_smollm2  # noqa: E402


def cpu_model() -> str:
    """This machine's CPU, from /proc/cpuinfo where there is one."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def per_sample_ms(fn, items) -> float:
    fn(items[0])  # warm-up (template compilation)
    t0 = time.perf_counter()
    for x in items:
        fn(x)
    return (time.perf_counter() - t0) * 1e3 / len(items)


def loop_ms(render, items, wait_s: float, depth: int) -> float:
    """Wall time per sample of render-then-wait, rendered inline (depth 0) or ahead."""
    source = ahead(render, items, depth)
    t0 = time.perf_counter()
    for _ in source:
        time.sleep(wait_s)
    return (time.perf_counter() - t0) * 1e3 / len(items)


def build_parser():
    ap = cli.script_parser(__file__, __doc__)
    ap.add_argument("--out", type=Path, required=True, help="JSON report")
    ap.add_argument("--samples", type=cli.POSITIVE, default=500, help="conversations")
    ap.add_argument("--source", choices=("gsm8k", "sharegpt"), default="gsm8k")
    ap.add_argument(
        "--max-length", type=cli.POSITIVE, default=1024, help="the cut (data.max_length)"
    )
    ap.add_argument(
        "--wait-ms", type=cli.float_in(0.0), default=4.0, help="stand-in wait a sample, ms"
    )
    ap.add_argument("--depth", type=cli.POSITIVE, default=64, help="samples rendered ahead")
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(ensure_smollm2())
    read = read_gsm8k if args.source == "gsm8k" else read_sharegpt
    conversations = read(default_path(args.source), args.samples)
    prompts = [prompt_turns(c) for c in conversations]
    render = lambda c: render_with_loss_mask(tokenizer, c, args.max_length)  # noqa: E731
    uncut = lambda c: render_with_loss_mask(tokenizer, c)  # noqa: E731
    whole, cut = [uncut(c) for c in conversations], [render(c) for c in conversations]
    tokens = sum(ids.numel() for ids, _ in whole) / len(conversations)
    kept = sum(ids.numel() for ids, _ in cut) / len(conversations)
    # the cut render is the whole one's first max_length tokens and mask, conversation by one
    same = sum(
        torch.equal(a[: args.max_length], b) and torch.equal(m[: args.max_length], n)
        for (a, m), (b, n) in zip(whole, cut, strict=True)
    )
    one = per_sample_ms(lambda c: tokenizer.apply_chat_template(c, tokenize=True), conversations)
    report = {
        "command": cli.command_line(ap, argv),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "source": args.source,
        "samples": len(conversations),
        "tokens_per_sample": round(tokens, 1),
        "max_length": args.max_length,
        "tokens_per_sample_cut": round(kept, 1),
        "cut_equals_whole_cut": same,
        "one_render_ms": round(one, 3),
        "render_with_loss_mask_ms": round(per_sample_ms(uncut, conversations), 3),
        "render_with_loss_mask_cut_ms": round(per_sample_ms(render, conversations), 3),
        "prompt_ids_ms": round(per_sample_ms(lambda m: prompt_ids(tokenizer, m), prompts), 3),
        "wait_ms": args.wait_ms,
        "depth": args.depth,
        "loop_inline_ms": round(loop_ms(render, conversations, args.wait_ms / 1e3, 0), 3),
        "loop_ahead_ms": round(loop_ms(render, conversations, args.wait_ms / 1e3, args.depth), 3),
    }
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
