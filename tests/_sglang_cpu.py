"""SGLang 0.5.23's own code on our artefacts, in a subprocess of the tests with the isolated
sglang directory (scripts/install_sglang_parser.sh) on its path. Prints one JSON line.

    parse CONFIG VOCAB          parse_dspark_draft_config + resolve_runtime_config of a config.json,
                                and the slot convention its DSpark draft model reads
    rope DRAFT_DIR OUT          the draft's rotary embedding as SGLang builds it from the config
                                transformers loads (AutoConfig), applied to seeded q/k -> OUT (.pt)
    server_args MODEL_DIR IDS   our backend's ServerArgs through SGLang's resolution, our sampling
                                dict through its SamplingParams, Engine.generate's signature

Three imports are stood in for, none of them ever called here: torchvision (SGLang's multimodal
config modules import it at import time; the only torchvision for this torch is a CUDA build that
cannot load on a CPU torch), vllm (RotaryEmbedding imports vllm's fused kernel for a later
`forward` on devices SGLang does not recognise; `forward_native`, which the rope check calls, is
SGLang's own PyTorch code) and triton (SGLang's kernel modules decorate GPU kernels with
`triton.jit` at import time; the real package is ~1 GB and only its decorators are touched)."""

import importlib.abc
import importlib.machinery
import json
import sys
import types


class _AnyMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any


class _Any(metaclass=_AnyMeta):
    """Anything: a class, a decorator (`@triton.jit`, `@triton.jit(...)`), an attribute chain."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return self

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __getitem__(self, key):
        return self


class _StandIn(types.ModuleType):
    __path__: list = []
    __version__ = "0.0"

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("torchvision", "vllm", "triton"):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StandIn(spec.name)

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _StandInFinder())


def parse(config_path: str, vocab: str) -> dict:
    from sglang.srt.speculative.dspark_components.dspark_config import (
        get_dspark_sample_from_anchor,
        parse_dspark_draft_config,
        resolve_runtime_config,
    )

    config = json.loads(open(config_path).read())
    parsed = parse_dspark_draft_config(draft_hf_config=config)
    runtime = resolve_runtime_config(
        draft_hf_config=config, speculative_num_draft_tokens=None, target_vocab_size=int(vocab)
    )
    return {
        "parsed": {f: getattr(parsed, f) for f in parsed.__struct_fields__},
        "runtime": {f: getattr(runtime, f) for f in runtime.__struct_fields__},
        "sample_from_anchor": get_dspark_sample_from_anchor(config),  # what its draft model reads
    }


def rope(draft_dir: str, out: str) -> dict:
    """The attributes SGLang's draft attention reads (DFlashAttention.__init__ in
    srt/models/dflash.py: get_rope_config, an explicit rope_dim in the RoPE dict, the top-level
    partial_rotary_factor, rope_is_neox_style / is_neox_style), then SGLang's own get_rope."""
    import torch
    from sglang.srt.layers.rotary_embedding.factory import get_rope
    from sglang.srt.utils.hf_transformers.common import get_rope_config
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(draft_dir)
    theta, scaling = get_rope_config(config)
    head_dim = int(config.head_dim)
    rotary_dim, factor = head_dim, float(getattr(config, "partial_rotary_factor", 1.0))
    if scaling is not None and "rope_dim" in scaling:
        rotary_dim, factor = int(scaling["rope_dim"]), 1.0
        scaling = {
            k: v for k, v in scaling.items() if k not in ("rope_dim", "partial_rotary_factor")
        }
    neox = bool(getattr(config, "rope_is_neox_style", getattr(config, "is_neox_style", True)))
    emb = get_rope(
        head_dim,
        rotary_dim=rotary_dim,
        max_position=int(config.max_position_embeddings),
        base=theta,
        rope_scaling=scaling,
        is_neox_style=neox,
        dtype=torch.float32,
        partial_rotary_factor=factor,
    )
    g = torch.Generator().manual_seed(0)
    positions = torch.arange(3, 40, 3)
    q = torch.randn(positions.numel(), 2 * head_dim, generator=g)
    k = torch.randn(positions.numel(), head_dim, generator=g)
    q_rot, k_rot = emb.forward_native(positions, q.clone(), k.clone())
    torch.save({"positions": positions, "q": q, "k": k, "q_rot": q_rot, "k_rot": k_rot}, out)
    return {
        "rotary_dim": int(emb.rotary_dim),
        "is_neox_style": bool(emb.is_neox_style),
        "theta": float(theta),
        "head_dim": head_dim,
    }


def server_args(model_dir: str, ids: str) -> dict:
    import ast
    import pathlib

    import sglang
    from sglang.srt.sampling.sampling_params import SamplingParams

    from splitserve.target.backends.sglang import sampling_params, server_args_for
    from splitserve.target.config import TargetConfig

    capture = [int(i) for i in ids.split(",")]
    args = server_args_for(
        pathlib.Path(model_dir), TargetConfig(backend="sglang"), capture, context_length=512
    )
    args.resolve_once()  # SGLang's whole validation and resolution pipeline; raises on a problem
    params = SamplingParams(**sampling_params(0.7, 0.95, 16, 1234))
    engine = pathlib.Path(sglang.__file__).parent / "srt" / "entrypoints" / "engine.py"
    tree = ast.parse(engine.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Engine")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "generate")
    names = [a.arg for a in fn.args.args + fn.args.kwonlyargs]
    return {
        "resolved": True,
        "aux_ids": list(args.return_aux_hidden_state_layer_ids),
        "seed": params.sampling_seed,
        "generate_params": names,
    }


print(
    json.dumps(
        {"parse": parse, "rope": rope, "server_args": server_args}[sys.argv[1]](*sys.argv[2:])
    )
)
