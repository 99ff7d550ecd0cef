"""What a study asks Snakemake for (workflow/rules/*.smk): its layout's files, the lookups its
rules make per job, wildcard constraints from the schema; parsing the workflow imports no torch."""

import functools
import json
import os
import re
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from accelstudy import points
from accelstudy.config import config_hash
from accelstudy.errors import StudyError
from accelstudy.files import read_json
from accelstudy.forecast import StudyEstimates
from accelstudy.kinds import KINDS
from accelstudy.layout import (
    COVERS,
    MEASURING,
    StudyLayout,
    beside,
    misplaced,
    record_files,
    system_folders,
)
from accelstudy.options import node
from accelstudy.recipes import RECIPES
from accelstudy.systems import System
from accelstudy.tasks import SPLITS, TASKS, relevant_settings


class StudyTargets(StudyLayout):
    """One validated study config on one system: its layout, and the lookups its rules make.
    Methods taking `w` are Snakemake input or params functions (w: the job's wildcards)."""

    def __init__(self, config: Mapping[str, Any], system: System) -> None:
        super().__init__(config, system.name)
        self.system = system
        self.models = sorted(config["models"])
        self.tasks = sorted(config["tasks"])
        self.ptq = config["ptq"]
        self.ptq_tasks = self.ptq.get("tasks", []) if self.ptq["enabled"] else []

    def constraints(self) -> dict[str, str]:
        """Wildcard constraints: the schema's allowed values, the config's names."""
        allowed = {"model": self.models, "task": self.tasks, "split": SPLITS}
        allowed["granularity"] = node("ptq.granularity")["enum"]
        listed = {"recipe": "ptq.recipes", "protocol": "tasks.*.protocols"}
        listed |= {"strategy": "finetune.strategies", "attention": "finetune.attention"}
        allowed |= {wildcard: node(path)["items"]["enum"] for wildcard, path in listed.items()}
        numbers = {"chunk": r"\d+", "repeat": r"\d+", "cards": r"[1-9]\d*", "devices": r"[1-9]\d*"}
        names = {k: "|".join(map(re.escape, v)) for k, v in allowed.items()}  # a '.' is a dot
        return names | numbers | {"bits": r"\d+(-\d+)*"}

    # the report's inputs ---------------------------------------------------------------------
    def records(self) -> list[str]:
        return self.paths(*MEASURING)

    def diffusion_samples(self) -> list[str]:
        return [beside(path, "samples") for path in self.paths("diffusion")]

    def other_systems_records(self) -> list[str]:
        """Records another system's run of this study left, which the report lists too."""
        others = [d for d in system_folders(Path(self.results)) if d.name != self.system.name]
        return [str(p) for folder in others for p in record_files(folder)]

    def compare_inputs(self) -> list[str]:
        """Every JSON of the runs to compare (`compare` tells records), and this study's report
        where this study is one of the runs, so that it finishes first."""
        runs = [Path(run) for run in self.config["compare"]["runs"]]
        files = [str(p) for run in runs for p in run.rglob("*.json") if "logs" not in p.parts]
        this = Path(self.results).resolve() in [run.resolve() for run in runs]
        return sorted(files) + ([self.path("report")] if this else [])

    def model_pattern(self, gguf: bool) -> str:
        """The models whose source is (or is not) a GGUF to convert: those run as batch jobs."""
        names = [m for m in self.models if (self.config["models"][m]["source"] == "gguf") == gguf]
        return "|".join(map(re.escape, names)) or "(?!)"  # none: matches no name

    # per-job lookups ---------------------------------------------------------------------------
    def model_spec(self, w: Any) -> str:
        return json.dumps(self.config["models"][w.model], sort_keys=True)

    def model_seed(self, w: Any) -> int:
        """The seed matters only to randomly initialised models."""
        tiny = self.config["models"][w.model]["source"] == "tiny-random"
        return self.config["seed"] if tiny else 0

    def task(self, w: Any) -> dict[str, Any]:
        return self.config["tasks"][w.task]

    def task_value(self, key: str) -> Callable[[Any], Any]:
        return lambda w: self.task(w)[key]

    def data_spec(self, w: Any) -> str:
        """Only the keys that change what a split contains (not limits or protocols)."""
        task, keys = self.task(w), ("source", "dataset", "name", "revision", "files")
        return json.dumps({k: task[k] for k in keys if k in task}, sort_keys=True)

    def local_file(self, part: str) -> Callable[[Any], list[str]]:
        """The local file a prepare rule reads (its split's, for `tasks`): a change re-runs it."""

        def files(w: Any) -> list[str]:
            spec = self.task(w) if part == "tasks" else self.config[part]["data"]
            file = (spec.get("files") or {}).get(w.split) if part == "tasks" else spec.get("file")
            return [file] if spec.get("source") == "local" and file else []

        return files

    def eval_split_file(self, w: Any) -> str:
        return self.path("prepare_data", task=w.task, split=self.task(w)["eval_split"])

    def eval_split_files(self, w: Any) -> list[str]:
        """Every task's evaluation split: what a baseline job (every task) reads."""
        return [self.eval_split_file(SimpleNamespace(task=task)) for task in self.tasks]

    def calibration_file(self, w: Any) -> str:
        """Calibration data as the paper's: WikiText validation, HellaSwag/BoolQ train."""
        return self.path("prepare_data", task=w.task, split=TASKS[w.task].calibration_split)

    def eval_settings(self, w: Any) -> str:
        settings = relevant_settings(w.task, w.protocol, self.config["evaluation"])
        return json.dumps(settings, sort_keys=True)

    def paper_settings(self, w: Any) -> str:
        return json.dumps(relevant_settings(w.task, "paper", self.config["evaluation"]))

    def scan_settings(self, w: Any) -> str:
        """The sensitivity's: its scan always runs in FP32, shared by every system, so the
        evaluation's dtype is not among them (a system switch re-runs no scan)."""
        settings = relevant_settings(w.task, "paper", self.config["evaluation"])
        return json.dumps({k: v for k, v in settings.items() if k != "dtype"})

    def calibration_limit(self, w: Any) -> int | None:
        return self.ptq["calibration_limit"][w.task]

    def ptq_remainder(self, w: Any) -> str:
        """ptq.remainder for this task: one value for all tasks, or a per-task mapping."""
        remainder = self.ptq["remainder"]
        return remainder if isinstance(remainder, str) else remainder.get(w.task, "last")

    def sensitivity_chunks(self, w: Any) -> list[str]:
        run = {"model": w.model, "task": w.task, "granularity": w.granularity}
        return [self.path("sensitivity", **run, chunk=i) for i in range(self.ptq["chunks"])]

    def recipe_flags(self, w: Any) -> str:
        """The options only some recipes read (recipes.Recipe.options), for a job or a record
        of them (a record of a recipe reading none keeps its digest when they change)."""
        recipe = getattr(w, "recipe", None)
        keys = dict.fromkeys(k for r in ([recipe] if recipe else self.ptq["recipes"])
                             for k in RECIPES[r].options)  # fmt: skip
        return " ".join(f"--{k.replace('_', '-')} {shlex.quote(str(self.ptq[k]))}" for k in keys)

    def finetune_point_json(self, w: Any) -> str:
        """The point as the worker reads it: only the finetune keys a point depends on."""
        return points.finetune_point(self.config, w, self.path("prepare_instructions")).to_json()

    # a measuring rule's params, and the digest its job writes into its record ------------------
    def measuring_params(self, rule: str) -> dict[str, Any]:
        """The params `rule` passes its job (values, or functions of the job's wildcards), with
        `digest`: a hash of them and of what the job's inputs were made under, which the job
        writes into its record, so a record is checked against the study (`misfits`). A job
        that covers several records (layout.COVERS) gets what they share and `runs`: each
        record's own values, place and digest."""
        if rule in COVERS:
            shared = self._passed(rule) if rule == "quantize" else self._named()
            return shared | {"runs": lambda w: self.runs(rule, w)}
        return self._passed(rule) | {"digest": lambda w: self.params_digest(rule, w)}

    def runs(self, rule: str, w: Any) -> str:
        """The JSON of a covering job's runs (the CLI's --runs), one per record it writes."""
        runs = []
        for member in self.members(rule, w):
            m, path = SimpleNamespace(**member), self.path(rule, **member)
            run = {"out": path, "items": beside(path, "items")}
            if rule == "baseline":
                task = self.task(m)
                run |= {"task": m.task, "protocol": m.protocol, "data": self.eval_split_file(m)}
                run |= {"data_source": task["source"], "limit": task["limit"]}
                run["settings"] = json.loads(self.eval_settings(m))
            else:
                run["recipe"] = m.recipe
            runs.append(run | {"params_digest": self.params_digest(rule, m)})
        return json.dumps(runs)

    def _named(self) -> dict[str, Any]:
        return {"study": self.config["study"], "system": self.system.name}

    def _passed(self, rule: str) -> dict[str, Any]:
        named = self._named()
        task = {"limit": self.task_value("limit"), "source": self.task_value("source")}
        if rule == "baseline":
            return named | task | {"settings": self.eval_settings}
        if rule == "quantize":
            group, symmetric = self.ptq["group_size"], str(self.ptq["symmetric"]).lower()
            own = {"recipe_flags": self.recipe_flags, "group_size": group, "symmetric": symmetric}
            return named | task | {"settings": self.paper_settings} | own
        if rule == "finetune":
            source = self.config["finetune"]["data"]["source"]
            return named | {"point": self.finetune_point_json, "source": source}
        if rule == "diffusion":
            return named | {"point": lambda w: points.diffusion_point(self.config, w).to_json()}
        raise ValueError(f"'{rule}' is not a measuring rule: {MEASURING}")

    def _made_under(self, rule: str) -> dict[str, Any]:
        """What a measuring job's inputs were made under (their rules' params)."""
        if rule == "diffusion":
            return {"data": self.config["diffusion"]["data"], "seed": self.config["seed"]}
        model = {"model": self.model_spec, "model_seed": self.model_seed}
        if rule == "finetune":
            return model | {"data": self.config["finetune"]["data"]}
        if rule == "baseline":
            return model | {"data": self.data_spec}
        scan = {key: self.ptq[key] for key in ("family", "sparsity", "chunks", "clustering")}
        scan |= {"scan": self.scan_settings, "calibration": self.calibration_limit}
        return model | {"data": self.data_spec, "remainder": self.ptq_remainder} | scan

    # A stamp per measuring job, its input: dated now where the job's record is a misfit, so
    # Snakemake's mtime check re-runs it (where it holds no metadata for the record, as in a
    # copied results folder, its params check cannot), and dated 1970 otherwise. Under the
    # working directory's .snakemake/, remade from the records at every parse.
    def settings_stamp(self, rule: str) -> Callable[[Any], list[str]]:
        """The job's stamps: its record's, or each record's of a covering job."""
        if rule in COVERS:
            return lambda w: [_stamp(self.path(rule, **m)) for m in self.members(rule, w)]
        return lambda w: [_stamp(self.path(rule, **dict(w.items())))]

    def stamp_misfits(self) -> dict[str, str]:
        """Date each measuring job's stamp (see settings_stamp); return the misfits."""
        misfits = self.misfits()
        for job in (j for j in self.jobs() if j.rule in MEASURING):
            stamp = Path(_stamp(job.path))
            if job.path in misfits or not stamp.exists():
                stamp.parent.mkdir(parents=True, exist_ok=True)
                stamp.touch()
            if job.path not in misfits and stamp.stat().st_mtime != 0:
                os.utime(stamp, (0, 0))
        return misfits

    def params_digest(self, rule: str, w: Any) -> str:
        values = self._passed(rule) | self._made_under(rule)
        return config_hash({k: v(w) if callable(v) else v for k, v in values.items()})

    def misfits(self) -> dict[str, str]:
        """This system's records (path -> why) that are not what their place says
        (layout.misplaced) or were made under other settings than the study's now: a results
        folder copied and a setting changed leaves Snakemake no metadata for the copy's paths,
        so it would keep them. A record from before digests is not held to the settings."""
        found = {}
        for job in self.jobs():
            path = Path(job.path)
            if job.rule not in MEASURING or not path.is_file():
                continue
            if (record := _readable(path)) is None:  # a corrupt record: the report names it
                continue
            # the job's wildcards as Snakemake passes them to params functions: strings
            w = SimpleNamespace(**{key: str(value) for key, value in job.wildcards.items()})
            said, now = record.get("params_digest"), self.params_digest(job.rule, w)
            if why := misplaced(path, record):
                found[job.path] = why
            elif said is not None and said != now:
                found[job.path] = f"'{path}' was made under other settings than this study's "
                found[job.path] += f"now (params digest {said}, now {now})"
        return found

    # scheduler resources of a point (a fine-tuning point's cards, a diffusion point's devices)
    @staticmethod
    def _cards(w: Any) -> int:
        return int(w.get("cards") or w.devices)

    def point_threads(self, w: Any) -> int:
        """On the cpu system a card is a process, so a point takes one core per card."""
        return self._cards(w) if KINDS[self.system.device].host else 1

    # Across nodes, a point is what the SLURM plugin calls an MPI job: it submits its task
    # layout (one task per node, the node's launcher, with `--gres` GPUs per node so each node
    # holds the same number) and runs the job's command in the batch step, where `srun
    # --overlap` starts a torchrun per node. On one node, mpi is "" (false: no task layout).
    def point_layout(self, w: Any) -> dict[str, Any]:
        """The point's cards as the system's card resource counts them, its nodes and layout."""
        cards, kind = self._cards(w), self.system.card_resource
        nodes, per_node = self.system.layout(cards)
        model = self.system.slurm.get("gpu_model")  # Expanse's H100s are asked by model
        gres = f"gpu:{model}:{per_node}" if model else f"gpu:{per_node}"
        gres_gpus = nodes > 1 and kind == "gpu"  # GPUs across nodes are asked per node
        layout: dict[str, Any] = {"gpu": cards if kind == "gpu" and not gres_gpus else 0}
        layout |= {"gaudi": cards if kind == "gaudi" else 0, "nodes": nodes, "tasks": nodes}
        layout |= {"mpi": "srun" if nodes > 1 else "", "gres": gres if gres_gpus else ""}
        return layout | {"tasks_per_gpu": 0}  # else the plugin reads `tasks` as tasks per GPU

    def point_resources(self, rule: str) -> dict[str, Any]:
        """The point's layout, memory and runtime."""

        def resource(key: str) -> Callable[[Any], Any]:
            return lambda w: self.point_layout(w)[key]

        keys = ("gpu", "gaudi", "nodes", "mpi", "tasks", "tasks_per_gpu", "gres")
        return {key: resource(key) for key in keys} | self.measuring_resources(rule)

    @functools.cached_property
    def estimates(self) -> StudyEstimates:
        """The study's jobs with this system's records so far (read once per parse)."""
        return StudyEstimates(self.config, self.system)

    def measuring_resources(self, rule: str) -> dict[str, Any]:
        """A measuring job's runtime: its forecast times forecast.MARGIN, times the attempt (a
        retry after a time-out gets more), within the system's wall-time limit."""

        def runtime(wildcards: Any, attempt: int) -> int:
            if rule not in COVERS:
                return self.estimates.runtime(rule, wildcards, attempt)
            members = [SimpleNamespace(**m) for m in self.members(rule, wildcards)]
            minutes = sum(self.estimates.runtime(rule, m, attempt) for m in members)
            limit = (self.system.walltime or {}).get("max_minutes")
            return min(minutes, limit) if limit else minutes

        return {"mem_mb": 8000, "runtime": runtime}

    @staticmethod
    def resources(minutes: int, mem_mb: int = 8000) -> dict[str, Any]:
        """A preparing job's memory, and a runtime that grows with each retry (`attempt`)."""
        return {"mem_mb": mem_mb, "runtime": lambda wildcards, attempt: minutes * attempt}


STAMPS = ".snakemake/accelstudy/settings"


def _stamp(record: str) -> str:
    return f"{STAMPS}/{record.lstrip('/')}.stamp"


def _readable(path: Path) -> dict[str, Any] | None:
    """A record's JSON, or None where it is not one (the report names a corrupt record)."""
    try:
        record = read_json(path)
    except (OSError, ValueError, StudyError):  # damaged: the report names it with its fix
        return None
    return record if isinstance(record, dict) else None
