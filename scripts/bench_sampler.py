"""The regeneration sampler alone: the Triton program per row against the PyTorch path, on real
mid-answer logits, beside the floor of reading the logits once.

    python scripts/bench_sampler.py --out docs/results/throughput_h200/sampler.json
        [--rows 1024] [--prompts 256] [--steps 48] [--top-p 0.95] [--repeats 50]

The logits are SmolLM2's own (the embedded target): `--prompts` training prompts (GSM8K and
ShareGPT, as bench_regen takes them) each answered for `--steps` tokens at temperature 1, every
step's next-token logits kept; `--rows` of them, drawn at random, make the batch, in the rows'
dtype at regeneration (bf16 on CUDA). Rows alternate greedy and temperature 1 with top_p, the
regeneration recipe's mix. Timed, each as one CUDA-graph replay (mean of `--repeats` back to
back): the PyTorch sampler (`sampling.sample_rows` with the kernel off) and the Triton one,
each with and without the nucleus; reported beside the time to read the logits once at this
device's copy bandwidth (benchlib.copy_bandwidth, the same run), the rows each kernel path took
(sampling_kernels.PATHS), how many rows' tokens the two samplers drew differently (fp32 against
fp64 sums) and how many candidates the nucleus rows have (`candidates`, computed in torch). On
CPU: fp32, eager, the PyTorch sampler only (and the candidates). Writes JSON to --out.
"""

from __future__ import annotations

import platform
import sys
from functools import partial
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from bench_regen import prompt_conversations  # noqa: E402  (scripts/)
from benchlib import back_to_back_ms, copy_bandwidth, write_report  # noqa: E402

from draft_models.sampling import counter_row_uniform  # noqa: E402
from serving import cli  # noqa: E402
from splitserve.data import prompt_turns  # noqa: E402
from splitserve.target.config import resolve_dtype  # noqa: E402
from splitserve.target.embedded import ensure_smollm2  # noqa: E402
from splitserve.target.models import load_causal_lm  # noqa: E402
from splitserve.target.runtime import sampling, sampling_kernels  # noqa: E402
from splitserve.target.runtime.graphs import capture  # noqa: E402


@torch.no_grad()
def answer_logits(args, device, dtype) -> torch.Tensor:
    """[rows, V] next-token logits from SmolLM2 answering the prompts at temperature 1."""
    from transformers import AutoTokenizer

    model_dir = ensure_smollm2()
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    tok.truncation_side = "left"  # a long prompt keeps its end: the assistant's turn opening
    model = load_causal_lm(model_dir, device, dtype)
    texts = [
        tok.apply_chat_template(prompt_turns(c), tokenize=False, add_generation_prompt=True)
        for c in prompt_conversations(args.prompts)
    ]
    batch = tok(texts, return_tensors="pt", padding=True, truncation=True, max_length=256)
    torch.manual_seed(0)  # the same answers, so the same logits, each run on a device
    out = model.generate(
        **batch.to(device), do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
        max_new_tokens=args.steps, min_new_tokens=args.steps, output_logits=True,
        return_dict_in_generate=True, pad_token_id=tok.pad_token_id or tok.eos_token_id,
    )  # fmt: skip
    every = torch.cat(list(out.logits), 0)  # [steps x prompts, V]
    g = torch.Generator().manual_seed(0)
    pick = torch.randint(0, every.shape[0], (args.rows,), generator=g).to(device)
    return every.index_select(0, pick).to(dtype).contiguous()


def candidate_counts(logits, temperature, top_p, capacity: int) -> dict:
    """How many entries of each nucleus row (temperature > 0, top_p < 1) the Triton sampler
    copies out (s - m > ln((1 - p) z / V) - 1, sampling_kernels' bound), computed here in
    torch: quantiles and the share of rows over the scratch's capacity."""
    rows = (temperature > 0) & (top_p < 1)
    s = logits[rows].float() / temperature[rows, None]
    m = s.max(-1, keepdim=True).values
    z = (s - m).exp().sum(-1, keepdim=True)
    d = ((1 - top_p[rows, None]) * z / s.shape[-1]).log() - 1
    n = (s - m > d).sum(-1).float().cpu()
    if not n.numel():
        return {"rows": 0}
    q = [round(float(n.quantile(x)), 1) for x in (0.5, 0.9, 0.99)]
    return {
        "rows": n.numel(), "median": q[0], "p90": q[1], "p99": q[2], "max": int(n.max()),
        "capacity": capacity, "over_capacity": round(float((n > capacity).float().mean()), 4),
    }  # fmt: skip


def replay_ms(fn, repeats: int, device) -> float:
    """Mean ms of one call, `repeats` back to back: a CUDA-graph replay on CUDA (captured by
    the runtime's graphs.capture), an eager call elsewhere."""
    if device.type == "cuda":
        graph, _ = capture(fn, device)
        fn = graph.replay
    return back_to_back_ms(fn, repeats, device)


def main(argv=None) -> None:
    p = cli.script_parser(__file__, __doc__)
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--rows", type=int, default=1024, help="rows sampled at once (slots)")
    p.add_argument("--prompts", type=int, default=256, help="prompts answered for the logits")
    p.add_argument("--steps", type=int, default=48, help="answer tokens per prompt")
    p.add_argument("--top-p", type=float, default=0.95, help="top_p of the temperature-1 rows")
    p.add_argument("--repeats", type=int, default=50, help="timed replays per sampler")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args(argv)
    for flag in ("rows", "prompts", "steps", "repeats"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag} must be >= 1")
    if not 0 < args.top_p <= 1:
        p.error(f"--top-p {args.top_p}: a number in (0, 1]")
    device = torch.device(args.device)
    dtype = resolve_dtype("auto", device)
    logits = answer_logits(args, device, dtype)
    n = args.rows
    seed, pos = torch.arange(n, device=device), torch.full((n,), 7, device=device)
    temperature = torch.tensor([0.0, 1.0], device=device).repeat(n // 2 + 1)[:n]
    top_p = torch.full((n,), args.top_p, device=device)
    bandwidth = copy_bandwidth(device)
    read_once = logits.numel() * logits.element_size()
    cuda = device.type == "cuda"
    kernel = cuda and sampling_kernels.available()
    report = {
        "device": torch.cuda.get_device_name(device) if cuda else platform.processor(),
        "torch": torch.__version__,
        "command": cli.command_line(p, argv),
        "rows": n,
        "vocab": logits.shape[1],
        "dtype": str(dtype).removeprefix("torch."),
        "copy_bandwidth_GBps": round(bandwidth / 1e9, 1),
        "read_logits_once_ms": round(1e3 * read_once / bandwidth, 4),
        "candidates": candidate_counts(logits, temperature, top_p, sampling_kernels.CAPACITY),
        "results": [],
    }  # fmt: skip
    for nucleus in (False, True):
        tokens = {}
        for name in ("torch", "triton") if kernel else ("torch",):
            sampling.use_kernel = name == "triton"
            run = partial(sampling.sample_rows, logits, seed, pos, temperature, top_p, nucleus)
            ms = replay_ms(run, args.repeats, device)
            tokens[name] = run()
            report["results"].append({"sampler": name, "nucleus": nucleus, "ms": round(ms, 4)})
            print(report["results"][-1], flush=True)
        if kernel:
            u = counter_row_uniform(seed, pos)
            _, path = sampling_kernels.sample_rows_with_paths(
                logits, u, temperature, top_p, nucleus
            )
            taken = torch.bincount(path.long(), minlength=len(sampling_kernels.PATHS)).tolist()
            report["results"][-1]["paths"] = dict(zip(sampling_kernels.PATHS, taken, strict=True))
            report["results"][-1]["rows_differing_from_torch"] = int(
                (tokens["torch"] != tokens["triton"]).sum()
            )
    sampling.use_kernel = True
    write_report(Path(args.out), report)


if __name__ == "__main__":
    main()
