"""The engine exporter's targets file changing while it serves: a real exporter process, real engines on real
sockets, the file edited under it (added, removed, broken, fixed), in goodput's format and Prometheus' file_sd."""

from __future__ import annotations

import json
import os
import time

import httpx
import pytest
import yaml

from goodput.exporters.config import load_targets
from goodput.foundation.errors import ConfigError
from tests.conftest import free_port_block
from tests.exporters.test_exporter_processes import _Engine, _families_when, _start, _terminate, serve


@pytest.fixture(scope="module")
def engine():
    """One engine answering the vLLM fixture on every path, so each target is its own path of one server."""
    srv = serve(_Engine)
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def _write(path, text: str) -> None:
    """Replace the file at once, as a ConfigMap update or an editor's save-as does."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _sd(*groups: tuple[list[str], dict]) -> str:
    return yaml.safe_dump([{"targets": t, "labels": lab} for t, lab in groups])


def _replicas(fams: dict, family: str = "llm_engine_up") -> dict[str, float]:
    return {s.labels["replica"]: s.value for s in fams.get(family, ()).samples} if family in fams else {}


def _health(base: str) -> httpx.Response:
    return httpx.get(f"{base}/healthz", timeout=5)


def _until(check, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (got := check()) is not None:
            return got
        time.sleep(0.1)
    pytest.fail(f"no {what} within {timeout:g} s")


def test_file_sd_targets_added_removed_broken_and_fixed_while_serving(tmp_path, engine):
    path = tmp_path / "targets.yaml"
    labels = {"deployment": "chat", "engine": "vllm", "model": "Llama-3.1-8B", "__metrics_path__": "/a/metrics"}
    _write(path, _sd(([engine], labels | {"replica": "chat-a"})))
    port = free_port_block(1)
    proc = _start(["exporter", "engine", "--targets", str(path), "--port", str(port), "--interval", "0.2",
                   "--timeout", "2"])
    base = f"http://127.0.0.1:{port}"
    try:
        fams = _families_when(proc, f"{base}/metrics", lambda f: _replicas(f) == {"chat-a": 1.0}, "chat-a up")
        assert _replicas(fams, "llm_requests_running") == {"chat-a": 6.0}  # the fixture's value, under its replica
        assert _health(base).text == "ok\n"

        # added: a second group, its replica named by its address as Prometheus' instance label is
        _write(path, _sd(([engine], labels | {"replica": "chat-a"}),
                         ([engine], labels | {"__metrics_path__": "/b/metrics"})))
        fams = _families_when(proc, f"{base}/metrics", lambda f: _replicas(f) == {"chat-a": 1.0, engine: 1.0},
                              "the added target up")
        assert _replicas(fams, "llm_requests_running") == {"chat-a": 6.0, engine: 6.0}

        # removed: chat-a's series leave /metrics, the other's stay
        _write(path, _sd(([engine], labels | {"__metrics_path__": "/b/metrics"})))
        fams = _families_when(proc, f"{base}/metrics", lambda f: set(_replicas(f)) == {engine}, "chat-a gone")
        assert _replicas(fams, "llm_requests_running") == {engine: 6.0}
        assert all(s.labels["replica"] != "chat-a" for f in fams.values() for s in f.samples if "replica" in s.labels)

        # broken: the last good set keeps being served; /healthz says why, where and since when, and stays 200
        _write(path, _sd(([engine, "no-port-here"], labels)))
        r = _until(lambda: (r := _health(base)).text.startswith("degraded") and r or None, "degraded /healthz")
        assert r.status_code == 200
        assert f"targets file {path} rejected at 20" in r.text and "[0].targets[1]: expected host:port" in r.text, r.text
        assert "serving the last good set of 1 targets" in r.text
        time.sleep(1.0)  # several polls of the same bad file: said once
        fams = _families_when(proc, f"{base}/metrics", lambda f: "llm_exporter_errors" in f, "errors")
        assert _replicas(fams) == {engine: 1.0}
        assert [s.value for s in fams["llm_exporter_errors"].samples
                if s.labels["kind"] == "targets_file"] == [1.0]

        # fixed: in place this time (truncate and write, as `echo > file` does)
        path.write_text(_sd(([engine], labels | {"replica": "chat-c"})))
        fams = _families_when(proc, f"{base}/metrics", lambda f: _replicas(f) == {"chat-c": 1.0}, "the fixed file")
        assert _health(base).text == "ok\n"
    finally:
        _, err = _terminate(proc)
    rejected = [ln for ln in err.splitlines() if "targets file rejected" in ln]
    assert len(rejected) == 1, err
    assert str(path) in rejected[0] and "expected host:port" in rejected[0]


def test_a_file_deleted_while_serving_keeps_the_last_good_set(tmp_path, engine):
    path = tmp_path / "targets.json"
    path.write_text(json.dumps([{"targets": [engine], "labels": {"deployment": "chat"}}]))
    port = free_port_block(1)
    proc = _start(["exporter", "engine", "--targets", str(path), "--port", str(port), "--interval", "0.2"])
    base = f"http://127.0.0.1:{port}"
    try:
        _families_when(proc, f"{base}/metrics", lambda f: _replicas(f) == {engine: 1.0}, "the JSON file_sd target")
        path.unlink()
        r = _until(lambda: (r := _health(base)).text.startswith("degraded") and r or None, "degraded /healthz")
        assert r.status_code == 200 and "cannot read" in r.text, r.text
        time.sleep(1.0)  # polled again and again while it is gone: said once
        fams = _families_when(proc, f"{base}/metrics", lambda f: "llm_engine_up" in f, "metrics")
        assert _replicas(fams) == {engine: 1.0}
    finally:
        _, err = _terminate(proc)
    assert len([ln for ln in err.splitlines() if "targets file rejected" in ln]) == 1, err


@pytest.mark.parametrize(("text", "problem"), [
    ("- targets: ['127.0.0.1:9']\n  labels: {engine: vllm}\n", "[0].labels.deployment: is required"),
    ("- targets: ['127.0.0.1:9', '127.0.0.1:10']\n  labels: {deployment: d, replica: r}\n",
     "[0].labels.replica: names one replica but the group has several targets"),
    ("- targets: ['http://127.0.0.1:9']\n  labels: {deployment: d}\n", "[0].targets[0]: expected host:port"),
    ("- targets: ['127.0.0.1:9']\n  labels: {deployment: d, engine: vllm2}\n", "[0].labels.engine: must be auto"),
    ("- targets: ['127.0.0.1:9']\n  labels: {deployment: d, __scheme__: ftp}\n", "[0].labels.__scheme__: must be"),
    ("- targets: ['127.0.0.1:9']\n  labels: {deployment: d}\n- targets: ['127.0.0.1:9']\n  labels: {deployment: d}\n",
     "[1].targets[0]: duplicate replica '127.0.0.1:9' in 'd'"),
    ("- targets: ['127.0.0.1:9']\n  label: {deployment: d}\n", "[0].label: unknown key"),
    ("- 127.0.0.1:9\n", "[0]: expected a mapping"),
    ("", "the file is empty"),
])
def test_a_bad_file_sd_file_is_one_line_naming_the_entry(tmp_path, text, problem):
    path = tmp_path / "sd.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_targets(path)
    assert str(e.value).startswith(f"{path}: {problem}"), str(e.value)


def test_file_sd_labels_map_onto_the_target_fields(tmp_path):
    path = tmp_path / "sd.json"
    path.write_text(json.dumps([
        {"targets": ["10.0.0.1:8000", "[fd00::1]:8000"], "labels": {
            "deployment": "chat", "engine": "sglang", "model": "m", "__scheme__": "https",
            "__metrics_path__": "/x/metrics", "namespace": "llm"}},
        {"targets": ["10.0.0.2:80"], "labels": {"deployment": "rag", "replica": "rag-0"}}]))
    got = [(t.deployment, t.replica, t.url, t.engine, t.model) for t in load_targets(path).targets]
    assert got == [("chat", "10.0.0.1:8000", "https://10.0.0.1:8000/x/metrics", "sglang", "m"),
                   ("chat", "[fd00::1]:8000", "https://[fd00::1]:8000/x/metrics", "sglang", "m"),
                   ("rag", "rag-0", "http://10.0.0.2:80/metrics", "auto", None)]


def test_an_invalid_targets_file_at_start_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "sd.yaml"
    path.write_text("- targets: ['127.0.0.1:9']\n  labels: {engine: vllm}\n")
    proc = _start(["exporter", "engine", "--targets", str(path), "--port", str(free_port_block(1))])
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, (out, err)
    assert err.strip().splitlines() == [f"goodput: error: {path}: [0].labels.deployment: is required (a string)"], err


def test_a_reload_keeps_the_state_of_unchanged_targets_and_starts_new_ones_down(tmp_path, engine):
    from goodput.exporters.engine import EngineExporter
    from goodput.exporters.targets_file import TargetsFile

    path = tmp_path / "targets.yaml"
    a = ([engine], {"deployment": "chat", "replica": "a", "__metrics_path__": "/a"})
    _write(path, _sd(a))
    exp = EngineExporter(TargetsFile(path).targets, targets_file=TargetsFile(path), timeout_s=5)
    exp.scrape_once()
    path.touch()  # a new mtime, the same content: nothing reloads
    assert exp.targets_file.poll() is None and exp.targets_file.rejected is None
    _write(path, _sd(a, ([engine], {"deployment": "chat", "replica": "b", "__metrics_path__": "/b"})))
    exp.set_targets(exp.targets_file.poll())
    text = exp.render()  # before any scrape of the new set
    assert 'llm_engine_up{model="Llama-3.1-8B",deployment="chat",replica="a"} 1.0' in text
    assert 'replica="b"} 0.0' in text and text.count('llm_requests_running{') == 1
