"""lm-evaluation-harness's own task definitions pointed at local items (tests and bench)."""

import json
from pathlib import Path

import lm_eval

TASKS_DIR = Path(lm_eval.__file__).parent / "tasks"
BASES = {
    "hellaswag": TASKS_DIR / "hellaswag" / "hellaswag.yaml",
    "boolq": TASKS_DIR / "super_glue" / "boolq" / "default.yaml",
    "wikitext": TASKS_DIR / "wikitext" / "wikitext.yaml",
}


def task_yaml(tmp: Path, task: str, rows: list[dict]) -> str:
    """Write `rows` and a task file that includes lm-eval's `task` on them; its task name."""
    data = tmp / f"{task}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    name = f"accelstudy_{task}"
    lines = [
        f"include: {BASES[task]}",
        f"task: {name}",
        "tag: []",
        "dataset_path: json",
        "dataset_name: null",
        "dataset_kwargs:",
        "  data_files:",
        f"    validation: {data}",
        "training_split: null",
        "validation_split: validation",
        "test_split: null",
    ]
    if task == "boolq":  # google/boolq's schema has a boolean `answer`, not super_glue's `label`
        lines.append('doc_to_target: "{{ answer | int }}"')
    (tmp / f"{name}.yaml").write_text("\n".join(lines) + "\n")
    return name
