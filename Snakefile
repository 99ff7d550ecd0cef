# accelstudy: reproduce "Performance Optimization and Comparative Analysis of Generative AI
# Models on Advanced Accelerators" (UCSD/SDSC, 2026). See README.md and config/README.md.
import os

from snakemake.utils import min_version

min_version("9.0")
# the project's files (schemas, system files, resources) from this workflow's folder where it
# holds them, else from the installed package (accelstudy.paths); jobs inherit the variable
os.environ.setdefault("ACCELSTUDY_ROOT", workflow.basedir)


# the embedded default study, unless --configfile names another (a study file replaces it:
# never a merge of two studies); --config key=value applies on top of either
if not workflow.config_settings.configfiles:

    configfile: f"{workflow.basedir}/config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/baseline.smk"
include: "workflow/rules/ptq.smk"
include: "workflow/rules/finetune.smk"
include: "workflow/rules/diffusion.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        STUDY.output("report"),
