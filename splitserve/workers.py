"""Worker processes of one training run: target workers, trainer workers, or both in one process.

Process groups: trainers form their own torch.distributed world (DeepSpeed's data-parallel group;
DeepSpeed's checkpoint code issues world-wide barriers, so no target may be in that world). Every
process also joins a data-plane process group over a shared TCPStore, targets first
(link ranks 0..T-1) then trainers (T..T+R-1), used only for sample/credit point-to-point traffic.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from draft_models.vocab import DraftVocab

from . import checkpoint as ckpt
from .config import RunConfig, import_plugins, in_flight
from .data import Conversation, PromptStream
from .profiling import StepProfiler
from .target.backends import (
    TargetBackend,
    TargetSetup,
    backend_class,
    make_backend,
    resolve_backend,
)
from .target.models import load_frozen_head, load_target_spec
from .topology import Topology
from .trainer import DraftTrainer
from .transport import Link, SampleReceiver, open_link, serve_samples
from .waits import WaitWatch, compile_seconds

TIMEOUT = datetime.timedelta(minutes=30)
INTERRUPTED = 130  # a worker's exit code once asked to stop (128 + SIGINT, as a shell reports it)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Stop:
    requested = False


def _request_stop(signum, frame) -> None:
    """Ctrl-C (which reaches every process of the group) or the launcher's SIGTERM: raised once,
    as KeyboardInterrupt, so the finally blocks close the metrics file and wandb; a second signal
    must not break into that cleanup."""
    if not _Stop.requested:
        _Stop.requested = True
        raise KeyboardInterrupt


def stops_quietly(main):
    """A worker entry point that, once asked to stop, exits with INTERRUPTED and no traceback
    (any error the stop causes, e.g. a peer's closed connection, included): one traceback per
    process would bury the launcher's one line. (The launcher starts workers with SIGINT ignored,
    so a Ctrl-C while one still imports leaves the stop to the launcher.)"""

    @functools.wraps(main)
    def worker(*args):
        for sig in STOP_SIGNALS:
            signal.signal(sig, _request_stop)
        try:
            main(*args)
        except BaseException:
            if not _Stop.requested:
                raise
            _exit_now(INTERRUPTED)

    return worker


def _exit_now(code: int) -> None:
    """Exit without the interpreter's teardown, which destroys gloo's and DeepSpeed's native
    threads while they still wait on stopped peers (C++'s "terminate called without an active
    exception"); multiprocessing's finalizers still run (they release its semaphores, else
    reported as leaked), and the output is flushed."""
    from multiprocessing import util

    try:
        util._exit_function()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


@dataclass
class RunContext:
    """Everything a worker needs, picklable (sent to spawned processes)."""

    cfg: RunConfig
    config_yaml: str
    run_dir: str
    model_dir: str
    topology: Topology
    train_prompts: list[Conversation]
    eval_prompts: list[Conversation]
    start_step: int = 0
    resume_from: str | None = None
    init_from: str | None = None  # draft weights a new run starts from (train.init_from)
    device: str = "cpu"
    link_backend: str = "gloo"
    store_port: int = 0
    trainer_port: int = 0
    target_layer_ids: list[int] = field(default_factory=list)  # the resolved draft's
    draft_vocab: DraftVocab | None = None  # a pruned draft vocabulary's maps (train.draft_vocab)

    def conversation(self, g: int) -> Conversation:
        if g < 0:
            return self.eval_prompts[-g - 1]
        return self.prompt_stream[g]

    @functools.cached_property
    def prompt_stream(self) -> PromptStream:
        return PromptStream(self.train_prompts, self.cfg.data.shuffle_seed)


def gpu_of(ctx: RunContext, role: str, index: int) -> int:
    """Targets first, each owning tp_size GPUs (a tensor-parallel backend's engine, SGLang's,
    spans them), then one GPU per trainer; wraps around when there are fewer GPUs than workers
    (sharing a GPU)."""
    tp = ctx.cfg.target.tp_size if backend_class(ctx.cfg.target.backend).tensor_parallel else 1
    slot = index * tp if role == "target" else ctx.topology.num_targets * tp + index
    return slot % torch.cuda.device_count()


def _device(ctx: RunContext, role: str, index: int) -> torch.device:
    if ctx.device == "cpu":
        return torch.device("cpu")
    return torch.device("cuda", gpu_of(ctx, role, index))


def _setup_process(ctx: RunContext) -> None:
    """What every worker process does first: its CPU threads, and the plugins (a spawned process
    starts with none of the parent's registrations)."""
    torch.set_num_threads(ctx.cfg.train.threads_per_proc)
    import_plugins(ctx.cfg.plugins)


def _link(ctx: RunContext, link_rank: int, device: torch.device) -> Link:
    """The data plane of this worker: a sample group (NCCL between distinct GPUs, else gloo) and
    a gloo credit group, both over one TCPStore (see `transport.Link` for why two)."""
    t = ctx.topology
    size = t.num_targets + t.num_trainers
    store = dist.TCPStore(
        "127.0.0.1", ctx.store_port, size, is_master=link_rank == 0, timeout=TIMEOUT
    )
    return open_link(
        store, link_rank, size, TIMEOUT, nccl_device=device if ctx.link_backend == "nccl" else None
    )


def choose_backend(cfg: RunConfig, model_dir, device: str) -> None:
    """Resolve `target.backend=auto` in `cfg` for this target and device, saying what it chose
    (a run's preparation and splitserve.regenerate call it before anything reads the backend)."""
    name, why = resolve_backend(cfg.target.backend, Path(model_dir), str(device))
    if name == cfg.target.backend:
        return
    note = f"target.backend={cfg.target.backend}: {name} ({why})"
    if name == "static" and cfg.target.regenerate and cfg.target.generate_batch < 64:
        note += (
            f"; {cfg.target.generate_batch} sequences in flight (target.generate_batch): the "
            "static runtime fills a GPU at about 256"
        )
    print(note, file=sys.stderr)
    cfg.target = dataclasses.replace(cfg.target, backend=name)


def make_target(
    cfg: RunConfig, model_dir, device: torch.device, draft_layer_ids: list[int]
) -> TargetBackend:
    """The configured target backend (`target.backend`, from the registry) of a run's target
    worker (also splitserve.regenerate's)."""
    return make_backend(
        TargetSetup(
            model_dir=Path(model_dir),
            cfg=cfg.target,
            layer_ids=list(draft_layer_ids),
            device=device,
            seed=cfg.train.seed,
            max_length=cfg.data.max_length,
            max_prompt_tokens=cfg.data.max_prompt_tokens,
        )
    )


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


class BatchedProducer:
    """produce(g) for a worker whose backend makes samples many at a time.

    Windowed (`size` > 0): the windows are fixed slices of the worker's whole sample list (from
    step 0), so resuming at any step regenerates the same windows (whole, for the same seeds and
    schedule) and keeps only the samples still `needed`. `size` 0 (a batch-invariant backend):
    one stream over the needed samples alone, their conversations read lazily, so the backend
    never drains at a window's end. Samples arrive from `produce_stream(members, conversations)`
    as the backend finishes them; g is returned as soon as it has arrived, the others wait in
    `ready`: on the device up to `on_device` of them, past that in host memory (a long answer at
    the head of the line would otherwise hold every sample finished meanwhile on the GPU)."""

    def __init__(
        self,
        produce_stream,
        conversation,
        order: list[int],
        needed: set[int],
        size: int,
        on_device: int = 512,
    ) -> None:
        self.on_device = on_device
        self.produce_stream, self.conversation, self.needed = produce_stream, conversation, needed
        self.lazy = size == 0
        if self.lazy:
            order = [g for g in order if g in needed]
            size = max(1, len(order))
        self.order, self.size = order, size
        self.position = {g: i for i, g in enumerate(order)}
        self.ready: dict[int, object] = {}
        self.window = -1
        self.stream = iter(())
        self.members: list[int] = []

    def __call__(self, g: int):
        k = self.position[g] // self.size
        if g not in self.ready and k != self.window:
            # a later window: what is left of this one is not needed (samples are taken in order)
            self.window = k
            self.members = self.order[k * self.size : (k + 1) * self.size]
            conversations = (self.conversation(m) for m in self.members)
            self.stream = self.produce_stream(
                self.members, conversations if self.lazy else list(conversations)
            )
        while g not in self.ready:
            i, sample = next(self.stream)
            got = self.members[i]
            if got in self.needed:
                if got != g and len(self.ready) >= self.on_device:
                    sample = sample.to_device("cpu")
                self.ready[got] = sample
        return self.ready.pop(g)


def sample_producer(target: TargetBackend, ctx: RunContext, everything: list[int], ids: list[int]):
    """produce(g) over `ids` (called in that order), by the backend's own batching: one sample at
    a time (`window` 1), fixed windows of `everything` (the worker's samples from step 0), or one
    stream over `ids` (0, batch-invariant backends). A target worker and the colocated process
    both produce this way."""
    window = target.window
    if window == 0 and not target.batch_invariant:
        raise ValueError(f"target.backend={ctx.cfg.target.backend} has no single-stream mode")
    if window == 1:
        return lambda g: target.produce(g, ctx.conversation(g))
    return BatchedProducer(target.produce_stream, ctx.conversation, everything, set(ids), window)


@stops_quietly
def target_main(index: int, ctx: RunContext) -> None:
    """Target worker `index`: produce its samples in order and send them against credits."""
    _setup_process(ctx)
    device = _device(ctx, "target", index)
    link = _link(ctx, index, device)
    target = make_target(ctx.cfg, ctx.model_dir, device, ctx.target_layer_ids)
    t = ctx.topology
    ids = list(t.target_samples(index, ctx.start_step, ctx.cfg.train.steps))
    everything = list(t.target_samples(index, 0, ctx.cfg.train.steps))
    produce = sample_producer(target, ctx, everything, ids)
    start = time.perf_counter()
    watch = WaitWatch(f"target {index}", ctx.cfg.log.wait_notice_s)
    try:
        stats = serve_samples(
            link, ids, lambda g: t.num_targets + t.route(g)[1], produce, watch=watch
        )
    finally:
        watch.close()
    stats["wall_s"] = time.perf_counter() - start
    _write_json(Path(ctx.run_dir) / "stats" / f"target{index}.json", stats)


class _MPU:
    """The trainer world as DeepSpeed's data-parallel group (no model parallelism)."""

    def __init__(self) -> None:
        self._solo = None

    def get_model_parallel_rank(self):
        return 0

    def get_model_parallel_world_size(self):
        return 1

    def get_model_parallel_group(self):
        return self._solo

    def get_data_parallel_group(self):
        return dist.group.WORLD

    def get_data_parallel_rank(self):
        return dist.get_rank()

    def get_data_parallel_world_size(self):
        return dist.get_world_size()


def _init_trainer_world(ctx: RunContext, rank: int, device: torch.device) -> _MPU:
    t = ctx.topology
    # DeepSpeed places the engine on cuda:LOCAL_RANK, so LOCAL_RANK is this trainer's GPU (after
    # the targets')
    local = device.index if device.type == "cuda" else rank
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(ctx.trainer_port),
        RANK=str(rank),
        WORLD_SIZE=str(t.num_trainers),
        LOCAL_RANK=str(local),
    )
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # Under torchrun the agent's store would be used for env:// rendezvous; the trainer world is
    # our own (MASTER_PORT+2, hosted by trainer 0), so opt out of it.
    os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    backend = "nccl" if ctx.device == "cuda" else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=t.num_trainers, timeout=TIMEOUT)
    mpu = _MPU()
    solos = [dist.new_group([r]) for r in range(t.num_trainers)]
    mpu._solo = solos[rank]
    return mpu


def _strict_json(value):
    """nan/inf -> null, so metrics.jsonl is strict JSON for any reader."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _strict_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strict_json(v) for v in value]
    return value


class StepLog:
    """metrics.jsonl (append-only, one line per step, and a start marker each time the run starts:
    a resumed run logs the steps after its checkpoint again, and the marker says where the second
    copy begins), wandb, and the tqdm bar of trainer 0."""

    def __init__(self, ctx: RunContext, total: int, start: int) -> None:
        self.path = Path(ctx.run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "a", encoding="utf-8")
        self.wandb = None
        if ctx.cfg.log.wandb_mode != "disabled":
            import wandb

            # offline: silent (its files are written all the same; the closing table names
            # them); online: quiet, which still prints the run's address
            offline = ctx.cfg.log.wandb_mode == "offline"
            self.wandb = wandb.init(
                project=ctx.cfg.log.wandb_project,
                mode=ctx.cfg.log.wandb_mode,
                dir=ctx.run_dir,
                config={"yaml": ctx.config_yaml},
                resume="allow",
                id=Path(ctx.run_dir).name.replace("/", "_")[:64],
                settings=wandb.Settings(silent=True) if offline else wandb.Settings(quiet=True),
            )
        self.write(
            {
                "event": "start",
                "resumed_from": start if ctx.resume_from else None,
                "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            }
        )
        self.bar = None
        if ctx.cfg.log.progress:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total, initial=start, desc="train", unit="step", dynamic_ncols=True
            )

    def write(self, record: dict) -> None:
        self.file.write(json.dumps(_strict_json(record)) + "\n")
        self.file.flush()
        if self.wandb is not None and "step" in record and "event" not in record:
            self.wandb.log(
                {k: v for k, v in record.items() if isinstance(v, (int, float))},
                step=record["step"],
            )

    def progress(self, record: dict) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(
                loss=f"{record['loss']:.3f}",
                tok_s=f"{record['tokens_per_s']:.0f}",
                wait=f"{record['data_wait_frac']:.0%}",
                tgt=f"{record['target_util']:.0%}",
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.wandb is not None:
            self.wandb.finish()
        self.file.close()


def _save_checkpoint(trainer: DraftTrainer, ctx: RunContext, step: int, rank: int) -> None:
    run_dir = Path(ctx.run_dir)
    staging = ckpt.staging_dir(run_dir, step)
    if rank == 0:
        staging.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    trainer.engine.save_checkpoint(
        str(staging),
        tag=ckpt.ENGINE_TAG,
        client_state={"step": step, "rng": trainer.rng_state()},
        save_latest=False,
    )
    dist.barrier()
    if rank == 0:
        ckpt.write_draft_files(
            staging,
            state_dict=trainer.draft.state_dict(),
            draft_cfg=trainer.draft_cfg,
            target=trainer.target_spec,
            model_dir=ctx.model_dir,
            config_yaml=ctx.config_yaml,
            step=step,
            max_shard_mb=ctx.cfg.train.weight_shard_mb,
        )
        ckpt.seal(staging, ckpt.final_dir(run_dir, step))
        ckpt.prune(run_dir, ctx.cfg.train.keep_checkpoints, ctx.cfg.train.keep_train_state)
    dist.barrier()


def _load_checkpoint(trainer: DraftTrainer, ctx: RunContext) -> None:
    path, client = trainer.engine.load_checkpoint(ctx.resume_from, tag=ckpt.ENGINE_TAG)
    if path is None or client is None or client.get("step") != ctx.start_step:
        raise RuntimeError(f"could not restore {ctx.resume_from} (expected step {ctx.start_step})")
    trainer.set_rng_state(client["rng"])
    trainer.step = ctx.start_step


_HOST_GROUP: list = []  # the trainer world's gloo group, when the world itself is NCCL


def _host_group():
    """A gloo group over the trainer world for host-side values (NCCL reduces only device
    tensors; one on the device would also queue behind the step queued ahead). Created on first
    use: every rank reaches it at the same call."""
    if dist.get_backend() == "gloo":
        return None
    if not _HOST_GROUP:
        _HOST_GROUP.append(dist.new_group(backend="gloo", timeout=TIMEOUT))
    return _HOST_GROUP[0]


def _allreduce_mean(values: list[float]) -> list[float]:
    """Mean over trainer ranks of each value, ignoring ranks where it is nan (nan if all are).
    Every rank must call this the same number of times."""
    t = torch.tensor(values, dtype=torch.float64)
    valid = ~t.isnan()
    both = torch.stack((torch.where(valid, t, torch.zeros_like(t)), valid.double()))
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(both, group=_host_group())
    return (both[0] / both[1]).tolist()  # 0/0 -> nan


def _wants_eval(cfg, done: int) -> bool:
    """Whether the training loop evaluates after `done` steps (every eval_every, and the last)."""
    return bool(cfg.eval_every and done % cfg.eval_every == 0) or done == cfg.steps


def _wants_checkpoint(cfg, done: int) -> bool:
    """Whether the training loop saves a checkpoint after `done` steps."""
    return bool(cfg.checkpoint_every) and (done % cfg.checkpoint_every == 0 or done == cfg.steps)


def train_loop(
    trainer: DraftTrainer, ctx: RunContext, rank: int, next_sample, target_util=lambda: float("nan")
):
    """Steps start_step..steps-1; `next_sample()` -> (sample_id, SequenceSample) in consumption
    order."""
    cfg = ctx.cfg.train
    t = ctx.topology
    eval_set = [next_sample() for _ in t.eval_ids(rank)]
    log = StepLog(ctx, cfg.steps, ctx.start_step) if rank == 0 else None
    probe = None
    if rank == 0 and cfg.decode_eval_prompts:
        from hydra.utils import get_class

        # named in the config, not imported: the default lives in serving, above this layer
        probe = get_class(cfg.decode_eval_probe)(
            ctx.model_dir,
            ctx.eval_prompts[: cfg.decode_eval_prompts],
            cfg.decode_eval_tokens,
            trainer.device,
        )
    b = cfg.micro_batch * cfg.grad_accum
    watch = WaitWatch(f"trainer {rank}", ctx.cfg.log.wait_notice_s)
    prof = _profiler(ctx, trainer) if rank == 0 and ctx.cfg.log.profile_steps else None
    totals = {
        "wait_s": 0.0,
        "compute_s": 0.0,
        "samples": 0,
        "tokens": 0,
        "sample_ids": [g for g, _ in eval_set],
    }
    # One step late: step N+1 is queued on the device before step N's metrics are read (they
    # were staged as N was queued, so the read waits for N's work only), so the device stays
    # busy while the host reads them, logs, receives the next samples and packs. A step followed
    # by an evaluation or a checkpoint (which must see its weights) and the last one are read at
    # once instead. A step's step_s is its loop iteration (receive, queue, read the previous
    # step), a boundary's up to its own read: evaluations and checkpoints left out.
    pending = None  # (step, QueuedStep, sample ids, start, data wait, compile seconds)

    def evaluates(done: int) -> bool:
        return bool(t.num_eval) and _wants_eval(cfg, done)

    def finish(step, queued, ids, start, wait_s, compiled, end=None, ahead=False) -> None:
        metrics = queued.metrics()  # waits for this step's work
        step_s = (time.perf_counter() if end is None else end) - start
        totals["wait_s"] += wait_s
        totals["compute_s"] += max(step_s - wait_s, 0.0)
        totals["samples"] += b
        totals["sample_ids"] += ids
        totals["tokens"] += metrics["tokens"]
        loss, ce, distill, conf, tau = _allreduce_mean(
            [
                metrics["loss"],
                metrics["ce"],
                metrics["distill"],
                metrics["conf"],
                metrics["sim_tau"],
            ]
        )
        done = step + 1
        record = {
            "step": done,
            "loss": loss,
            "ce": ce,
            "distill": distill,
            "conf": conf,
            "sim_tau": tau,
            "lr": metrics["lr"],
            "samples": b * t.num_trainers,
            "tokens_rank0": metrics["tokens"],
            "empty_micro_batches_rank0": metrics["empty_micro_batches"],
            "c_star_rank0": metrics["c_star"],
            "top1_rank0": metrics["top1"],
            "step_s": step_s,
            # torch.compile time while the step was queued (part of step_s; 0 once shapes settle)
            "compile_s": compiled,
            # the next step was queued before this one was read (the device kept busy)
            "queued_ahead": ahead,
            "data_wait_frac": wait_s / max(step_s, 1e-9),
            "tokens_per_s": metrics["tokens"] * t.num_trainers / max(step_s, 1e-9),
            "target_util": target_util(),
            **_memory_record(trainer.device),
        }
        if evaluates(done):
            watch.phase("evaluation", f"after step {done}")
            ev = trainer.evaluate([s for _, s in eval_set], [g for g, _ in eval_set])
            vals = _allreduce_mean(
                [ev["eval_loss"], ev["eval_sim_tau"]] if ev else [float("nan")] * 2
            )
            record.update(eval_loss=vals[0], eval_sim_tau=vals[1])
            if probe is not None:
                record.update(probe(trainer.draft))
        if log is not None:
            log.write(record)
            log.progress(record)
        if _wants_checkpoint(cfg, done):
            watch.phase("checkpoint", f"step {done}")
            _save_checkpoint(trainer, ctx, done, rank)

    def wants_boundary(done: int) -> bool:
        return done == cfg.steps or evaluates(done) or _wants_checkpoint(cfg, done)

    try:
        for step in range(ctx.start_step, cfg.steps):
            t0 = time.perf_counter()
            watch.phase("data", f"{b} samples for step {step + 1}")
            got = [next_sample() for _ in range(b)]
            wait_s = time.perf_counter() - t0
            watch.phase("step", f"step {step + 1}")
            ids = [g for g, _ in got]
            compiled = compile_seconds()
            if prof is not None:
                prof.begin(step)
            queued = trainer.queue_step([s for _, s in got], ids)
            compiled = compile_seconds() - compiled
            if pending is not None:  # the previous step, read while this one runs
                finish(*pending, end=t0, ahead=True)
            pending = (step, queued, ids, t0, wait_s, compiled)
            if prof is not None:  # (its last step's end waits for the device)
                prof.end(step)
            if wants_boundary(step + 1):
                finish(*pending)
                pending = None
    finally:
        watch.close()
        if log is not None:
            log.close()
        if prof is not None:
            try:  # after a failed step the profile may not close: keep the step's own error
                prof.close()
            except Exception as exc:  # noqa: BLE001
                print(f"warning: the profile could not be written: {exc}", file=sys.stderr)
    totals["wall_s"] = totals["wait_s"] + totals["compute_s"]
    _write_json(Path(ctx.run_dir) / "stats" / f"trainer{rank}.json", totals)


def _profiler(ctx: RunContext, trainer: DraftTrainer) -> StepProfiler | None:
    """log.profile_steps from log.profile_start, or from the first step a resumed run takes;
    None, with a warning, when the window starts past the run's last step."""
    lc, steps = ctx.cfg.log, ctx.cfg.train.steps
    start = max(lc.profile_start, ctx.start_step)
    if start >= steps:
        print(
            f"warning: log.profile_start={lc.profile_start} is past this run's steps "
            f"({ctx.start_step}..{steps - 1}): no profile",
            file=sys.stderr,
        )
        return None
    return StepProfiler(
        start, lc.profile_steps, Path(ctx.run_dir) / "profile", "trainer0", trainer.device
    )


def _build_trainer(ctx: RunContext, rank: int, device: torch.device) -> DraftTrainer:
    """Join the trainer world, build the DeepSpeed trainer, restore the checkpoint if resuming."""
    mpu = _init_trainer_world(ctx, rank, device)
    head = load_frozen_head(Path(ctx.model_dir), device, torch.float32)
    spec = load_target_spec(Path(ctx.model_dir))
    init = ckpt.read_init_draft(Path(ctx.init_from))[1] if ctx.init_from else None
    trainer = DraftTrainer(
        ctx.cfg.draft,
        spec,
        head,
        ctx.cfg.train,
        device=device,
        dp_world=ctx.topology.num_trainers,
        mpu=mpu,
        init_weights=init,
        vocab=ctx.draft_vocab,
    )
    if ctx.resume_from:
        _load_checkpoint(trainer, ctx)
    return trainer


def _memory_record(device: torch.device) -> dict:
    """The trainer's CUDA allocator state (host-side counters, no sync). Memory that grows step
    after step, or cudaMalloc retries (each frees the cache and synchronises the device), is one
    way steps slow down over a run; logged so that a slowdown can be told apart from one of host
    work. Empty off CUDA."""
    if device.type != "cuda":
        return {}
    stats = torch.cuda.memory_stats(device)
    return {
        "gpu_allocated_gb_rank0": round(stats.get("allocated_bytes.all.current", 0) / 1e9, 3),
        "gpu_reserved_gb_rank0": round(stats.get("reserved_bytes.all.current", 0) / 1e9, 3),
        "alloc_retries_rank0": stats.get("num_alloc_retries", 0),  # since the start (cumulative)
    }


@stops_quietly
def trainer_main(rank: int, ctx: RunContext) -> None:
    """Trainer worker `rank`: receive samples from its targets, train with DeepSpeed."""
    _setup_process(ctx)
    t = ctx.topology
    device = _device(ctx, "trainer", rank)
    link = _link(ctx, t.num_targets + rank, device)
    trainer = _build_trainer(ctx, rank, device)
    plan = [
        (g, t.route(g)[0]) for g in t.trainer_samples(rank, ctx.start_step, ctx.cfg.train.steps)
    ]
    # a GPU trainer fed over gloo: hidden states land in pinned memory, so their copy to the GPU
    # is queued without waiting for the step before it
    pin = device.type == "cuda" and link.device.type == "cpu"
    receiver = SampleReceiver(link, plan, in_flight(ctx.cfg), pin_memory=pin)

    def target_util():
        busy = [receiver.target_stats.get(src, (0.0, 0.0)) for src in t.sources(rank)]
        return sum(b / max(b + w, 1e-9) for b, w in busy) / len(busy)

    train_loop(trainer, ctx, rank, receiver.take, target_util)
    dist.barrier()
    dist.destroy_process_group()


@stops_quietly
def colocated_main(ctx: RunContext) -> None:
    """The single-process reference: the same target and trainer code, no transport. The target
    produces as a target worker does (`sample_producer`: the static backend's teacher forcing
    prefills 32 answers a forward, not one), between the trainer's steps."""
    _setup_process(ctx)
    t = ctx.topology
    if (t.num_targets, t.num_trainers) != (1, 1):
        raise ValueError("split.colocated runs exactly one target and one trainer")
    device = _device(ctx, "trainer", 0)
    trainer = _build_trainer(ctx, 0, device)
    target = make_target(ctx.cfg, ctx.model_dir, device, trainer.draft_cfg.target_layer_ids)
    order = list(t.trainer_samples(0, ctx.start_step, ctx.cfg.train.steps))
    everything = list(t.trainer_samples(0, 0, ctx.cfg.train.steps))
    produce = sample_producer(target, ctx, everything, order)
    ids = iter(order)

    def next_sample():
        g = next(ids)
        return g, produce(g)

    train_loop(trainer, ctx, 0, next_sample)
    dist.destroy_process_group()
