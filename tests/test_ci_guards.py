"""Under CI a test that needs an external tool fails when the tool is missing; elsewhere it skips, never passes."""

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, require


def outcome(*tools: str) -> tuple[str, str] | None:
    """What require() did, caught here so that a skip cannot skip this test itself."""
    try:
        require(*tools)
    except (pytest.skip.Exception, pytest.fail.Exception) as exc:
        return type(exc).__name__, str(exc)
    return None


def test_require_skips_without_ci_and_fails_under_ci(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CI", raising=False)
    assert outcome("promtool") == ("Skipped", "needs promtool on PATH")
    monkeypatch.setenv("CI", "true")
    kind, why = outcome("amtool")
    assert kind == "Failed" and why.startswith("needs amtool on PATH; under CI this is a failure"), why


def test_require_accepts_any_of_alternative_names(tmp_path, monkeypatch):
    tool = tmp_path / "alertmanager"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    assert outcome("prometheus-alertmanager|alertmanager") is None  # upstream's name is enough
    kind, why = outcome("prometheus-alertmanager")
    assert kind == "Failed" and why.startswith("needs prometheus-alertmanager on PATH"), why


def test_a_marked_test_fails_under_ci_when_its_tool_is_missing(tmp_path):
    """The real thing: pytest under CI=true with a PATH that has Python but no promtool/amtool."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {**os.environ, "CI": "true", "PATH": str(bin_dir)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/monitoring/test_rules.py",
                        "-k", "amtool_check_config or promtool_check_rules"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "needs amtool on PATH; under CI this is a failure" in r.stdout, r.stdout
    assert "needs promtool on PATH" in r.stdout and " skipped" not in r.stdout, r.stdout


CI_RUN = REPO / ".ci" / "run"


def test_this_repository_refers_to_nothing_outside_it():
    r = subprocess.run([str(CI_RUN), "paths"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "no tracked file refers to a path outside the repository" in r.stdout


# spelled in pieces so that this file does not trip the check itself
@pytest.mark.parametrize("line", ["SHARED = REPO" + '.parent / "shared"', "see .." + "/shared/DESIGN.md",
                                  "trace = '/wo" + "rk/shared/data/azure.csv'", "open('/ho" + "me/alice/trace.csv')"])
def test_ci_refuses_a_tracked_file_that_points_outside(tmp_path, line):
    repo = tmp_path / "clone"
    (repo / ".ci").mkdir(parents=True)
    (repo / ".ci" / "run").write_bytes(CI_RUN.read_bytes())
    (repo / ".ci" / "run").chmod(0o755)
    (repo / "ok.py").write_text("REPO = Path(__file__).parent\n")
    (repo / "bad.md").write_text(f"intro\n{line}\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    r = subprocess.run([str(repo / ".ci" / "run"), "paths"], cwd=repo, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "refer to paths outside the repository" in r.stderr and f"bad.md:2:{line}" in r.stderr, r.stderr
    assert "ok.py" not in r.stderr
