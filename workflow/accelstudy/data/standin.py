"""Offline stand-ins from real English text every CPython ships (`pydoc_data.topics`), so the
default study needs no network; each has its task's schema; records label it "stand-in"."""

import random
import re
from functools import cache
from itertools import groupby

from accelstudy.tasks import SPLITS, TASKS, named

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


@cache
def corpus_paragraphs(split: str | None = None) -> tuple[tuple[str, str], ...]:
    """(topic title, prose paragraph) pairs, from one split's topics if given; a paragraph repeated
    across topics is kept only in its first topic, so no text is shared between splits."""
    from pydoc_data.topics import topics

    found: dict[str, tuple[str, str, str]] = {}
    for index, (_, text) in enumerate(sorted(topics.items())):
        # a deterministic split by topic: 20% test, 10% validation, 70% train
        part = {0: "test", 1: "test", 2: "validation"}.get(index % 10, "train")
        title = text.strip().splitlines()[0].strip()
        for block in re.split(r"\n\s*\n", text):
            # indented blocks are code or grammar
            code = any(line.startswith((" ", "\t")) for line in block.splitlines())
            prose = len(block.split()) >= 8 and block.rstrip().endswith((".", ":", "?", "!"))
            if prose and not code:
                paragraph = " ".join(block.split())
                found.setdefault(paragraph, (part, title, paragraph))
    return tuple((t, p) for part, t, p in found.values() if split is None or part == split)


def wikitext_rows(split: str) -> list[dict[str, str]]:
    """Rows shaped as HF's line-level WikiText: per topic a blank row, a ' = Title = \\n'
    heading row and a blank row, then ' paragraph \\n' rows (blank lines are stored as "")."""
    rows: list[dict[str, str]] = []
    for title, paragraphs in groupby(corpus_paragraphs(split), key=lambda pair: pair[0]):
        rows += [{"text": ""}, {"text": f" = {title} = \n"}, {"text": ""}]
        rows += [{"text": f" {paragraph} \n"} for _, paragraph in paragraphs]
    return rows


def hellaswag_rows(split: str) -> list[dict]:
    """4-way sentence completion: the true next-sentence ending vs. endings of other topics."""
    stems = []
    for title, paragraph in corpus_paragraphs(split):
        sentences = [s.strip() for s in _SENTENCE_END.split(paragraph) if s.strip()]
        for index in range(1, len(sentences)):
            words = sentences[index].split()
            # ctx_a: up to three preceding sentences (at most ~80 words), like HellaSwag's
            # multi-sentence WikiHow contexts; ctx_b: the first two words of the next one
            previous = sentences[max(0, index - 3) : index]
            while len(previous) > 1 and len(" ".join(previous).split()) > 80:
                previous = previous[1:]
            ctx_a = " ".join(previous)
            if 6 <= len(words) <= 40 and len(ctx_a.split()) <= 80:
                ctx_b = " ".join(words[:2])
                stems.append((title, ctx_a, ctx_b[0].lower() + ctx_b[1:], " ".join(words[2:])))
    rng, rows = random.Random(f"hellaswag-{split}"), []
    for index, (title, ctx_a, ctx_b, ending) in enumerate(stems):
        others = [s[3] for s in rng.sample(stems, 12) if s[0] != title and s[3] != ending][:3]
        if len(others) < 3:
            continue
        label = rng.randrange(4)
        endings = [*others[:label], ending, *others[label:]]
        row = {"ind": index, "activity_label": title, "ctx_a": ctx_a, "ctx_b": ctx_b}
        row |= {"ctx": f"{ctx_a} {ctx_b}", "endings": endings, "source_id": f"pydoc~{title}"}
        rows.append({**row, "split": split, "split_type": "indomain", "label": str(label)})
    return rows


def boolq_rows(split: str) -> list[dict]:
    """Yes/no passage questions with balanced answers: is this passage about topic X?"""
    paragraphs = [(t, p) for t, p in corpus_paragraphs(split) if 30 <= len(p.split()) <= 180]
    titles = sorted({t for t, _ in paragraphs})
    rng, rows = random.Random(f"boolq-{split}"), []
    for index, (title, passage) in enumerate(paragraphs):
        answer = index % 2 == 0
        subject = title if answer else rng.choice([t for t in titles if t != title])
        question = f"is this passage from the python documentation of {subject.lower()}"
        rows.append({"question": question, "answer": answer, "passage": passage})
    return rows


def standin_rows(task: str, split: str) -> list[dict]:
    if split not in SPLITS:
        raise ValueError(f"unknown split '{split}'; expected one of {SPLITS}")
    return named(TASKS[task].standin)(split)
