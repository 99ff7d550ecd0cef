"""The report's pages: headed sections (a note, a table, a figure) as index.html and report.md,
the tables as CSV, every record as CSV and Parquet; and the prose notes.yaml holds."""

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from accelstudy.files import atomic_open
from accelstudy.kinds import KINDS
from accelstudy.report.outputs import PAGE_FILES

NOTES = yaml.safe_load(Path(__file__).with_name("notes.yaml").read_text())  # the prose
RECORDS = f"All records: `{PAGE_FILES['records_csv']}`, `{PAGE_FILES['records_parquet']}`."
STYLE = """body{font-family:sans-serif;max-width:1200px;margin:2em auto}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px}
.note{background:#fff6d5;padding:8px}.wide{overflow-x:auto;max-width:100%}
.same{color:#555;font-size:90%}.summary{background:#eef5ff;padding:4px 12px}
nav li{margin:2px 0}img{max-width:100%;height:auto}"""
FOLDED_ROWS = 15  # a longer table folds away under its section (<details>) in index.html


@dataclass(frozen=True)
class Section:
    """One heading of the report: a note, a table, a figure (a file under figures/)."""

    title: str
    note: str = ""
    table: pd.DataFrame | None = None
    figure: str = ""
    finding: str = ""  # one sentence with its numbers, for the report's summary at the top

    @property
    def anchor(self) -> str:
        """The heading's id in index.html (and GitHub's slug of it in report.md)."""
        return slug(self.title)

    def shown(self) -> tuple[pd.DataFrame | None, str]:
        """The table as shown, and what every row of it shares (moved to a line above it)."""
        if self.table is None:
            return None, ""
        table, same = _shown(self.table), []
        if len(table) >= 3:
            for column in list(table.columns):
                values = table[column].astype(str).unique()
                if len(values) == 1 and values[0] != "-" and len(values[0]) <= 40:
                    same.append(f"{column}: {values[0]}")
                    table = table.drop(columns=column)
        return table, ("Every row: " + "; ".join(same) + ".") if same else ""

    def to_markdown(self) -> str:
        shown, same = self.shown()
        table = "" if shown is None else shown.map(_markdown_cell).to_markdown(index=False)
        title, note = _markdown_text(self.title), _markdown_text(self.note)
        image = self.figure and f"![{title}](figures/{self.figure})"
        return "\n\n".join(
            p for p in [f"## {title}", note, image, _markdown_text(same), table] if p
        )

    def to_html(self) -> str:
        note = self.note and f'<p class="note">{html.escape(self.note)}</p>'
        shown, same = self.shown()
        table = ""
        if shown is not None:
            table = f'<div class="wide">{shown.to_html(index=False, border=0)}</div>'
            if len(shown) > FOLDED_ROWS:
                table = f"<details><summary>{len(shown)} rows</summary>{table}</details>"
        same = same and f'<p class="same">{html.escape(same)}</p>'
        src, alt = html.escape(f"figures/{self.figure}"), html.escape(self.title)
        image = self.figure and f'<img src="{src}" alt="{alt}">'
        heading = f'<h2 id="{self.anchor}">{alt}</h2>'
        return "\n".join(p for p in [heading, note, image, same, table] if p)  # the figure first


def slug(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces
    to '-' (the table of contents links both pages' headings so)."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in "-_ ")
    return kept.replace(" ", "-")


def our_numbers(runs: pd.DataFrame, part: str, **values: object) -> str:
    """What a part's numbers are (notes.yaml), so no one reads them against the paper's in
    absolute terms; what CPU cards and stand-in data mean, where the runs used them."""
    used = {
        "cpu": runs["device"].isin([k for k, s in KINDS.items() if s.host]).any(),
        "standin": runs["data"].eq("stand-in").any(),
    }
    said = [text for key, text in NOTES["our_numbers"][part].items() if used.get(key, True)]
    return " ".join(said).format(**values)


def _markdown_text(text: str) -> str:
    """Text as Markdown shows it, not as HTML: a record's `<script>` stays text (index.html
    escapes it as well)."""
    return html.escape(text, quote=False)


def _markdown_cell(value: object) -> object:
    """A table cell's text escaped, and its `|` kept from ending the cell."""
    return _markdown_text(value).replace("|", "\\|") if isinstance(value, str) else value


def _shown(table: pd.DataFrame) -> pd.DataFrame:
    """Blanks as "-", whole numbers in a float column (cards, a repeat) without ".0", no
    columns name (to_html would show one as an empty first column)."""
    table = table.copy()
    for column in table.select_dtypes("float").columns:
        values = table[column].dropna()
        if len(values) and (values == values.round()).all() and (values.abs() < 1e15).all():
            table[column] = table[column].astype("Int64")
    return table.astype(object).fillna("-").rename_axis(columns=None)


def _within(path: str | Path, root: str | Path) -> str:
    """`path` relative to `root` where it lies inside it, else as given."""
    try:
        return str(Path(path).resolve().relative_to(Path(root).resolve()))
    except ValueError:
        return str(path)


def relative_records(frame: pd.DataFrame, root: str | Path | None = None) -> pd.DataFrame:
    """Its `record` paths relative to their study's results folder (the row's `run`, else
    `root`): a table names no machine's folders (a home's user name) and travels between sites."""
    if "record" not in frame or (root is None and "run" not in frame):
        return frame
    roots = frame["run"] if "run" in frame else [root] * len(frame)
    return frame.assign(record=[_within(p, r) for p, r in zip(frame["record"], roots, strict=True)])


def not_shown(records: pd.DataFrame, root: str | Path | None = None) -> list[Section]:
    """The values the tables show as "-" (collect.unusable), record by record; none: no section."""
    odd = records[records["not_shown"].fillna("") != ""]
    columns = [c for c in ("run", "system", "stage", "record", "not_shown") if c in odd]
    table = relative_records(odd[columns], root)
    return [Section("Values not shown", NOTES["not_shown"], table)] if len(odd) else []


def write_csv(frame: pd.DataFrame, path: Path, root: str | Path | None = None) -> None:
    with atomic_open(path) as handle:
        relative_records(frame, root).to_csv(handle, index=False)


def write_records(records: pd.DataFrame, out: Path, root: str | Path | None = None) -> None:
    """Every record's row as CSV and Parquet under `out`, its path relative to `root` (or its
    run)."""
    write_csv(records, out / PAGE_FILES["records_csv"], root)
    with atomic_open(out / PAGE_FILES["records_parquet"], "wb") as handle:
        relative_records(records, root).to_parquet(handle, index=False)


def write_pages(title: str, intro: str, sections: Sequence[Section], out: Path) -> Path:
    """index.html and report.md of the sections under `out`; return index.html."""
    head = [f"# {_markdown_text(title)}", _markdown_text(intro)]
    found = [s.finding for s in sections if s.finding]
    summary = "\n".join(f"- {_markdown_text(f)}" for f in found)
    summary = summary and f"**Summary**\n\n{summary}"
    contents = "\n".join(f"- [{_markdown_text(s.title)}](#{s.anchor})" for s in sections)
    contents = f"**Contents**\n\n{contents}"
    parts = [*head, summary, contents, *(s.to_markdown() for s in sections), RECORDS]
    markdown = "\n\n".join(p for p in parts if p)
    said = "".join(f"<li>{html.escape(f)}</li>" for f in found)
    said = said and f'<section class="summary"><strong>Summary</strong><ul>{said}</ul></section>'

    title, body = html.escape(title), "".join(s.to_html() for s in sections)
    links = "".join(f'<li><a href="#{s.anchor}">{html.escape(s.title)}</a></li>' for s in sections)
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>{STYLE}</style></head><body>
<h1>{title}</h1>
<p>{html.escape(intro)}</p>
{said}
<nav><strong>Contents</strong><ol>{links}</ol></nav>
{body}
<p>{html.escape(RECORDS.replace("`", ""))}</p>
</body></html>
"""
    for name, text in (("markdown", markdown + "\n"), ("html", page)):
        with atomic_open(out / PAGE_FILES[name]) as handle:
            handle.write(text)
    return out / PAGE_FILES["html"]
