"""The tables and figures the report rule declares, each named once: its name (its caption is
workflow/report/<name>.rst), its path under results/<study> and its report category."""

from pathlib import Path

from accelstudy.layout import OUTPUTS

REPORT_FILES: dict[str, tuple[str, str]] = {
    "baseline_table": ("tables/baseline.csv", "Baseline"),
    "baseline_figure": ("report/figures/baseline.png", "Baseline"),
    "table1": ("tables/table1.csv", "PTQ"),
    "table1_published": ("tables/table1_published.csv", "PTQ"),
    "fig1": ("report/figures/sensitivity.png", "PTQ"),
    "versus_figure": ("report/figures/versus.png", "PTQ"),
    "tradeoff": ("report/figures/tradeoff.png", "PTQ"),
    "finetune_table": ("tables/finetune.csv", "Fine-tuning"),
    "fig2a": ("report/figures/finetune_scaling.png", "Fine-tuning"),
    "fig2b": ("report/figures/finetune_strategies.png", "Fine-tuning"),
    "diffusion_table": ("tables/diffusion.csv", "Diffusion"),
    "fig3": ("report/figures/diffusion_scaling.png", "Diffusion"),
    "diffusion_samples": ("report/figures/diffusion_samples.png", "Diffusion"),
    "utilization": ("tables/utilization.csv", "Fraction of peak"),
    "time_rules": ("tables/time_rules.csv", "Time"),
    "time_jobs": ("tables/time_jobs.csv", "Time"),
    "time_figure": ("report/figures/time.png", "Time"),
    "forecast_judged": ("tables/forecast_judged.csv", "Time"),
    "forecast_figure": ("report/figures/forecast.png", "Time"),
}


# the report's other files: its pages and every record (uncaptioned), under results/<study>
PAGE_FILES = {"html": OUTPUTS["report"].removeprefix("{results}/")}  # the layout's page
PAGE_FILES["markdown"] = str(Path(PAGE_FILES["html"]).with_name("report.md"))
PAGE_FILES |= {"records_csv": "tables/records.csv", "records_parquet": "tables/records.parquet"}


def output(results_dir: Path, name: str) -> Path:
    """Where the output `name` of a study's report goes."""
    return Path(results_dir) / REPORT_FILES[name][0]


def figure(name: str) -> str:
    """A figure's file name, as the pages (and `compare`, in its own figures/) show it."""
    return Path(REPORT_FILES[name][0]).name
