"""Collect result records into tidy tables, seaborn figures and an HTML/Markdown report."""
