"""scripts/bench_draft_vocab.py on CPU with a tiny shape: it times the full and the pruned
proposal step and records what it ran."""

import subprocess
import sys

import pytest
from conftest import ROOT, script_report


def test_bench_draft_vocab_times_both_vocabularies(tmp_path):
    args = ["--hidden", "32", "--heads", "4", "--kv-heads", "2", "--intermediate", "64"]
    args += ["--vocab", "300", "--k", "40", "--layers", "1", "--block", "4", "--markov-rank", "8"]
    args += ["--target-layers", "2", "--context", "16", "--repeats", "2", "--device", "cpu"]
    report = script_report(tmp_path, "bench_draft_vocab.py", *args)  # its exact command checked
    assert report["device"] == "cpu" and report["dtype"] == "torch.float32"
    assert not report["graphed"] and not report["compiled"]
    assert report["shape"]["vocab"] == 300 and report["shape"]["k"] == 40
    assert report["full"]["output_vocab"] == 300 and report["pruned"]["output_vocab"] == 40
    # the pruned draft's own head [K, H] and Markov W2 [K, r]: 40 x 32 more, 260 x 8 fewer
    assert report["pruned"]["draft_params"] - report["full"]["draft_params"] == 40 * 32 - 260 * 8
    for row in (report["full"], report["pruned"]):
        assert row["greedy_ms"] > 0 and row["t1_ms"] > 0
    assert report["speedup_greedy"] == report["full"]["greedy_ms"] / report["pruned"]["greedy_ms"]
    # bytes a proposal reads at the least (fp32 here): 1 layer (q 32x32, k/v 16x32 each, o 32x32,
    # MLP 3 x 64x32, 2 norms of 32, q/k norms of 8), the final norm (32), the output head,
    # Markov W2, the confidence head (32 + 8 inputs and a bias), and 16 positions' keys and
    # values (2 heads of 8); not fc and hidden_norm (commit only) nor Markov W1 (rows gathered)
    shared = (32 * 32 * 2 + 16 * 32 * 2 + 3 * 64 * 32 + 2 * 32 + 2 * 8) + 32 + (40 + 1)
    kv = 16 * 2 * (2 * 8)
    assert report["full"]["read_bytes"] == 4 * (shared + 300 * 32 + 300 * 8 + kv)
    assert report["pruned"]["read_bytes"] == 4 * (shared + 40 * 32 + 40 * 8 + kv)
    bandwidth = report["copy_gb_per_s"] * 1e9
    for row in (report["full"], report["pruned"]):  # (the report rounds nothing)
        assert row["floor_ms"] == pytest.approx(1000 * row["read_bytes"] / bandwidth, rel=1e-12)
        assert row["greedy_over_floor"] == row["greedy_ms"] / row["floor_ms"]
    ratio = report["full"]["read_bytes"] / report["pruned"]["read_bytes"]
    assert report["floor_speedup"] == pytest.approx(ratio, rel=1e-12)
    # Markov W2 ([300 or 40, 8]) read for each of the 4 slots: 3 more reads
    for row, rows in ((report["full"], 300), (report["pruned"], 40)):
        assert row["read_bytes_w2_per_slot"] == row["read_bytes"] + 3 * 4 * rows * 8


@pytest.mark.parametrize(
    "flag, said",
    [
        ("--compile", "--compile: the compiled proposal is captured in CUDA graphs"),
        ("--profile", "--profile lists a graph replay's CUDA kernels; it needs --device cuda"),
    ],
)
def test_cuda_only_flags_are_refused_by_name_on_cpu(tmp_path, flag, said):
    script = str(ROOT / "scripts" / "bench_draft_vocab.py")
    argv = [sys.executable, script, "--out", str(tmp_path / "r.json"), flag]
    proc = subprocess.run([*argv, "--device", "cpu"], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr[-500:]
    assert said in proc.stderr
    assert not (tmp_path / "r.json").exists()
