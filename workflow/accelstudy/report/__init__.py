"""Collect result records into tidy tables, seaborn figures and an HTML/Markdown report."""

from accelstudy.report.build import build_report as build_report
