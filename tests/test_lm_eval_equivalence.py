"""Our lm-eval protocol gives EleutherAI lm-evaluation-harness's own numbers.

lm_eval.simple_evaluate runs HFLM around the same in-memory tiny model, with lm-eval's own
hellaswag, boolq and wikitext task definitions pointed at the same local data.
"""

from __future__ import annotations

from pathlib import Path

import lm_eval
import pytest
from accelstudy.evaluate import evaluate_task
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager

from bench.harness_tasks import task_yaml
from tests.conftest import EVAL_SETTINGS

N_ITEMS = 24


def _harness(model, tokenizer, name: str, tasks_dir: Path, batch_size: int) -> dict:
    """lm_eval.simple_evaluate with HFLM around the in-memory model, on our task file."""
    lm = HFLM(
        pretrained=model,
        tokenizer=tokenizer,
        batch_size=batch_size,
        max_length=EVAL_SETTINGS["lm_eval_max_length"],
        device="cpu",
    )
    return lm_eval.simple_evaluate(
        model=lm,
        tasks=[name],
        # only our files: indexing every task lm-eval ships takes ~15 s a call
        task_manager=TaskManager(include_path=str(tasks_dir), include_defaults=False),
        log_samples=True,
        num_fewshot=0,
        bootstrap_iters=1,  # >0: its closed-form standard errors (none is bootstrapped here)
    )


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["tiny", "tiny_bos"])
@pytest.mark.parametrize("task", ["hellaswag", "boolq"])
def test_lm_eval_protocol_matches_the_harness(task, fixture, request, cpu, standin, tmp_path):
    model, tokenizer = request.getfixturevalue(fixture)
    rows = standin[task][:N_ITEMS]
    name = task_yaml(tmp_path, task, rows)
    out = _harness(model, tokenizer, name, tmp_path, batch_size=4)
    harness = out["results"][name]
    ours, items = evaluate_task(model, tokenizer, task, "lm-eval", rows, EVAL_SETTINGS, cpu)

    assert ours["acc"] == pytest.approx(harness["acc,none"], abs=1e-12)
    assert ours["acc_stderr"] == pytest.approx(harness["acc_stderr,none"], abs=1e-9)
    if task == "hellaswag":
        assert ours["acc_norm"] == pytest.approx(harness["acc_norm,none"], abs=1e-12)
        assert ours["acc_norm_stderr"] == pytest.approx(harness["acc_norm_stderr,none"], abs=1e-9)
    samples = sorted(out["samples"][name], key=lambda s: s["doc_id"])
    assert len(samples) == len(items) == N_ITEMS
    for sample, item in zip(samples, items, strict=True):
        theirs = [resp[0][0] for resp in sample["resps"]]
        assert item["loglikelihoods"] == pytest.approx(theirs, abs=1e-4)


def _raw_wikitext(standin: dict) -> str:
    """A raw file as WikiText-2 raw writes one: ' ' blank lines, ' = Title = ' headings,
    ' = = Section = = ' subheadings, tokenised punctuation and ' @-@ ' number artefacts."""
    paragraphs = [r["text"].strip() for r in standin["wikitext"] if len(r["text"]) > 80][:12]
    lines = [" "]
    for article in range(3):
        lines += [f" = Article {article} = ", " "]
        for i, text in enumerate(paragraphs[article * 4 : article * 4 + 4]):
            text = text.replace(",", " ,").replace(".", " .").replace("'s", " 's")
            lines.append(f' {text} In 1 @,@ 800 the 2 @-@ 3 ( mid ) " x " : y ; it \'s N . ')
            if i == 1:
                lines += [" ", " = = Section = = ", " "]
        lines.append(" ")
    return "\n".join(lines) + "\n"


def _builder_pages(raw: str) -> list[str]:
    """EleutherAI/wikitext_document_level's builder, applied to the raw file's text."""
    pages, current = [], []
    for line in raw.split("\n"):
        collapsed = line.replace("= = =", "===").replace("= =", "==").strip()
        if collapsed.startswith("= ") and collapsed.strip().endswith(" ="):
            if "\n".join(current).strip():
                pages.append("\n".join(current))
            current = []
        current.append(line)
    return [*pages, "\n".join(current)]


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["tiny", "tiny_bos"])
def test_lm_eval_wikitext_matches_the_harness(fixture, request, cpu, standin, tmp_path):
    """lm-eval's own `wikitext` task on document-level pages built from a raw file, against
    our protocol on the same file as HF's line-level rows (blank lines stored as "").

    A whitespace-only raw line other than " " would differ in bytes: HF's rows keep no trace
    of its width, and WikiText's raw files hold none (evaluate/perplexity.raw_lines)."""
    model, tokenizer = request.getfixturevalue(fixture)
    raw = _raw_wikitext(standin)
    pages = _builder_pages(raw)
    assert len(pages) == 3 and "= = Section = =" in pages[0] and "@-@" in pages[0]
    name = task_yaml(tmp_path, "wikitext", [{"page": p} for p in pages])
    harness = _harness(model, tokenizer, name, tmp_path, batch_size=1)["results"][name]
    # HF's `wikitext` builder: each raw line with its newline, whitespace-only lines as ""
    rows = [{"text": line if line.strip() else ""} for line in raw.splitlines(keepends=True)]
    ours, _ = evaluate_task(model, tokenizer, "wikitext", "lm-eval", rows, EVAL_SETTINGS, cpu)
    assert ours["documents"] == len(pages)
    assert ours["target_tokens"] > EVAL_SETTINGS["lm_eval_max_length"]  # several windows
    for metric in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
        assert ours[metric] == pytest.approx(harness[f"{metric},none"], rel=1e-6), metric
        assert harness[f"{metric}_stderr,none"] == "N/A"  # the harness gives none: ours bootstraps
        assert 0 < ours[f"{metric}_stderr"] < ours[metric]
