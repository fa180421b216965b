"""`python -m splitserve.study +experiment=NAME [key=value ...]`: one study, end to end, resumable.

A study compares training jobs at one budget on one file of target answers. Its stages:
regenerate the target's answers once (`splitserve.regenerate`, in parts), train every job on that
file (`splitserve.train`), evaluate every job on the benches (`serving.evaluate`), tabulate them
(`serving.ablation_report`) into `docs/results/<name>/results.json` under
`tables.<table>_<budget>`.

Why subprocesses: each stage is a command a user could type by hand (the plan prints them), a
crash in one stage cannot corrupt the next, and the trainer and serving stay siblings (neither
imports the other). Why no state file (beyond regen.json, the settings the data were made
with): a stage is done when the files it writes are complete
(a regenerated part is renamed only when complete, a run writes summary.json at its end, an
evaluation writes one report per bench), so a rerun skips what is done and continues the rest
(training resumes from its newest checkpoint). `dry_run=true` prints the plan and each stage's
state without running anything. Stages run one after another; each job trains with one trainer
(a step is micro_batch samples, so the budget holds) and the recipe's targets on the other GPUs.
"""

from __future__ import annotations

import fcntl
import json
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import hydra
from omegaconf import DictConfig

from draft_models.config_io import load_dataclass

from .regenerate import describe, file_sha256, provenance_path, recorded_ids

ROOT = Path(__file__).resolve().parents[1]


# What the study sets on every job, so that the budget and the data are the study's: one trainer
# (a step is micro_batch samples), its regenerated file, no online regeneration.
OWNED = (
    "train.steps=", "train.micro_batch=", "train.grad_accum=", "split.trainer_procs=",
    "data.sources=", "target.regenerate=", "train.run_dir=", "hydra.",
)  # fmt: skip


# A job's overrides that do not shape its draft: a study resumes past runs made with other ones.
INCIDENTAL = ("data.sources=", "train.checkpoint_every=")


@dataclass
class EvaluateSpec:
    """How `serving.evaluate` decodes every job (tau and acceptance are batch 1's at any batch)."""

    benches: list[str] = field(default_factory=lambda: ["gsm8k", "mtbench"])
    temperatures: list[float] = field(default_factory=lambda: [0.0])
    limit: int = 40  # items per bench
    max_new_tokens: int = 128
    batch: int = 32  # requests decoded at once per process
    procs: int = 1  # decoding processes (GPUs round-robin)
    extra: list[str] = field(default_factory=list)  # more serving.evaluate flags


@dataclass
class StudyConfig:
    """Mirrored by conf/study.yaml; an experiment (conf/experiment/NAME.yaml) fills it in."""

    name: str = ""  # the results folder: docs/results/<name>
    table: str = ""  # this study's key in results.json's tables
    recipe: str = "smol_gpu"
    work_dir: str = ""  # regenerated data, runs, evaluations (outside git)
    results_dir: str = ""
    samples: int = 110000  # training samples per job (train.steps = samples / micro_batch)
    micro_batch: int = 16
    # checkpoints along each job (the last at its end): a call cut short resumes from the newest,
    # so more lose less work, at one save each; they do not change the draft (evaluations stay 4)
    checkpoints: int = 4
    eval_prompts: int = 64  # prompts held out of training per source
    regen_margin: float = 1.12  # regenerate this much more: long prompts are left out (~8 %)
    regen_part: int = 10000  # samples per regenerated part (a rerun redoes at most one part)
    regen_extra: list[str] = field(default_factory=list)  # overrides for regeneration only
    common: list[str] = field(default_factory=list)  # overrides for every job and regeneration
    jobs: dict[str, list[str]] | None = None  # name -> overrides; the first is the baseline
    evaluate: EvaluateSpec = field(default_factory=EvaluateSpec)
    dry_run: bool = False
    python: str = ""  # interpreter for the stages ("": this one)

    def validate(self) -> None:
        for key in ("name", "table", "work_dir", "results_dir"):
            if not getattr(self, key):
                raise ValueError(f"study {key} is empty: choose an experiment (+experiment=NAME)")
        if not self.jobs:
            raise ValueError("study jobs is empty: an experiment names at least one job")
        for job, overrides in self.jobs.items():
            if not job.replace("_", "").replace("-", "").isalnum():
                raise ValueError(f"study job name {job!r}: letters, digits, - and _ only")
            for o in [*overrides, *self.common]:
                if o.lstrip("+~").startswith(OWNED):
                    raise ValueError(
                        f"study override {o!r}: the study sets it for every job (its budget is "
                        "samples / micro_batch steps of one trainer on its regenerated file); "
                        "set study samples / micro_batch instead"
                    )
        for key in ("samples", "micro_batch", "regen_part", "checkpoints"):
            if getattr(self, key) < 1:
                raise ValueError(f"study {key}={getattr(self, key)} must be >= 1")
        if self.samples < self.micro_batch:
            raise ValueError(f"study samples={self.samples} is less than one step's micro_batch")
        if self.eval_prompts < 1:
            raise ValueError("study eval_prompts must be >= 1 (the held-out prompts)")
        if self.regen_margin < 1:
            raise ValueError(f"study regen_margin={self.regen_margin} must be >= 1")
        spec = self.evaluate
        if not spec.benches or not spec.temperatures:
            raise ValueError("study evaluate.benches and evaluate.temperatures must be non-empty")
        if min(spec.limit, spec.max_new_tokens, spec.batch, spec.procs) < 1:
            raise ValueError("study evaluate limit, max_new_tokens, batch, procs must be >= 1")


@dataclass
class Stage:
    """One command of the plan; `done` is read from the files it writes."""

    name: str
    argv: list[str]
    done: bool

    def line(self) -> str:
        return shlex.join(self.argv)


class Study:
    """The plan of one study, derived from its config and the files under work_dir."""

    def __init__(self, cfg: StudyConfig):
        self.cfg = cfg
        self.work = Path(cfg.work_dir).resolve()
        self.results = Path(cfg.results_dir)
        self.python = cfg.python or sys.executable
        self.steps = cfg.samples // cfg.micro_batch
        self.regen_file = self.work / "regen.jsonl"

    # -- regeneration ------------------------------------------------------------------------

    def regen_samples(self) -> int:
        """Samples regenerated: the budget and the held-out prompts, with a margin for the
        prompts longer than data.max_prompt_tokens that regeneration leaves out."""
        return int((self.cfg.samples + self.cfg.eval_prompts) * self.cfg.regen_margin + 0.5)

    def regen_parts(self) -> list[tuple[int, int, Path]]:
        total, part = self.regen_samples(), self.cfg.regen_part
        return [
            (s, e, self.work / "regen" / f"part-{s:09d}-{e:09d}.jsonl")
            for s in range(0, total, part)
            for e in [min(s + part, total)]
        ]

    def regen_manifest(self) -> dict:
        """What the regenerated file was made with; a file made otherwise is not this study's."""
        return {
            "samples": self.regen_samples(),
            "recipe": self.cfg.recipe,
            "overrides": [*self.cfg.common, *self.cfg.regen_extra],
        }

    def check_regen(self) -> None:
        """Refuse a work dir whose regenerated data were made with other settings (reusing them
        would train on the wrong prompts or too few samples), or a part whose record says it
        holds other samples than its name (a part renamed or carried into the wrong place would
        repeat some samples and lose others when merged)."""
        path = self.work / "regen.json"
        if path.is_file():
            made = json.loads(path.read_text())
            if made != self.regen_manifest():
                raise ValueError(
                    f"{self.work} holds data regenerated with {made}, not "
                    f"{self.regen_manifest()}: give this study another work_dir (or remove "
                    "that one)"
                )
        for start, end, part in self.regen_parts():
            if not (part.is_file() and provenance_path(part).is_file()):
                continue  # none, or no record: the check stage refuses it by name
            try:
                ids = recorded_ids(part)
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # not a record: the check stage refuses it by name
            if ids is not None and (ids.start, ids.stop, ids.step) != (start, end, 1):
                raise ValueError(
                    f"{part} was regenerated for samples {describe(ids, 'its record')}, not "
                    f"{start}..{end - 1}: move it and its record away, or to their own name"
                )

    def regen_stages(self) -> list[Stage]:
        """One stage per part not yet written; before them, while the parts are not merged, one
        that checks the parts already there were made with this study's settings (a part may
        come from another machine or an older checkout: docs/device.md)."""
        done = self.regen_file.is_file()
        regen = [self.python, "-m", "splitserve.regenerate"]
        overrides = [f"+recipe={self.cfg.recipe}", *self.cfg.common, *self.cfg.regen_extra]
        made = [path for _, _, path in self.regen_parts() if path.is_file()]
        stages = []
        if made and not done:
            argv = [*regen, "--check", *map(str, made), "--", *overrides]
            stages.append(Stage(f"check the {len(made)} regenerated part(s) here", argv, False))
        for start, end, path in self.regen_parts():
            argv = [*regen, "--out", str(path), "--samples", str(end), "--start", str(start)]
            stages.append(
                Stage(f"regenerate {start}..{end - 1}", argv + overrides, done or path.is_file())
            )
        return stages

    def merge_regen(self) -> None:
        """The parts, in sample order, as one file (written aside, renamed when complete)."""
        tmp = self.regen_file.with_name(self.regen_file.name + ".partial")
        with tmp.open("w") as out:
            for _, _, path in self.regen_parts():
                out.write(path.read_text())
        (self.work / "regen.json").write_text(json.dumps(self.regen_manifest()) + "\n")
        tmp.rename(self.regen_file)

    # -- training ----------------------------------------------------------------------------

    def check_jobs(self) -> None:
        """Refuse a job whose run directory was made with other overrides: studies that share a
        work dir (and its baseline `dspark`) must mean one draft by one job name. The data
        source's override names the file by its absolute path, which moves with the checkout:
        it is left out (check_regen vouches for the file), and so is how often the run saves a
        checkpoint (study `checkpoints`), which may change between calls of one study."""
        import yaml

        def meant(overrides: list[str]) -> list[str]:
            return [o for o in overrides if not o.startswith(INCIDENTAL)]

        for job in self.cfg.jobs:
            saved = self.run_dir(job) / ".hydra" / "overrides.yaml"
            if not saved.is_file():
                continue
            made = meant(yaml.safe_load(saved.read_text()))
            wanted = meant(self.train_overrides(job))
            if made != wanted:
                differ = sorted(set(made) ^ set(wanted))
                raise ValueError(
                    f"job {job!r}: {self.run_dir(job)} was trained with other overrides "
                    f"(differing: {differ}): another study in this work_dir names another draft "
                    "so, or the study's settings changed; rename the job or remove that run"
                )

    def run_dir(self, job: str) -> Path:
        return self.work / "runs" / job

    def train_overrides(self, job: str) -> list[str]:
        """The run's overrides: the study's data and budget, then the experiment's common ones,
        then the job's own (last wins)."""
        steps, every = self.steps, -(-self.steps // 4)  # four evaluations: the budget curve
        saves = -(-steps // self.cfg.checkpoints)
        return [
            f"+recipe={self.cfg.recipe}",
            "target.regenerate=false",
            f"data.sources=[{{kind:jsonl_chat,path:{self.regen_file},limit:null,weight:1}}]",
            f"data.eval_prompts={self.cfg.eval_prompts}",
            f"train.micro_batch={self.cfg.micro_batch}",
            "train.grad_accum=1",
            "split.trainer_procs=1",  # a step is micro_batch samples: the budget holds
            f"train.steps={steps}",
            f"train.warmup_steps={max(1, steps * 4 // 100)}",
            f"train.checkpoint_every={saves}",
            f"train.eval_every={every}",
            "train.keep_checkpoints=4",
            *self.cfg.common,
            *self.cfg.jobs[job],
        ]

    def trained(self, job: str) -> bool:
        summary = self.run_dir(job) / "summary.json"
        if not summary.is_file():
            return False
        try:
            return json.loads(summary.read_text()).get("steps") == self.steps
        except json.JSONDecodeError:
            return False

    def train_stage(self, job: str) -> Stage:
        argv = [self.python, "-m", "splitserve.train", *self.train_overrides(job)]
        argv.append(f"hydra.run.dir={self.run_dir(job)}")
        return Stage(f"train {job}", argv, self.trained(job))

    # -- evaluation --------------------------------------------------------------------------

    def final_checkpoint(self) -> str:
        return f"step-{self.steps:08d}"

    def eval_dir(self, job: str, temperature: float) -> Path:
        return self.run_dir(job) / "eval" / f"{self.final_checkpoint()}-t{temperature:g}"

    def evaluated(self, job: str, temperature: float) -> bool:
        """Every bench's report is there, written by this very command (a report made with
        another limit or token budget is not this study's: the stage runs again)."""
        out, wanted = self.eval_dir(job, temperature), self.eval_argv(job, temperature)
        for bench in self.cfg.evaluate.benches:
            path = out / f"{bench}.json"
            try:
                command = json.loads(path.read_text()).get("command", "")
            except (OSError, ValueError):
                return False
            if shlex.split(command)[1:] != wanted[1:]:
                return False
        return True

    def eval_stage(self, job: str, temperature: float) -> Stage:
        argv = self.eval_argv(job, temperature)
        return Stage(f"evaluate {job} T={temperature:g}", argv, self.evaluated(job, temperature))

    def eval_argv(self, job: str, temperature: float) -> list[str]:
        spec = self.cfg.evaluate
        checkpoint = self.run_dir(job) / "checkpoints" / self.final_checkpoint()
        argv = [self.python, "-m", "serving.evaluate", "--checkpoint", str(checkpoint)]
        argv += ["--bench", ",".join(spec.benches), "--limit", str(spec.limit)]
        argv += ["--temperature", f"{temperature:g}", "--max-new-tokens", str(spec.max_new_tokens)]
        argv += ["--batch", str(spec.batch), "--procs", str(spec.procs), "--no-baseline"]
        return argv + [*spec.extra, "--out", str(self.eval_dir(job, temperature))]

    # -- report ------------------------------------------------------------------------------

    def report_base(self, temperature: float) -> Path:
        return self.work / "report" / f"{self.cfg.table}-t{temperature:g}"

    def report_stage(self, temperature: float) -> Stage:
        base = self.report_base(temperature)
        argv = [self.python, "-m", "serving.ablation_report"]
        argv += [str(self.run_dir(j)) for j in self.cfg.jobs]
        argv += ["--out", str(base), "--temperature", f"{temperature:g}"]
        argv += ["--json", f"{base}.json", "--ignore-override", "data.sources="]
        return Stage(f"report T={temperature:g}", argv, False)

    def plan(self) -> list[Stage]:
        temps = self.cfg.evaluate.temperatures
        stages = self.regen_stages()
        stages += [self.train_stage(j) for j in self.cfg.jobs]
        stages += [self.eval_stage(j, t) for t in temps for j in self.cfg.jobs]
        return stages + [self.report_stage(t) for t in temps]

    # -- results -----------------------------------------------------------------------------

    def table_key(self) -> str:
        """The table's key in results.json: its axis and budget (`rope_110k`), so that studies
        of one axis at other budgets sit beside it."""
        n = self.steps * self.cfg.micro_batch
        return f"{self.cfg.table}_{n // 1000}k" if n % 1000 == 0 else f"{self.cfg.table}_{n}"

    def write_results(self, command: str) -> Path:
        """The study's table in results.json (other keys kept), each temperature's report and
        plot beside it. Written aside and renamed: a failure leaves the old file whole."""
        path = self.results / "results.json"
        results = json.loads(path.read_text()) if path.is_file() else {}
        self.results.mkdir(parents=True, exist_ok=True)
        by_temperature = {}
        for t in self.cfg.evaluate.temperatures:
            base = self.report_base(t)
            by_temperature[f"{t:g}"] = json.loads(Path(f"{base}.json").read_text())
            plot = Path(f"{base}.png")
            if plot.is_file():
                (self.results / f"{self.table_key()}-t{t:g}.png").write_bytes(plot.read_bytes())
        results.setdefault("tables", {})[self.table_key()] = {
            "command": command,
            "commit": git_commit(),
            "device": device_name(),
            "recipe": self.cfg.recipe,
            "budget_samples": self.steps * self.cfg.micro_batch,
            "data_sha256": file_sha256(self.regen_file),
            "jobs": self.cfg.jobs,
            "evaluate": {
                "benches": self.cfg.evaluate.benches,
                "limit": self.cfg.evaluate.limit,
                "max_new_tokens": self.cfg.evaluate.max_new_tokens,
            },
            "by_temperature": by_temperature,
        }
        calibrated = {  # train.calibrate_at_end's ECE/AUC per position, where a job fitted STS
            job: json.loads(report.read_text())
            for job in self.cfg.jobs
            if (report := self.run_dir(job) / "checkpoints" / self.final_checkpoint()
                / "sts_report.json").is_file()
        }  # fmt: skip
        if calibrated:
            results["tables"][self.table_key()]["calibration"] = calibrated
        tmp = path.with_name(path.name + ".partial")
        tmp.write_text(json.dumps(results, indent=1) + "\n")
        tmp.rename(path)
        return path


def git_commit() -> str | None:
    """The code's commit (with -dirty when the tree has changes); None outside a checkout."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=40"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def device_name() -> str:
    """The GPU of the machine writing the table (CUDA's first device), or "cpu": tables from
    several machines are joined (docs/device.md), so each says where it was written. A study
    resumed on another machine is named by the last one."""
    import torch  # here, not at the top: planning and --dry-run need no torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def print_plan(stages: list[Stage]) -> None:
    for i, s in enumerate(stages, 1):
        print(f"[{i}/{len(stages)}] {'done' if s.done else 'todo'}  {s.name}\n    {s.line()}")


def run_stage(argv: list[str]) -> int:
    """One stage's process, its exit code. Ctrl-C reaches it too (same process group): wait for
    it to stop by itself (a training run stops its workers and keeps its checkpoints), never
    kill it at once as subprocess.run would."""
    proc = subprocess.Popen(argv)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        try:
            proc.wait(timeout=120)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            proc.terminate()
            proc.wait()
        raise


def execute(study: Study, command: str) -> int:
    """Run every stage not yet done, in order, holding the work dir's lock (the ablation axes
    share one: two studies at once would write the same runs); the first failure or Ctrl-C stops
    the study and says how to continue (the same command)."""
    study.check_regen()
    study.check_jobs()
    study.work.mkdir(parents=True, exist_ok=True)
    with (study.work / ".lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"another study is running in {study.work}; wait for it") from None
        try:
            return _execute(study, command)
        except KeyboardInterrupt:
            print(f"interrupted; rerun `{command}` to continue", file=sys.stderr)
            return 130


def _execute(study: Study, command: str) -> int:
    stages = study.plan()
    todo = [s for s in stages if not s.done]
    print(f"study {study.cfg.name}/{study.cfg.table}: {len(stages) - len(todo)} of "
          f"{len(stages)} stages done; work in {study.work}", flush=True)  # fmt: skip
    for i, stage in enumerate(stages, 1):
        if stage.name.startswith("train") and not study.regen_file.is_file():
            study.merge_regen()  # every part is done by now
        if stage.done:
            continue
        print(f"\n[{i}/{len(stages)}] {stage.name}\n    {stage.line()}", flush=True)
        t0 = time.perf_counter()
        rc = run_stage(stage.argv)
        if rc in (130, -signal.SIGINT):  # the stage was interrupted (Ctrl-C or SIGINT)
            print(
                f"interrupted: {stage.name} stopped (exit {rc}); rerun `{command}` to "
                "continue from this stage",
                file=sys.stderr,
            )
            return 130
        if rc != 0:
            print(
                f"error: {stage.name} failed (exit {rc}); fix the cause and rerun "
                f"`{command}`: it continues from this stage",
                file=sys.stderr,
            )
            return rc if rc > 0 else 1
        print(f"[{i}/{len(stages)}] {stage.name}: done in {time.perf_counter() - t0:.0f} s")
    path = study.write_results(command)
    print(f"\nwrote {path} (tables.{study.table_key()}) and the report plots beside it")
    return 0


def command_line() -> str:
    return shlex.join(["python", "-m", "splitserve.study", *sys.argv[1:]])


@hydra.main(config_path="../conf", config_name="study", version_base="1.3")
def main(node: DictConfig) -> None:
    try:
        cfg = load_dataclass(StudyConfig, node, "study")
        cfg.validate()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    study = Study(cfg)
    try:
        if cfg.dry_run:
            study.check_regen()
            study.check_jobs()
            print_plan(study.plan())
            return
        rc = execute(study, command_line())
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(rc)


def cli() -> None:
    """`python -m splitserve.study`: Hydra's composition errors (an unknown +experiment, a
    malformed override) as one line with exit 2, as the study's own checks; then Hydra."""
    from draft_models.config_io import hydra_problem

    problem = hydra_problem(ROOT / "conf", "study", sys.argv[1:])
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    main()


if __name__ == "__main__":
    cli()
