"""The command line starts fast: only the chosen subcommand's module is imported, and the table that stands in
for the others says what the modules themselves say."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from goodput.cli import COMMANDS, main
from tests.conftest import FIXTURES, REPO

HEAVY = ("pandas", "duckdb", "pyarrow", "numpy")


def _imported(*argv: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``python -X importtime -m goodput ARGV`` as a user would; the modules the whole process imported."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "goodput", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    mods = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "goodput.cli" in mods, proc.stderr[-2000:]  # -X importtime really reported
    return proc, mods


def _top(mods: set[str]) -> set[str]:
    return {m.split(".")[0] for m in mods}


@pytest.mark.parametrize("argv", [["--version"], ["--help"]])
def test_top_level_imports_no_part_of_the_project(argv):
    proc, mods = _imported(*argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = _top(mods) & {*HEAVY, "httpx", "rich", "yaml", "simulator", "exporters", "analyzer"}
    assert not loaded, f"`goodput {' '.join(argv)}` imported {sorted(loaded)}"
    assert "goodput.simulator.fleet" not in mods


def test_normalize_imports_only_what_normalizing_needs():
    dump = FIXTURES / "engine_samples" / "sglang_docs_production_metrics.txt"
    proc, mods = _imported("exporter", "engine", "normalize", str(dump))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "llm_requests_running{" in proc.stdout  # it did normalize
    loaded = _top(mods) & {*HEAVY, "httpx", "simulator", "analyzer"}
    assert not loaded, f"`goodput exporter engine normalize` imported {sorted(loaded)}"
    heavy = ("engine", "requests", "trace_store", "gpu")
    assert not {m for m in mods if m in {f"goodput.exporters.{h}" for h in heavy}}


def _registered(module: str) -> dict[str, str]:
    sub = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(module).register(sub)
    return {a.dest: a.help for a in sub._choices_actions}


@pytest.mark.parametrize("module", sorted({c.module for c in COMMANDS.values()}))
def test_the_table_says_what_each_module_registers(module):
    assert _registered(module) == {name: c.help for name, c in COMMANDS.items() if c.module == module}


def test_help_lists_every_command_with_its_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for name, c in COMMANDS.items():
        assert f"{name} {' '.join(c.help.split())}" in out


@pytest.mark.parametrize("argv, option", [
    (["simulate"], "--duration"), (["fleet", "serve"], "--base-port"), (["exporter", "gpu"], "--fake"),
    (["exporter", "engine"], "--targets"), (["exporter", "engine", "normalize"], "--engine"),
    (["exporter", "requests"], "--otlp-port"), (["rules", "generate"], "--check"), (["analyze", "ingest"], "--db"),
    (["analyze", "triage"], "--deployment"), (["demo"], "--otlp-port"),
])
def test_each_subcommand_help_lists_its_options(capsys, argv, option):
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: goodput {' '.join(argv)}") and option in out


def test_an_unknown_command_is_refused_naming_the_choices(capsys):
    with pytest.raises(SystemExit) as e:
        main(["simulat"])
    assert e.value.code == 2
    assert "invalid choice: 'simulat'" in capsys.readouterr().err


def test_a_mistake_in_the_chosen_command_is_one_line(tmp_path, capsys):
    assert main(["exporter", "engine", "normalize", str(tmp_path / "missing.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"goodput: error: {tmp_path / 'missing.txt'}") and err.count("\n") == 1


def test_a_reader_that_goes_away_ends_the_command_quietly():
    """``goodput ... | head``: the pipe closed before the report is printed is exit 141 (SIGPIPE's), no message."""
    proc = subprocess.Popen([sys.executable, "-m", "goodput", "plan", "disagg", "--demand", "examples/disagg_long.yaml"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # before the interpreter has even started: every write to stdout fails
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141, err
    assert err == ""
