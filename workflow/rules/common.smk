# The study, checked before any job runs, and the lookups the rules make (accelstudy.targets).
import json
import os
import sys
from pathlib import Path

from accelstudy.errors import StudyError
from accelstudy.files import read_yaml
from accelstudy.kinds import KINDS
from accelstudy.locks import release_results_lock, take_results_lock
from accelstudy.paths import export_for_jobs, require_project_files

try:  # before the imports below read the config schema's defaults
    require_project_files()
except StudyError as error:
    raise SystemExit(f"Error: {error}")

from accelstudy.report.outputs import PAGE_FILES, REPORT_FILES
from accelstudy.site import check_profile
from accelstudy.study import validate_study
from accelstudy.targets import StudyTargets

try:
    # what Snakemake's loader takes silently: a key twice, a NaN
    for study_file in workflow.config_settings.configfiles:
        read_yaml(study_file)
    SYSTEM = validate_study(config)
    check_profile(config, SYSTEM, workflow.resource_settings, os.environ)
except StudyError as error:
    # one line naming the key and the fix, not a traceback
    raise SystemExit(f"Error: {error}")


export_for_jobs(os.environ)
# what made a shared output (the sensitivity)
os.environ.update(ACCELSTUDY_SYSTEM=SYSTEM.name)
# results, logs and the directories Snakemake makes: never group- or world-writable
os.umask(os.umask(0o022) | 0o022)
STUDY = StudyTargets(config, SYSTEM)
RESULTS = STUDY.results
PTQ = config["ptq"]
COMPARE = config["compare"]
# a record not what its place says, or made under other settings than the study's now (a
# results folder copied and a setting changed: Snakemake has no metadata for the copy's paths)
# runs again: its job's settings stamp is dated now (the job in a SLURM or remote job's own
# Snakemake reads the stamps as they are)
if workflow.is_main_process and (misfits := STUDY.stamp_misfits()):
    more = f" ({len(misfits) - 1} more alike)" if len(misfits) > 1 else ""
    print(f"Runs again: {next(iter(misfits.values()))}{more}", file=sys.stderr)
# `--software-deployment-method conda` builds the environment the system's device needs (Gaudi
# jobs run in their container: envs/gaudi)
CONDA_ENV = f"../../envs/{KINDS[SYSTEM.device].conda_env}.yaml"


# one writer per results folder, whichever checkout or host runs it (dry runs take none)
onstart:
    try:
        take_results_lock(Path(RESULTS), Path(workflow.basedir))
    except StudyError as error:
        raise SystemExit(f"Error: {error}")


onsuccess:
    release_results_lock(Path(RESULTS))


onerror:
    release_results_lock(Path(RESULTS))


def captioned(name):
    """A table or figure of the report, captioned by workflow/report/<name>.rst."""
    path, kind = REPORT_FILES[name]
    return report(f"{RESULTS}/{path}", caption=f"../report/{name}.rst", category=kind)


# Small CPU jobs run beside Snakemake (a login node under SLURM), not as batch jobs.
localrules:
    prepare_model,
    prepare_data,
    prepare_instructions,
    prepare_dust,
    gather_sensitivity,
    cluster,
    report,
    compare,


wildcard_constraints:
    **STUDY.constraints(),
