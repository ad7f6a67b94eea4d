"""`goodput simulate` and `goodput fleet serve` refuse nonsense numbers in one line (exit 2), never a traceback."""

import socket

import pytest

from goodput.cli import main
from tests.conftest import REPO, free_port_block

FLEET = str(REPO / "examples" / "fleet.yaml")


@pytest.mark.parametrize(("args", "says"), [
    (["simulate", FLEET, "--out", "x", "--duration", "inf"], "--duration: must be a finite number"),
    (["simulate", FLEET, "--out", "x", "--duration", "nan"], "--duration: must be a finite number"),
    (["simulate", FLEET, "--out", "x", "--duration", "5", "--seed", "-1"], "--seed: must be an integer in 0..2**64-1"),
    (["simulate", FLEET, "--out", "x", "--duration", "5", "--drain", "-5"], "--drain: must be >= 0"),
    (["fleet", "serve", FLEET, "--base-port", "99999"], "--base-port: must be a port in 1..65535"),
    (["fleet", "serve", FLEET, "--duration", "nan"], "--duration: must be a finite number"),
    (["fleet", "serve", FLEET, "--duration", "-1"], "--duration: must be > 0"),
    (["fleet", "serve", FLEET, "--seed", "-1"], "--seed: must be an integer in 0..2**64-1"),
    (["fleet", "serve", FLEET, "--speed", "inf"], "--speed: must be a finite number"),
    (["fleet", "serve", FLEET, "--traffic", "nan"], "--traffic: must be a finite number"),
    (["fleet", "serve", FLEET, "--drain", "1e9"], "--drain: must be at most 600 s"),
    (["fleet", "serve", FLEET, "--drain", "0"], "--drain: must be > 0"),
])
def test_nonsense_numbers_exit_2_in_one_line(args, says, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and says in err[-1] and "Traceback" not in "\n".join(err)


def test_ports_beyond_65535_are_one_line(tmp_path, capsys):
    """The example fleet has 8 replicas: from 65533 up, the fourth port does not exist."""
    assert main(["fleet", "serve", FLEET, "--base-port", "65533", "--targets", str(tmp_path / "t.yaml")]) == 2
    assert "127.0.0.1:65536: cannot listen" in capsys.readouterr().err


def test_a_port_in_use_is_one_line(tmp_path, capsys):
    base = free_port_block(8)
    with socket.socket() as s:
        s.bind(("127.0.0.1", base + 2))
        s.listen()
        assert main(["fleet", "serve", FLEET, "--base-port", str(base), "--targets", str(tmp_path / "t.yaml")]) == 2
    assert f"127.0.0.1:{base + 2}: cannot listen" in capsys.readouterr().err
