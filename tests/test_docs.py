"""The documentation holds together: a README a newcomer reads in minutes, relative links that
lead to files and headings that exist, and the Snakemake workflow catalog's usage file."""

import argparse
import contextlib
import json
import re
import shlex
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


# config/README.md's key table, held to the schema ---------------------------------------------
def table_rows() -> list[list[str]]:
    """The cells of each row of config/README.md's "Keys" table."""
    lines = (ROOT / "config" / "README.md").read_text().split("\n## Keys\n")[1].split("\n## ")[0]
    rows = [
        re.split(r"(?<!\\)\|", line)[1:-1] for line in lines.splitlines() if line.startswith("| `")
    ]
    return [[cell.strip() for cell in row] for row in rows]


def documented_keys(cell: str) -> list[str]:
    """`a.b`, `a.{c,d}`, `a.b` / `c` and `a.b`, `c`: the dotted keys a row's first cell names,
    `<name>` as `*`."""
    names = re.findall(r"`([^`]+)`", cell)
    first = re.sub(r"<\w+>", "*", names[0]).replace(" ", "")
    parent, _, last = first.rpartition(".") if "{" not in first else first.partition(".{")
    if "{" in first:
        return [f"{parent}.{k}" for k in last.rstrip("}").split(",")]
    return [first] + [f"{parent}.{n}" for n in names[1:]]


def schema_keys(node: dict, prefix: str = "") -> list[str]:
    """Every option's dotted key (`*` for a name the user picks: a model, a task)."""
    from accelstudy.options import schema

    defs, keys = schema()["$defs"], []
    node = defs[node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else node
    children = dict(node.get("properties", {}))
    if isinstance(node.get("additionalProperties"), dict):
        children["*"] = node["additionalProperties"]
    for key, child in children.items():
        key = "*" if prefix.endswith("calibration_limit.") else key  # one per task
        keys += [f"{prefix}{key}", *schema_keys(child, f"{prefix}{key}.")]
    return keys


def literal(text: str) -> str:
    """A default as the table and the schema write it, compared as text: `[16, 8]`, 3e-4."""
    text = text.replace("`", "").replace(" ", "").replace('"', "").lower()
    with contextlib.suppress(ValueError):
        return repr(float(text))
    return text


def test_the_config_key_table_is_the_schemas():
    """Every schema option has a row (a row documents its key and the keys below it), every row
    names an option, and its allowed values and its default are the schema's."""
    from accelstudy.options import node, schema

    rows = {key: row for row in table_rows() for key in documented_keys(row[0])}
    options = set(schema_keys(schema()))
    assert not set(rows) - options, "rows naming no option"
    leaves = {o for o in options if not any(other.startswith(f"{o}.") for other in options)}
    undocumented = {o for o in leaves if not any(o == k or o.startswith(f"{k}.") for k in rows)}
    assert not undocumented, "options without a row in config/README.md"
    for key, (_, values, default, _) in rows.items():
        spec = node(key.replace("calibration_limit.*", "calibration_limit.wikitext"))
        allowed = spec.get("enum") or spec.get("items", {}).get("enum")
        allowed = allowed or spec.get("propertyNames", {}).get("enum")
        shown = re.findall(r"`([^`]+)`", values)
        if allowed and shown and "{" not in values:
            assert shown == list(allowed), f"{key}: the table's values are not the schema's"
        keys = documented_keys(next(r[0] for r in table_rows() if key in documented_keys(r[0])))
        parts = (
            default.split(", ")
            if len(keys) > 1 and default.count(",") >= len(keys) - 1
            else [default]
        )
        mine = parts[keys.index(key)] if len(parts) == len(keys) else default
        value = r"-?[\d.e+-]+|true|false|null|\[[^\]]*\]+"  # bare, or any word in backticks
        known = re.fullmatch(rf"(?:`?({value})`?|`([\w./$-]+)`)(?: \(.*\))?", mine)
        if "default" in spec and known:
            expected = json.dumps(spec["default"]).replace('"', "")
            assert literal(known.group(1) or known.group(2)) == literal(expected), f"{key}: {mine}"


COMMAND_DOCS = [p for p in MARKDOWN if p.name != "CHANGELOG.md"]  # the changelog is history
COMMAND_DOCS += [ROOT / "resources" / "README.md"]
PROGRAM = re.compile(r"^(?:[A-Z_]+=\S+\s+)*(?:\S*/)?(accelstudy|snakemake)\s+(.*)$")


def command_lines(path: Path) -> list[tuple[int, str, str, bool]]:
    """(line, program, arguments, complete) of each `accelstudy ...` / `snakemake ...`: a fenced
    block's lines (continuations joined: a whole command) and inline code spans (a fragment)."""
    found, fenced, pending, start = [], False, "", 0
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        if FENCE.match(line):
            fenced = not fenced
        elif fenced:
            pending, start = pending + line.rstrip("\\").strip() + " ", start or number
            if not line.rstrip().endswith("\\"):
                if match := PROGRAM.match(pending.strip()):
                    found.append((start, match.group(1), match.group(2), True))
                pending, start = "", 0
    text = "\n".join(prose_lines(path))
    for match in re.finditer(r"`([^`]+)`", text):
        if command := PROGRAM.match(" ".join(match.group(1).split())):
            number = text.count("\n", 0, match.start()) + 1
            found.append((number, command.group(1), command.group(2), False))
    return found


def parsers() -> dict[str, argparse.ArgumentParser]:
    from accelstudy.cli import build_parser
    from snakemake.cli import get_argument_parser

    return {"accelstudy": build_parser(), "snakemake": get_argument_parser()}


def unknown_options(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """A fragment's `--options` that its (sub)command does not take, or its unknown subcommand."""
    for action in parser._actions:  # the subcommand, where the program has them
        if isinstance(action, argparse._SubParsersAction) and argv and argv[0][0] not in "-<":
            if argv[0] not in action.choices:
                return [argv[0]]
            parser, argv = action.choices[argv[0]], argv[1:]
    known = {flag for action in parser._actions for flag in action.option_strings}
    given = [a.split("=")[0] for a in argv if a.startswith("-")]
    return [a for a in given if a not in known | {"-h", "--help"}]


@pytest.mark.parametrize("path", COMMAND_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_line_in_the_docs_parses(path, capsys):
    """A whole command (a code block's) parses as its program would parse it; a fragment (inline
    code) names a subcommand and options that exist: no stale command survives a rename."""
    programs, bad = parsers(), []
    for number, program, arguments, complete in command_lines(path):
        argv = [a for a in shlex.split(arguments, comments=True) if a != "..."]  # `...`: and more
        if complete:
            try:
                programs[program].parse_args(argv)
            except SystemExit:
                bad.append(f"{path.name}:{number}: {program} {arguments}")
        elif unknown := unknown_options(programs[program], argv):
            bad.append(f"{path.name}:{number}: {program} {arguments}: {unknown}")
    capsys.readouterr()
    assert not bad, "\n".join(bad)
