"""The task registry every stage, the data layer, the schema, the CLI and the report read. A task
is one entry here: its Hub source and columns, its rows' check, its stand-in, its prompts under
each protocol and its paper-protocol length (the schema's `evaluation.<task>_max_length`); its
kind picks its scorer (evaluate/). Functions are named ("module:function"), imported on use."""

import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

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
class ChoiceProtocol:
    """How a multiple-choice task's rows become requests, tokenise and pick the answer."""

    build: str  # "module:function": a row -> evaluate.prompts.ChoiceRequest
    name: str  # "paper" | "lm-eval": how texts are encoded (evaluate.prompts.encode)
    normalisation: str  # "token" (mean log-prob) or "none" (sum; acc_norm also reported)
    truncation: str  # "right": the scripts keep the first max_length tokens; "left": lm-eval
    ties: Mapping[str, int | None]  # accuracy name -> the choice index a tie goes to
    quoted: str = "acc"  # the `accuracy`: lm-eval users quote acc_norm for HellaSwag

    def request(self, row: dict) -> Any:
        return named(self.build)(row)


FIRST_INDEX = {"acc": None}  # np.argmax: the first best choice wins a tie
# The authors' BoolQ scripts differ in ties (both -inf too): Gaudi's say yes only if yes > no,
# A100's if yes >= no. Both are recorded; the first is the protocol's `accuracy`.
BOOLQ_TIES = {"acc_ties_no": 1, "acc_ties_yes": 0}


def named(function: str) -> Callable[..., Any]:
    """A registry's "module:function", imported on first use (reading the registry stays light)."""
    return pkgutil.resolve_name(function)


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
    rows: str  # "module:function" checking and normalising one row (data.sources.BadValue)
    standin: str  # "module:function": a split's stand-in rows, made here (no download)
    calibration_limit: int | None = 2000  # PTQ's default: items, or blocks (None: all)
    choices: int | None = None  # a multiple-choice task's answers per item (chance: 1 / choices)
    protocols: Mapping[str, ChoiceProtocol] = field(default_factory=dict)  # multiple choice's
    max_length: int | None = None  # multiple choice: evaluation.<name>_max_length's default

    @property
    def tied(self) -> bool:
        """Its paper protocol records more than one tie rule (the report picks one per system)."""
        paper = self.protocols.get("paper")
        return paper is not None and len(paper.ties) > 1

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

SOURCES, STANDIN = "accelstudy.data.sources", "accelstudy.data.standin"
PROMPTS = "accelstudy.evaluate.prompts"
TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec("wikitext", "perplexity", "Salesforce/wikitext", "wikitext-2-raw-v1", "test",
                 "validation", ("text",), PERPLEXITY, f"{SOURCES}:wikitext_row",
                 f"{STANDIN}:wikitext_rows", calibration_limit=None),
        TaskSpec("hellaswag", "multiple-choice", "Rowan/hellaswag", None, "validation", "train",
                 ("activity_label", "ctx_a", "ctx_b", "endings", "label"), ACCURACY,
                 f"{SOURCES}:hellaswag_row", f"{STANDIN}:hellaswag_rows", choices=4,
                 max_length=2048, protocols={
            "paper": ChoiceProtocol(f"{PROMPTS}:hellaswag_paper", "paper", "token", "right",
                                    FIRST_INDEX),
            "lm-eval": ChoiceProtocol(f"{PROMPTS}:hellaswag_lm_eval", "lm-eval", "none", "left",
                                      FIRST_INDEX, "acc_norm")}),
        TaskSpec("boolq", "multiple-choice", "google/boolq", None, "validation", "train",
                 ("question", "answer", "passage"), ACCURACY, f"{SOURCES}:boolq_row",
                 f"{STANDIN}:boolq_rows", choices=2, max_length=512, protocols={
            "paper": ChoiceProtocol(f"{PROMPTS}:boolq_paper", "paper", "token", "right",
                                    BOOLQ_TIES),
            "lm-eval": ChoiceProtocol(f"{PROMPTS}:boolq_lm_eval", "lm-eval", "none", "left",
                                      FIRST_INDEX)}),
    )
}  # fmt: skip


def relevant_settings(task: str, protocol: str, evaluation: dict) -> dict:
    """Only the evaluation keys that change this (task, protocol)'s number: rules pass these as
    params, so editing one knob re-runs only the evaluations it affects."""
    keys = ["lm_eval_max_length"] if protocol == "lm-eval" else TASKS[task].paper_settings()
    return {key: evaluation[key] for key in [*keys, "dtype"]}
