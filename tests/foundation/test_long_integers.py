"""Integers past Python's 4,300-digit int/str limit in the shared loaders: one ``FILE: line N: PROBLEM`` line, and
exit 2 from a command built on them, where ``json.loads`` / YAML's int constructor raise a bare ValueError."""

import subprocess
import sys

import pytest

from goodput.foundation.errors import ConfigError
from goodput.foundation.jsonfile import parse_json
from goodput.foundation.yamlfile import load_yaml, parse_yaml
from tests.conftest import REPO

LONG = "9" * 5000


def test_json_names_the_line_of_the_long_integer_and_not_one_inside_a_string():
    text = '{"note": "' + LONG + '",\n "n":\n ' + LONG + "}"
    with pytest.raises(ConfigError) as e:
        parse_json(text.encode(), "f.json")
    assert str(e.value) == "f.json: line 3: an integer longer than Python's limit of 4,300 digits"


def test_yaml_names_the_line_and_other_bases_still_load(tmp_path):
    with pytest.raises(ConfigError) as e:
        parse_yaml("a: 1\nb:\n  - " + LONG + "\n", "f.yaml")
    assert str(e.value) == "f.yaml: line 3: an integer longer than Python's limit of 4,300 digits"
    assert parse_yaml("a: 0x" + "f" * 5000, "f.yaml")["a"].bit_length() == 20_000  # hex has no digit limit
    assert parse_yaml("a: '" + LONG + "'", "f.yaml")["a"] == LONG  # a quoted string is not an integer
    p = tmp_path / "big.yaml"
    p.write_text("x: -" + LONG)
    with pytest.raises(ConfigError, match="big.yaml: line 1: an integer longer"):
        load_yaml(p)


def test_a_command_reading_through_the_loader_exits_2_in_one_line(tmp_path):
    spec = tmp_path / "slos.yaml"
    spec.write_text(f"slos:\n  chat: {LONG}\n")
    r = subprocess.run([sys.executable, "-m", "goodput", "rules", "generate", "--spec", str(spec), "--out",
                        str(tmp_path)], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"goodput: error: {spec}: line 2: an integer longer than Python's limit of 4,300 digits"
