"""Run SGLang 0.5.23's own DSpark config parser on an exported config.json (a subprocess of
tests/test_export.py, with the isolated .sglang-cpu/ directory on its path). Prints one JSON line.

torchvision is stood in for: SGLang's multimodal config modules import it at import time, the only
torchvision for this torch here is a CUDA build that cannot load on a CPU torch, and the DSpark
parser never calls it."""

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
    def __init__(self, *args, **kwargs):
        pass


class _StandIn(types.ModuleType):
    __path__: list = []
    __version__ = "0.0"

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any


class _TorchvisionFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StandIn(spec.name)

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _TorchvisionFinder())
from sglang.srt.speculative.dspark_components.dspark_config import (  # noqa: E402
    parse_dspark_draft_config, resolve_runtime_config)

config = json.loads(open(sys.argv[1]).read())
parsed = parse_dspark_draft_config(draft_hf_config=config)
runtime = resolve_runtime_config(draft_hf_config=config, speculative_num_draft_tokens=None,
                                 target_vocab_size=int(sys.argv[2]))
print(json.dumps({"parsed": {f: getattr(parsed, f) for f in parsed.__struct_fields__},
                  "runtime": {f: getattr(runtime, f) for f in runtime.__struct_fields__}}))
