"""The engine exporter's targets file replaced by a FIFO while it serves: a real exporter process and real engines
on real sockets. Opening a FIFO with no writer blocks; the file must be rejected in one logged line instead, the last
good set served, and an engine that stops must read ``up 0`` (the scrape loop is not stuck)."""

from __future__ import annotations

import os
import threading

import yaml

from goodput.exporters.targets_file import TargetsFile
from goodput.foundation.errors import ConfigError
from tests.conftest import free_port_block
from tests.exporters.test_exporter_processes import _Engine, _families_when, _start, _terminate, serve
from tests.exporters.test_targets_reload import _health, _replicas, _until, _write


def test_a_targets_file_replaced_by_a_fifo_is_rejected_and_rounds_go_on(tmp_path):
    engines = [serve(_Engine), serve(_Engine)]
    addr = [f"127.0.0.1:{e.server_address[1]}" for e in engines]
    path = tmp_path / "targets.yaml"
    _write(path, yaml.safe_dump([{"targets": addr, "labels": {"deployment": "chat", "engine": "vllm"}}]))
    port = free_port_block(1)
    proc = _start(["exporter", "engine", "--targets", str(path), "--port", str(port), "--interval", "0.2",
                   "--timeout", "1"])
    base = f"http://127.0.0.1:{port}"
    try:
        _families_when(proc, f"{base}/metrics", lambda f: _replicas(f) == {a: 1.0 for a in addr}, "both up")
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        os.replace(fifo, path)  # no writer ever comes
        r = _until(lambda: (r := _health(base)).text.startswith("degraded") and r or None, "degraded /healthz")
        assert r.status_code == 200 and "not a regular file" in r.text, r.text
        engines[1].shutdown()
        engines[1].server_close()
        fams = _families_when(proc, f"{base}/metrics", lambda f: _replicas(f) == {addr[0]: 1.0, addr[1]: 0.0},
                              "the stopped engine down")  # the last good set, still scraped round after round
        assert _health(base).status_code == 200
        assert fams
    finally:
        _, err = _terminate(proc)
        engines[0].shutdown()
    rejected = [ln for ln in err.splitlines() if "targets file rejected" in ln]
    assert len(rejected) == 1 and "not a regular file" in rejected[0], err


def test_a_fifo_as_the_targets_file_at_start_is_one_line(tmp_path):
    path = tmp_path / "targets.yaml"
    os.mkfifo(path)
    outcome: list[BaseException | TargetsFile] = []
    t = threading.Thread(target=lambda: outcome.append(_attempt(path)), daemon=True)  # a blocked open stays there
    t.start()
    t.join(10)
    assert outcome, "opening the FIFO blocked"
    assert isinstance(outcome[0], ConfigError), outcome
    assert str(outcome[0]) == f"{path}: not a regular file (a FIFO, socket or device); not read"


def _attempt(path) -> BaseException | TargetsFile:
    try:
        return TargetsFile(path)
    except ConfigError as e:
        return e
