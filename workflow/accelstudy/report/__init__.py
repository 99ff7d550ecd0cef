"""Collect result records into tidy tables, seaborn figures and an HTML/Markdown report."""

from accelstudy.report.build import build_report
from accelstudy.report.collect import collect_records, load_published

__all__ = ["build_report", "collect_records", "load_published"]
