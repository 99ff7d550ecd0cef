"""Our lm-eval protocol gives EleutherAI lm-evaluation-harness's own numbers.

lm_eval.simple_evaluate runs HFLM around the same in-memory tiny model, with lm-eval's own
hellaswag and boolq task definitions pointed at the same local data.
"""

from __future__ import annotations

import json
from pathlib import Path

import lm_eval
import pytest
from accelstudy.evaluate import evaluate_task
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager

from tests.conftest import EVAL_SETTINGS

TASKS_DIR = Path(lm_eval.__file__).parent / "tasks"
N_ITEMS = 24


def _task_yaml(tmp: Path, task: str, rows: list[dict]) -> str:
    data = tmp / f"{task}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    name = f"accelstudy_{task}"
    base = {
        "hellaswag": TASKS_DIR / "hellaswag" / "hellaswag.yaml",
        "boolq": TASKS_DIR / "super_glue" / "boolq" / "default.yaml",
    }[task]
    lines = [
        f"include: {base}",
        f"task: {name}",
        "tag: []",
        "dataset_path: json",
        "dataset_name: null",
        "dataset_kwargs:",
        "  data_files:",
        f"    validation: {data}",
        "training_split: null",
        "validation_split: validation",
    ]
    if task == "boolq":  # google/boolq's schema has a boolean `answer`, not super_glue's `label`
        lines.append('doc_to_target: "{{ answer | int }}"')
    (tmp / f"{name}.yaml").write_text("\n".join(lines) + "\n")
    return name


@pytest.mark.parametrize("task", ["hellaswag", "boolq"])
def test_lm_eval_protocol_matches_the_harness(task, tiny, cpu, standin, tmp_path):
    model, tokenizer = tiny
    rows = standin[task][:N_ITEMS]
    name = _task_yaml(tmp_path, task, rows)
    lm = HFLM(
        pretrained=model, tokenizer=tokenizer, batch_size=4,
        max_length=EVAL_SETTINGS["lm_eval_max_length"], device="cpu",
    )  # fmt: skip
    out = lm_eval.simple_evaluate(
        model=lm, tasks=[name], task_manager=TaskManager(include_path=str(tmp_path)),
        log_samples=True, num_fewshot=0, bootstrap_iters=0,
    )  # fmt: skip
    harness = out["results"][name]
    ours, items = evaluate_task(model, tokenizer, task, "lm-eval", rows, EVAL_SETTINGS, cpu)

    assert ours["acc"] == pytest.approx(harness["acc,none"], abs=1e-12)
    if task == "hellaswag":
        assert ours["acc_norm"] == pytest.approx(harness["acc_norm,none"], abs=1e-12)
    samples = sorted(out["samples"][name], key=lambda s: s["doc_id"])
    assert len(samples) == len(items) == N_ITEMS
    for sample, item in zip(samples, items, strict=True):
        theirs = [resp[0][0] for resp in sample["resps"]]
        assert item["loglikelihoods"] == pytest.approx(theirs, abs=1e-4)
