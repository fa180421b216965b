"""The target runtime: engines that run the frozen target for the speculative decoder (eager,
or a static cache with CUDA graphs) and the static-cache model they replay."""

from .engines import RUNTIMES, EagerEngine, StaticEngine, make_engine, static_supported

__all__ = ["RUNTIMES", "EagerEngine", "StaticEngine", "make_engine", "static_supported"]
