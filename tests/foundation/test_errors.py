"""A ConfigError is the one line a user sees, whatever their file spells: a key with a newline or a carriage return
(a YAML key may hold one) is escaped, not printed across lines, through the CLI too."""

from __future__ import annotations

import subprocess
import sys

from goodput.foundation.errors import ConfigError
from tests.conftest import REPO


def test_a_key_with_control_characters_stays_one_line():
    e = ConfigError("fleet.yaml", "deployments[0].ba\nd\rkey\x1b", "unknown key; allowed: a, b")
    assert str(e) == "fleet.yaml: deployments[0].ba\\nd\\rkey\\x1b: unknown key; allowed: a, b"
    assert "\t" in str(ConfigError("f", "a\tb", "p"))  # a tab is a printable space: kept


def test_the_cli_prints_such_a_key_on_one_line(tmp_path):
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text('seed: 1\n"bad\\nkey": 2\n')
    r = subprocess.run([sys.executable, "-m", "goodput", "simulate", str(fleet), "--duration", "10", "--out",
                        str(tmp_path / "out")],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 2 and "bad\\nkey" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
