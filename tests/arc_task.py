"""An ARC-Easy-shaped task (a question and 3 to 5 labelled choices), defined outside the
package: tests/test_tasks.py registers it alone, and as a plugin (`install_plugin`) every process
of a Snakemake run imports this module, so it imports nothing heavy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelstudy.tasks import ACCURACY, FIRST_INDEX, ChoiceProtocol, TaskSpec

if TYPE_CHECKING:
    from accelstudy.evaluate.prompts import ChoiceRequest

HERE = "tests.arc_task"
ARC = TaskSpec("arc_easy", "multiple-choice", "allenai/ai2_arc", "ARC-Easy", "test", "train",
               ("question", "choices", "answerKey"), ACCURACY, f"{HERE}:arc_row",
               f"{HERE}:arc_standin", max_length=256, protocols={
    "paper": ChoiceProtocol(f"{HERE}:arc_request", "paper", "token", "right", FIRST_INDEX),
    "lm-eval": ChoiceProtocol(f"{HERE}:arc_request", "lm-eval", "none", "left", FIRST_INDEX,
                              "acc_norm")})  # fmt: skip
ROWS = [
    {"question": "Which is a liquid at room temperature?",
     "choices": {"text": ["iron", "water", "salt"], "label": ["A", "B", "C"]}, "answerKey": "B"},
    {"question": "What do plants need to make food?",
     "choices": {"text": ["sunlight", "sand", "noise", "plastic"],
                 "label": ["A", "B", "C", "D"]}, "answerKey": "A"},
    {"question": "Which animal lays eggs?",
     "choices": {"text": ["cow", "dog", "horse", "cat", "hen"],
                 "label": ["1", "2", "3", "4", "5"]}, "answerKey": "5"},
]  # fmt: skip


def arc_row(row: dict) -> dict:
    """ARC's row as is, checked: its answer key is one of its choices' labels."""
    from accelstudy.data.sources import BadValue

    if row["answerKey"] not in row["choices"]["label"]:
        raise BadValue("answerKey", row["answerKey"], "is not one of the choices' labels")
    return row


def arc_standin(split: str) -> list[dict]:
    return [dict(row, question=f"{row['question']} ({split})") for row in ROWS]


def arc_request(row: dict) -> ChoiceRequest:
    """lm-eval's arc_easy: 'Question: {question}\\nAnswer:', each choice's text."""
    from accelstudy.evaluate.prompts import ChoiceRequest

    gold = row["choices"]["label"].index(row["answerKey"])
    return ChoiceRequest(f"Question: {row['question']}\nAnswer:", row["choices"]["text"], gold)
