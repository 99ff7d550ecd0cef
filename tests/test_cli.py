"""The CLI reports bad input as one line on stderr and exit status 2."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest
from accelstudy import timeline
from accelstudy.cli import COMMANDS, main

from tests.conftest import ROOT


def test_check_config_ok(capsys):
    assert main(["check-config", "--configfile", str(ROOT / "config" / "config.yaml")]) == 0
    assert "ok" in capsys.readouterr().out


def test_check_config_bad_key(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(
        "study: x\nmodels: {m: {source: tiny-random}}\ntasks: {boolq: {source: standin}}\nbatch: 3\n"
    )
    assert main(["check-config", "--configfile", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown key(s) ['batch']" in err


def prepare_data(tmp_path, task: str, row: dict) -> tuple[subprocess.CompletedProcess, Path]:
    """`accelstudy prepare-data` on a one-row local file; (the process, its output path)."""
    bad = tmp_path / f"{task}.jsonl"
    bad.write_text(json.dumps(row) + "\n")
    spec = json.dumps({"source": "local", "files": {"validation": str(bad)}})
    out = tmp_path / "out.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "accelstudy", "prepare-data", "--task", task,
         "--spec", spec, "--split", "validation", "--out", str(out)],
        capture_output=True, text=True,
    )  # fmt: skip
    return result, out


def test_prepare_data_with_wrong_columns(tmp_path):
    result, out = prepare_data(tmp_path, "hellaswag", {"ctx": "a", "endings": ["x"], "label": 0})
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert "missing column(s) ['activity_label', 'ctx_a', 'ctx_b']" in last
    assert not out.exists()


def test_prepare_data_with_a_bad_value_is_one_line(tmp_path):
    result, out = prepare_data(
        tmp_path, "boolq", {"question": "q", "passage": "p", "answer": "maybe"}
    )
    assert result.returncode == 2 and not out.exists()
    assert result.stderr.strip().count("\n") == 0
    assert "row 1: column 'answer' value 'maybe'" in result.stderr


@pytest.mark.parametrize(
    ("extra", "says"),
    [(["--config", "seed=1"], "unrecognized arguments: --config seed=1; only snakemake takes "
      "--config: put those keys in the --configfile file"),
     (["--configf", "x.yaml"], "unrecognized arguments: --configf x.yaml")],
)  # fmt: skip
def test_no_option_is_abbreviated(extra, says, capsys):
    """`--config k=v` was taken as argparse's prefix of --configfile: now one line."""
    configfile = str(ROOT / "config" / "config.yaml")
    with pytest.raises(SystemExit) as exit_:
        main(["check-config", "--configfile", configfile, *extra])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and err.count("\n") == 0 and says in err, err


def test_a_program_collects_nothing_of_its_imports():
    """A program's imports run with the collector off; what they made is then frozen out of
    every later collection (finalization's at exit included), and the collector is back on."""
    try:
        timeline.starting()
        assert not gc.isenabled()
        timeline.imported()
        assert gc.isenabled() and gc.get_freeze_count() > 0
        assert timeline.current().spent["imports"] > 0
    finally:
        gc.unfreeze()
        gc.enable()
        timeline.current().spent.pop("imports", None)


MISTAKES = [  # (argv, what the one line says): each a user's mistake, none a traceback
    (["plan-time", "--configfile", "/no/such.yaml"], "'/no/such.yaml' does not exist"),
    (["plan-fit", "--configfile", "/"], "'/' is not a regular file"),
    (["check-config", "--configfile", "/no/such.yaml"], "does not exist"),
    (["recommend", "--model", "nosuch", "--system", "cpu"], "'nosuch' is not fine-tuned"),
    (["plan-memory", "--model", "tinyllama-1.1b", "--strategy", "ddp", "--cards", "0"],
     "argument --cards: '0' is not a whole number above 0"),
    (["plan-memory", "--model", "tinyllama-1.1b", "--strategy", "ddp", "--cards", "-2"],
     "argument --cards: '-2' is not a whole number above 0"),
    (["plan-memory", "--model", "tinyllama-1.1b", "--strategy", "ddp",
      "--memory-per-card-gb", "-1"], "'-1' is not a number above 0"),
    (["plan-time", "--configfile", "config/paper.yaml", "--budget", "nan"],
     "argument --budget: 'nan' is not a number above 0"),
    (["probe", "--threads", "0"], "argument --threads: '0' is not a whole number above 0"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "says"), MISTAKES, ids=[" ".join(a[:2]) for a, _ in MISTAKES])
def test_a_users_mistake_is_one_line_and_status_2(argv, says, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's usage errors
        code = exit_.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and says in err, err


def _wrong_values(command: str, json_given: str = "{") -> list[str]:
    """The subcommand's required options, each given a value of the right form that names
    nothing: a missing file or folder, JSON cut short, a name that is no one's."""
    import argparse

    from accelstudy.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    argv = [command]
    for action in sub.choices[command]._actions:
        if not (action.required or not action.option_strings) or action.dest == "help":
            continue
        value = (action.choices and next(iter(action.choices))) or (
            NAMES_NOTHING if action.type is Path else json_given if action.dest in JSON_GIVEN
            else "1" if action.dest in ("chunk", "cards", "threads") else "nosuch")  # fmt: skip
        argv += [*action.option_strings[:1], str(value)]
    return argv


JSON_GIVEN = {"spec", "point", "bits", "settings"}
NAMES_NOTHING = str(ROOT / "README.md" / "x")  # neither readable nor creatable: a file's child
# no required option (their mistakes are in MISTAKES), or not a user's command line
WITHOUT_REQUIRED = {"probe", "snakemake", "plan-fit", "plan-time", "check-config", "where-report"}


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - WITHOUT_REQUIRED))
def test_every_subcommand_says_a_wrong_file_or_value_in_one_line(command, capsys, monkeypatch):
    """Every subcommand, missing its options (a usage error) and then given each required one
    a value that names nothing (a missing file, JSON cut short, an unknown name): one line
    and status 2 each, never a traceback."""
    monkeypatch.chdir(ROOT)
    for argv in ([command], _wrong_values(command), _wrong_values(command, "{}")):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse's usage errors
            code = exit_.code
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.count("\n") == 0 and "Traceback" not in err, (argv, err)
