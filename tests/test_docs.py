"""The documentation holds together: a README a newcomer reads in minutes, relative links that
lead to files and headings that exist, and the Snakemake workflow catalog's usage file."""

import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

README = ROOT / "README.md"
MARKDOWN = sorted(
    [README, ROOT / "CHANGELOG.md", ROOT / "config" / "README.md", *(ROOT / "docs").glob("*.md")]
)
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+).*?\1")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, ...


def prose_lines(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks (a block's lines come back empty)."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lowercase, punctuation other than '-' and
    '_' dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").replace("*", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a markdown file, with GitHub's -1, -2 ... for repeats."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(path):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def relative_links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every relative link or image outside code."""
    links = []
    for number, line in enumerate(prose_lines(path), start=1):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            target = match.group(1)
            if not EXTERNAL.match(target):
                links.append((number, target))
    return links


def test_readme_reads_in_five_minutes():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move depth into docs/"
    long = [n for n, line in enumerate(lines, start=1) if len(line) > 1000]
    assert not long, f"README.md lines over 1000 characters: {long}"


def test_the_documents_exist():
    assert (ROOT / "docs").is_dir()
    for path in MARKDOWN:
        assert path.is_file(), path


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_to_files_and_headings(path):
    broken = []
    for number, target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{number}: {target}"
        if not resolved.is_relative_to(ROOT):
            broken.append(f"{where} (outside the repository)")
        elif not resolved.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{where} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_readme_links_into_docs():
    targets = {target.partition("#")[0] for _, target in relative_links(README)}
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{page.name}" in targets, f"README.md does not link to docs/{page.name}"


def test_slugs_follow_github():
    assert slug("The machine's limit: fraction of peak in every record") == (
        "the-machines-limit-fraction-of-peak-in-every-record"
    )
    assert slug("`make study` and `make test`") == "make-study-and-make-test"
    assert slug("`bench/vs_lm_eval.py` (issue #17)") == "benchvs_lm_evalpy-issue-17"


def test_workflow_catalog_names_the_mandatory_flags():
    catalog = yaml.safe_load((ROOT / ".snakemake-workflow-catalog.yml").read_text())
    usage = catalog["usage"]
    flags = usage["mandatory-flags"]
    assert isinstance(flags["desc"], str) and flags["desc"].strip()
    assert isinstance(flags["flags"], str) and flags["flags"].strip()
    # every file the flags name is in the repository
    for word in flags["flags"].split():
        if not word.startswith("-"):
            assert (ROOT / word).exists(), word
    deployment = usage["software-stack-deployment"]
    assert any(deployment.get(k) for k in ("conda", "singularity", "singularity+conda"))
    assert isinstance(usage["report"], bool)


def test_the_readme_counts_the_bad_inputs_tried():
    import subprocess
    import sys

    suites = ["tests/test_bad_inputs.py", "tests/test_injection.py"]
    collected = subprocess.run([sys.executable, "-m", "pytest", "-o", "addopts=", "--collect-only", "-q", *suites],
                               cwd=ROOT, capture_output=True, text=True, check=True)  # fmt: skip
    count = int(re.search(r"(\d+) tests? collected", collected.stdout)[1])
    assert f"The tests try {count}\nbad inputs" in README.read_text()
