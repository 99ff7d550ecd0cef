"""Where each job of a study writes, written once: the rules name their outputs, logs and
benchmarks from these templates, and the forecast, `plan-time` and the report list a study's
jobs (`StudyLayout.jobs`) and read a path's wildcards back from the same templates."""

import contextlib
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from accelstudy import points
from accelstudy.paths import SYSTEMS

# A rule's output ("rule.name": another of its outputs) under "{results}" (results/<study>, shared
# by the systems) or "{measured}" (results/<study>/<system>: a study run on another system never
# re-runs, and so deletes, this one's records)
OUTPUTS = {
    "prepare_model": "{results}/models/{model}",
    "prepare_data": "{results}/data/{task}/{split}.jsonl",
    "prepare_instructions": "{results}/data/instructions/train.jsonl",
    "prepare_dust": "{results}/data/dust/pairs.npz",
    "prepare_dust.card": "{results}/data/dust/card.json",
    "baseline": "{measured}/baseline/{model}/{task}/{protocol}.json",
    "sensitivity": "{results}/ptq/{model}/{task}/sensitivity/{granularity}/chunk-{chunk}.json",
    "gather_sensitivity": "{results}/ptq/{model}/{task}/sensitivity/{granularity}.csv",
    "cluster": "{results}/ptq/{model}/{task}/{granularity}/bits-{bits}/assignment.json",
    "quantize": "{measured}/ptq/{model}/{task}/{granularity}/bits-{bits}/{recipe}.json",
    "finetune": "{measured}/finetune/{model}/{strategy}/{attention}/cards-{cards}/repeat-{repeat}.json",  # noqa: E501
    "diffusion": "{measured}/diffusion/devices-{devices}/repeat-{repeat}.json",
    "report": "{results}/report/index.html",
}  # fmt: skip
BESIDE = {"items": ".items.parquet", "samples": ".samples.npz", "source": ".source.json"}
# a record's stage: the measuring stages' (a record per job, per system) and the sensitivity scan's
MEASURED_STAGES = ("baseline", "quantized", "finetune", "diffusion")
RECORD_STAGES = ("baseline", "sensitivity", *MEASURED_STAGES[1:])
STAGE_RULE = {"quantized": "quantize"}  # a record's stage -> the rule that writes it (else its own)
MEASURING = tuple(STAGE_RULE.get(stage, stage) for stage in MEASURED_STAGES)
MEASURING_FOLDERS = tuple(OUTPUTS[rule].split("/")[1] for rule in MEASURING)
# The wildcards one job of a rule covers every value of: one process evaluates a model on every
# task under every protocol (the baseline), or one bit list's assignment under every recipe
# (quantize); it loads and imports once and writes a record per value, each where it was before.
COVERS = {"baseline": ("task", "protocol"), "quantize": ("recipe",)}


def job_template(rule: str) -> str:
    """Where a job of the rule is named (its log, its benchmark): its output less the folders
    and file named by the wildcards the job covers ("baseline/{model}" for the baseline)."""
    parts = OUTPUTS[rule].split("/")
    covered = [p for p in parts if any(f"{{{w}}}" in p for w in COVERS.get(rule, ()))]
    return "/".join(parts[: len(parts) - len(covered)])


def job_of(rule: str, inside: str | Path) -> str:
    """The name of the job that wrote a record (its path below the system folder)."""
    drop = OUTPUTS[rule].count("/") - job_template(rule).count("/")
    parts = Path(inside).parts
    return job_name(Path(*parts[: len(parts) - drop]))


def beside(path: str | Path, what: str) -> str:
    """A file written beside an output: its per-item results, image samples or data source."""
    return str(Path(path).with_suffix(BESIDE[what]))


def job_name(inside: str | Path) -> str:
    """A job's name in its log's and benchmark's path: its output below its root, less the first
    folder ("baseline/m/t/paper.json" -> "m/t/paper")."""
    parts = Path(inside).with_suffix("").parts
    return "/".join(parts[1:]) or parts[0]


def wildcards_of(rule: str, path: str | Path) -> dict[str, str]:
    """The wildcards of one of the rule's outputs: its template read backwards."""
    tail = re.escape(OUTPUTS[rule].split("/", 1)[1])
    found = re.search(re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", tail) + "$", str(path))
    if found is None:
        raise ValueError(f"{path} is not a {rule} output ({OUTPUTS[rule]})")
    return found.groupdict()


def results_of(rule: str, path: str | Path) -> Path:
    """The study's results folder holding one of the rule's outputs (ValueError: not one)."""
    wildcards_of(rule, path)
    depth = OUTPUTS[rule].count("/") + OUTPUTS[rule].startswith("{measured}")
    return Path(path).parents[depth - 1]


def misplaced(path: str | Path, record: Mapping[str, Any]) -> str | None:
    """What a record says that its place does not (its study, system, model, task, protocol,
    bit list, recipe or point): a record copied over another's file; None where all agree."""
    places = {}
    for rule in MEASURING:
        with contextlib.suppress(ValueError):
            places[rule] = wildcards_of(rule, path)
    if not places:  # no place the layout names: nothing to hold it to
        return None
    stage = record.get("stage")
    if (rule := STAGE_RULE.get(str(stage), str(stage))) not in places:
        return f"'{path}' is a {next(iter(places))} record's place but holds a {stage} record"
    place = places[rule]
    parameters = record.get("parameters") or {}
    said = {key: record.get(key) for key in ("model", "task", "protocol")}
    said |= {key: parameters.get(key) for key in ("strategy", "attention", "cards", "repeat")}
    said |= {key: parameters.get(key) for key in ("devices", "recipe")}
    said["bits"] = points.bits_path(parameters["bits"]) if parameters.get("bits") else None
    system = Path(path).parents[OUTPUTS[rule].count("/") - 1]
    if (SYSTEMS / f"{system.name}.yaml").is_file():  # results/<study>/<system>/ (else older)
        place |= {"system": system.name, "study": system.parent.name}
        said |= {"system": record.get("system"), "study": record.get("study")}
    differ = [f"{key} {said[key]!r}, not {value!r}" for key, value in place.items()
              if said.get(key) is not None and str(said[key]) != value]  # fmt: skip
    return f"'{path}' holds a record of {'; '.join(differ)}" if differ else None


class PlannedJob(NamedTuple):
    rule: str
    wildcards: dict[str, Any]
    path: str


class StudyLayout:
    """A study's paths on one system: each rule's template with its roots filled in."""

    def __init__(self, config: Mapping[str, Any], system: str) -> None:
        self.config, self.results = config, f"{config['results_dir']}/{config['study']}"
        self.measured = f"{self.results}/{system}"

    def output(self, rule: str) -> str:
        """The rule's output, its wildcards left as Snakemake's {name}."""
        roots = {"results": self.results, "measured": self.measured}
        return re.sub(r"\{(results|measured)\}", lambda m: roots[m[1]], OUTPUTS[rule])

    def path(self, rule: str, **wildcards: Any) -> str:
        return self.output(rule).format(**wildcards)

    def beside(self, rule: str, what: str) -> str:
        return beside(self.output(rule), what)

    def log(self, rule: str, kind: str = "logs", suffix: str = ".log") -> str:
        root = self.measured if OUTPUTS[rule].startswith("{measured}") else self.results
        return f"{root}/{kind}/{rule}/{job_name(job_template(rule).split('/', 1)[1])}{suffix}"

    def benchmark(self, rule: str) -> str:
        return self.log(rule, "benchmarks", ".tsv")

    def covered_values(self, rule: str) -> list[dict[str, str]]:
        """Each record's values of the wildcards one job of the rule covers, in config order."""
        if rule == "quantize":
            return [{"recipe": recipe} for recipe in self.config["ptq"]["recipes"]]
        tasks = self.config["tasks"]
        return [{"task": t, "protocol": p} for t in sorted(tasks) for p in tasks[t]["protocols"]]

    def covered(self, rule: str, what: str | None = None) -> list[str]:
        """The outputs (or the files beside them) of one job of the rule: its template with
        every value of the wildcards the job covers filled in, the others left as {name}."""
        filled = []
        for each in self.covered_values(rule):
            path = self.output(rule)
            for key, value in each.items():
                path = path.replace(f"{{{key}}}", value)
            filled.append(beside(path, what) if what else path)
        return filled

    def members(self, rule: str, w: Any) -> list[dict[str, str]]:
        """The wildcards of each record one job of the rule writes (w: the job's wildcards)."""
        given = dict(w.items()) if hasattr(w, "items") else dict(vars(w))
        return [given | each for each in self.covered_values(rule)]

    def jobs(self) -> Iterator[PlannedJob]:
        """Every record of the study and every job that feeds the report, in config order (a
        record of a rule in COVERS is one of its job's)."""
        config, ptq = self.config, self.config["ptq"]
        evaluated = [m for m in sorted(config["models"]) if config["models"][m]["evaluate"]]
        for model in evaluated:
            for each in self.covered_values("baseline"):
                yield self._job("baseline", model=model, **each)
        for model in evaluated if ptq["enabled"] else []:
            for task in ptq.get("tasks", []):
                run = {"model": model, "task": task, "granularity": ptq["granularity"]}
                for chunk in range(ptq["chunks"]):
                    yield self._job("sensitivity", **run, chunk=chunk)
                yield self._job("gather_sensitivity", **run)
                for bits in map(points.bits_path, ptq["bit_lists"]):
                    yield self._job("cluster", **run, bits=bits)
                    for each in self.covered_values("quantize"):
                        yield self._job("quantize", **run, bits=bits, **each)
        for cell in points.finetune_cells(config):
            yield self._job("finetune", **cell._asdict())
        for devices, repeat in points.diffusion_cells(config):
            yield self._job("diffusion", devices=devices, repeat=repeat)

    def _job(self, rule: str, **wildcards: Any) -> PlannedJob:
        return PlannedJob(rule, wildcards, self.path(rule, **wildcards))

    def paths(self, *rules: str) -> list[str]:
        return [job.path for job in self.jobs() if job.rule in rules]


def system_folders(study: Path) -> list[Path]:
    """The results/<study>/<system>/ folders: those named after a config/systems file."""
    return sorted(d for d in study.glob("*/") if (SYSTEMS / f"{d.name}.yaml").is_file())


def record_files(root: Path, folders: tuple[str, ...] = MEASURING_FOLDERS) -> list[Path]:
    """The JSON files under a system folder's measuring folders, not a fine-tuning checkpoint's."""
    found = [p for folder in folders for p in (root / folder).rglob("*.json")]
    return sorted(p for p in found if not any(d.endswith(".checkpoints") for d in p.parts))
