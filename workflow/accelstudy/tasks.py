"""The task registry every stage, the data layer, the schema, the CLI and the report read. A task
is an entry here, its rows' normaliser and stand-in (data/) and its scorer (evaluate/)."""

from dataclasses import dataclass
from typing import Literal

Kind = Literal["perplexity", "multiple-choice"]
SPLITS = ("train", "validation", "test")
# how an evaluation builds its prompts and scores them: the authors' scripts' way, or
# lm-evaluation-harness's (the config's tasks.<name>.protocols, a record's protocol, the CLI's)
PROTOCOLS = ("paper", "lm-eval")


@dataclass(frozen=True)
class Metric:
    name: str
    lower_is_better: bool


@dataclass(frozen=True)
class TaskSpec:
    """One task. `dataset`/`config` are the Hub defaults that `tasks.<name>.dataset` and
    `tasks.<name>.name` override; PTQ calibrates on `calibration_split`, as the paper's runs did."""

    name: str
    kind: Kind
    dataset: str
    config: str | None
    eval_split: str
    calibration_split: str
    columns: tuple[str, ...]
    metric: Metric
    calibration_limit: int | None = 2000  # PTQ's default: items, or blocks (None: all)
    choices: int | None = None  # a multiple-choice task's answers per item (chance: 1 / choices)

    @property
    def calibration_unit(self) -> str:
        """What one calibration item is, for the report's axis labels."""
        return f"{self.calibration_split} " + ("blocks" if self.kind == "perplexity" else "items")

    def paper_settings(self) -> list[str]:
        """The evaluation keys the paper protocol reads for this task."""
        if self.kind == "perplexity":
            return ["block_size", "batch_size"]
        return [f"{self.name}_max_length"]


PERPLEXITY = Metric("perplexity", lower_is_better=True)
ACCURACY = Metric("accuracy", lower_is_better=False)

TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec("wikitext", "perplexity", "Salesforce/wikitext", "wikitext-2-raw-v1", "test",
                 "validation", ("text",), PERPLEXITY, calibration_limit=None),
        TaskSpec("hellaswag", "multiple-choice", "Rowan/hellaswag", None, "validation", "train",
                 ("activity_label", "ctx_a", "ctx_b", "endings", "label"), ACCURACY, choices=4),
        TaskSpec("boolq", "multiple-choice", "google/boolq", None, "validation", "train",
                 ("question", "answer", "passage"), ACCURACY, choices=2),
    )
}  # fmt: skip
TASK_NAMES = tuple(TASKS)


def relevant_settings(task: str, protocol: str, evaluation: dict) -> dict:
    """Only the evaluation keys that change this (task, protocol)'s number: rules pass these as
    params, so editing one knob re-runs only the evaluations it affects."""
    keys = ["lm_eval_max_length"] if protocol == "lm-eval" else TASKS[task].paper_settings()
    return {key: evaluation[key] for key in [*keys, "dtype"]}
