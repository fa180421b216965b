"""Time one DSpark draft proposal step at the full vs a pruned vocabulary (draft.draft_vocab_size).

    python scripts/bench_draft_vocab.py --out docs/results/draft_vocab.json \
        [--hidden 4096 --vocab 151936 --k 32000 --layers 5 --block 7 --context 1024]

A random DSpark draft over a random target shape (no model files): its proposer
(draft_models.archs.dspark.DSparkProposer) is given `--context` committed positions, then one
proposal step, what the decoder runs per decode step (backbone over the block + LM head over
every slot + the Markov head and the draw slot by slot + the confidence head), is timed, greedy
and at temperature 1, with the target's [V, H] head and with a pruned draft's own [K, H] head
(Markov W2 [K, r]; the draws mapped back to target ids). Beside each time, its floor: the bytes
one proposal must read (`proposal_bytes`) over the device's copy bandwidth measured in the same
run; the floors' ratio bounds what pruning can gain where a step runs at its floor. On CUDA:
bf16, each step one CUDA-graph replay as the decoder replays it (serving.decoder.GraphedProposal),
of a torch.compile'd proposal with --compile (as `serving.evaluate --compile` decodes); elsewhere
fp32, eager (a smoke run: CPU timings say little about a GPU's). --profile (CUDA) adds each
replay's kernels (benchlib.kernel_table). Writes the JSON report to --out.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import copy_bandwidth, kernel_table, timed, write_report  # noqa: E402

from draft_models import DraftConfig, DSparkProposer, FrozenTargetHead, TargetSpec  # noqa: E402
from draft_models.models import build_draft  # noqa: E402
from draft_models.vocab import DraftVocab  # noqa: E402
from serving import cli  # noqa: E402


def build(args, k: int | None, head: FrozenTargetHead, spec: TargetSpec, device, dtype):
    """The draft (same seed at every K) on `device`, its maps the K lowest ids when pruned
    (which ids are kept does not change the cost)."""
    cfg = DraftConfig(
        num_layers=args.layers,
        block_size=args.block,
        markov_rank=args.markov_rank,
        target_layer_ids=list(range(1, 1 + args.target_layers)),
        mask_token_id=0,
        draft_vocab_size=k,
    )
    torch.manual_seed(0)
    with torch.device(device):  # built where it runs: no host copy of a large draft
        draft = build_draft(cfg, spec, head).to(dtype=dtype)
    if k:
        draft.set_vocab(DraftVocab.from_kept(torch.arange(k), spec.vocab_size))
    return draft.eval()


def proposal_bytes(draft, proposer, context: int) -> int:
    """Bytes one proposal reads at the least, each once (a floor: Markov W2, applied slot after
    slot, is counted once): every weight it applies (the layers and norms, the output head, the
    target's [V, H] or a pruned draft's own [K, H], Markov W2, the confidence head) and the keys
    and values of `context` committed positions (at the least: the step attends over its whole
    buffer); not the fusion layer `fc` and its `hidden_norm` (they run when positions are
    committed) nor embedding tables (a few rows gathered)."""
    gathered = {id(m.weight) for m in draft.modules() if isinstance(m, torch.nn.Embedding)}
    total = sum(
        p.numel() * p.element_size()
        for name, p in draft.named_parameters()
        if not name.startswith(("fc.", "hidden_norm.")) and id(p) not in gathered
    )
    if not draft.cfg.pruned_vocab:  # the target's head, outside the draft's parameters
        w = draft.target_head.lm_head_weight
        total += w.numel() * w.element_size()
    for k, v in proposer.ctx_kv:  # [rows x capacity, heads, head dim] per layer
        total += context * (k[0].numel() * k.element_size() + v[0].numel() * v.element_size())
    return total


def step_ms(draft, args, device) -> dict[str, float]:
    """Median ms of one proposal step, greedy and at T = 1, after committing the context, and
    the bytes it reads at the least (proposal_bytes)."""
    gamma, n = args.block, args.context
    proposer = DSparkProposer(
        draft, gamma, torch.ones(gamma, dtype=torch.float64, device=device), n + gamma + 1
    )
    g = torch.Generator().manual_seed(1)
    feats = torch.randn(n, args.target_layers * args.hidden, generator=g)
    tokens = torch.randint(0, args.vocab, (n,), generator=g)
    proposer.commit(feats.to(device, draft.fc.weight.dtype), tokens.to(device), 0)
    proposer.reset(0)
    anchor = tokens[-1:].to(device)
    if device.type == "cuda":
        from serving.decoder import GraphedProposal

        propose = GraphedProposal(proposer, compile=args.compile)
    else:
        propose = proposer.propose
    w2 = draft.markov_head.markov_w2.weight
    once = proposal_bytes(draft, proposer, n)
    out = {
        "read_bytes": once,
        # Markov W2 is applied slot after slot: where it does not stay in the device's cache
        # (the full [V, r] at 152k x 256 is ~78 MB in bf16) it is read gamma times
        "read_bytes_w2_per_slot": once + (gamma - 1) * w2.numel() * w2.element_size(),
    }
    for name, temperature in (("greedy_ms", 0.0), ("t1_ms", 1.0)):
        out[name] = 1000 * timed(lambda t=temperature: propose(anchor, n, t), args.repeats, device)
        if args.profile:  # where the replay's time goes, kernel by kernel
            kernels = kernel_table(lambda t=temperature: propose(anchor, n, t), device)
            out[name.replace("_ms", "_kernels")] = kernels
    return out


def main(argv=None) -> int:
    ap = cli.script_parser(__file__, __doc__)
    ap.add_argument("--out", required=True, type=Path, help="the JSON report to write")
    ap.add_argument("--hidden", type=int, default=4096, help="target (and draft) width")
    ap.add_argument("--heads", type=int, default=32, help="attention heads (head dim = H/heads)")
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--intermediate", type=int, default=12288, help="draft MLP width")
    ap.add_argument("--vocab", type=int, default=151936, help="the target's vocabulary V")
    ap.add_argument("--k", type=int, default=32000, help="the pruned draft vocabulary K")
    ap.add_argument("--layers", type=int, default=5, help="draft layers")
    ap.add_argument("--block", type=int, default=7, help="gamma: drafts per proposal")
    ap.add_argument("--markov-rank", type=int, default=256)
    ap.add_argument("--target-layers", type=int, default=5, help="injected target layers")
    ap.add_argument("--context", type=int, default=1024, help="committed context positions")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    ap.add_argument(
        "--compile", action="store_true", help="graph a torch.compile'd proposal (CUDA)"
    )
    ap.add_argument("--profile", action="store_true", help="list each replay's kernels (CUDA)")
    args = ap.parse_args(argv)
    if not args.block < args.k < args.vocab:
        ap.error(f"--k {args.k}: need --block ({args.block}) < K < --vocab ({args.vocab})")
    auto = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(auto if args.device == "auto" else args.device)
    if args.compile and device.type != "cuda":
        ap.error(
            "--compile: the compiled proposal is captured in CUDA graphs; it needs --device cuda"
        )
    if args.profile and device.type != "cuda":
        ap.error("--profile lists a graph replay's CUDA kernels; it needs --device cuda")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    spec = TargetSpec(
        model_type="llama",
        hidden_size=args.hidden,
        num_layers=args.target_layers + 3,
        vocab_size=args.vocab,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.hidden // args.heads,
        intermediate_size=args.intermediate,
    )
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(args.vocab, args.hidden, generator=g) * 0.02
    head = FrozenTargetHead(weight, weight).to(device=device, dtype=dtype)  # tied: one copy
    rows = {}
    bandwidth = copy_bandwidth(device)
    with torch.no_grad():
        for name, k in (("full", None), ("pruned", args.k)):
            draft = build(args, k, head, spec, device, dtype)
            row = rows[name] = {
                "output_vocab": k or args.vocab,
                "draft_params": sum(p.numel() for p in draft.parameters()),
                **step_ms(draft, args, device),
            }
            row["floor_ms"] = 1000 * row["read_bytes"] / bandwidth
            row["greedy_over_floor"] = row["greedy_ms"] / row["floor_ms"]
            del draft
    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "dtype": str(dtype),
        "graphed": device.type == "cuda",
        "compiled": args.compile,
        "command": cli.command_line(ap, argv),
        "shape": {
            k: getattr(args, k)
            for k in (
                "hidden",
                "heads",
                "kv_heads",
                "intermediate",
                "vocab",
                "k",
                "layers",
                "block",
                "markov_rank",
                "target_layers",
                "context",
            )
        },  # fmt: skip
        "full": rows["full"],
        "pruned": rows["pruned"],
        "speedup_greedy": rows["full"]["greedy_ms"] / rows["pruned"]["greedy_ms"],
        "speedup_t1": rows["full"]["t1_ms"] / rows["pruned"]["t1_ms"],
        # what pruning could gain were both steps at their floors
        "floor_speedup": rows["full"]["floor_ms"] / rows["pruned"]["floor_ms"],
        "floor_speedup_w2_per_slot": rows["full"]["read_bytes_w2_per_slot"]
        / rows["pruned"]["read_bytes_w2_per_slot"],
        "copy_gb_per_s": bandwidth / 1e9,
    }
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
