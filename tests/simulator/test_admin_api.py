"""The live fleet's admin API: list, lose and add replicas over HTTP, loopback peers only."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from goodput.cli import main
from simulator.admin_api import is_loopback, make_admin_app
from simulator.live import LiveFleet
from tests.conftest import REPO, free_port_block, make_fleet

GEN = {"model": "Llama-3.1-8B", "prompt": "hello", "max_tokens": 4000, "ignore_eos": True, "stream": True}


@pytest.fixture
def fleet(tmp_path):
    base = free_port_block(4)  # two replicas, one added, the admin port
    lf = LiveFleet(make_fleet(), base_port=base, traffic=0, targets=tmp_path / "targets.yaml", admin_port=base + 3)
    lf.start()
    yield lf, base, tmp_path
    lf.close()


def test_lose_and_add_replicas_through_the_admin_api(fleet):
    lf, base, tmp = fleet
    admin = f"http://127.0.0.1:{base + 3}/admin/replicas"
    with httpx.Client(timeout=30) as c:
        listed = c.get(admin).json()["replicas"]
        assert [(r["name"], r["url"], r["alive"]) for r in listed] == [
            ("chat-0", f"http://127.0.0.1:{base}", True), ("chat-1", f"http://127.0.0.1:{base + 1}", True)]

        # a long stream on chat-1, cut when the replica is lost (the default: the highest-numbered alive one)
        with c.stream("POST", f"http://127.0.0.1:{base + 1}/v1/completions", json=GEN) as stream:
            lines = stream.iter_lines()
            assert next(line for line in lines if line.startswith("data: {")), "the stream never started"
            lost = c.post(f"{admin.removesuffix('/replicas')}/replicas/chat/lose")
            assert lost.status_code == 200, lost.text
            assert lost.json()["name"] == "chat-1" and lost.json()["alive"] is False
            events = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
        assert events[-1]["choices"][0]["finish_reason"] == "abort", "the lost replica's stream did not end as aborted"
        with pytest.raises(httpx.ConnectError):
            c.get(f"http://127.0.0.1:{base + 1}/health")
        assert c.get(f"http://127.0.0.1:{base}/health").status_code == 200

        added = c.post(f"{admin}/chat/add")
        assert added.status_code == 200, added.text
        assert added.json()["name"] == "chat-2" and added.json()["url"] == f"http://127.0.0.1:{base + 2}"
        done = c.post(f"http://127.0.0.1:{base + 2}/v1/completions", json=GEN | {"stream": False, "max_tokens": 8})
        assert done.status_code == 200 and done.json()["usage"]["completion_tokens"] == 8
        assert [(r["name"], r["alive"]) for r in c.get(admin).json()["replicas"]] == [
            ("chat-0", True), ("chat-1", False), ("chat-2", True)]
    targets = yaml.safe_load((tmp / "targets.yaml").read_text())["targets"]
    assert [t["replica"] for t in targets] == ["chat-0", "chat-1", "chat-2"]


def test_bad_admin_requests_are_answered_and_the_fleet_keeps_serving(fleet):
    lf, base, _ = fleet
    admin = f"http://127.0.0.1:{base + 3}/admin/replicas"
    with httpx.Client(timeout=30) as c:
        assert c.post(f"{admin}/nope/lose").status_code == 404
        assert "no deployment 'nope'" in c.post(f"{admin}/nope/add").json()["error"]["message"]
        assert c.post(f"{admin}/chat/lose", params={"replica": "x"}).status_code == 400
        assert c.post(f"{admin}/chat/add", params={"cold_start_s": "-1"}).status_code == 400
        assert c.post(f"{admin}/chat/lose", params={"replica": "0"}).status_code == 200
        again = c.post(f"{admin}/chat/lose", params={"replica": "0"})
        assert again.status_code == 409 and "not alive" in again.json()["error"]["message"]
        assert c.post(f"{admin}/chat/lose", params={"replica": "7"}).status_code == 409
        assert c.get(admin).status_code == 200
        assert c.get(f"http://127.0.0.1:{base + 1}/health").status_code == 200


def test_a_new_replica_whose_port_is_taken_is_refused_and_the_fleet_serves_on(fleet):
    lf, base, _ = fleet
    admin = f"http://127.0.0.1:{base + 3}/admin/replicas"
    with socket.socket() as taken, httpx.Client(timeout=30) as c:
        taken.bind(("127.0.0.1", base + 2))
        taken.listen()
        now = c.post(f"{admin}/chat/add")
        assert now.status_code == 409 and f"127.0.0.1:{base + 2}: cannot listen" in now.json()["error"]["message"]
        # chat-3 would listen on base + 3, the admin port, once its cold start is over: in the engine thread
        later = c.post(f"{admin}/chat/add", params={"cold_start_s": "0.2"})
        assert later.status_code == 200 and later.json()["name"] == "chat-3", later.text
        deadline = time.monotonic() + 30
        while not (listed := {r["name"]: r for r in c.get(admin).json()["replicas"]})["chat-3"]["error"]:
            assert time.monotonic() < deadline, f"chat-3 neither served nor failed: {listed['chat-3']}"
            time.sleep(0.05)
        assert "cannot listen" in listed["chat-3"]["error"]
        done = c.post(f"http://127.0.0.1:{base}/v1/completions", json=GEN | {"stream": False, "max_tokens": 4})
        assert done.status_code == 200, "the engine stopped after a replica could not listen"


def test_fleet_serve_admin_port(tmp_path):
    base = free_port_block(9)  # the example fleet's 8 replicas and the admin port
    exe = Path(sys.executable).with_name("goodput")
    proc = subprocess.Popen([str(exe), "fleet", "serve", str(REPO / "examples" / "fleet.yaml"), "--base-port", str(base),
                             "--targets", str(tmp_path / "targets.yaml"), "--traffic", "0", "--admin-port", str(base + 8)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        lines = []
        deadline = time.monotonic() + 60
        while not any("Ctrl-C to stop." in ln for ln in lines):
            assert time.monotonic() < deadline and proc.poll() is None, f"fleet serve did not start: {lines}"
            lines.append(proc.stdout.readline())
        assert any(f"admin API (loopback peers only): http://127.0.0.1:{base + 8}/admin/replicas" in ln for ln in lines)
        listed = httpx.get(f"http://127.0.0.1:{base + 8}/admin/replicas", timeout=30).json()["replicas"]
        assert len(listed) == 8 and all(r["alive"] for r in listed)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0 and "Traceback" not in err, err


def test_a_bad_admin_port_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["fleet", "serve", str(REPO / "examples" / "fleet.yaml"), "--admin-port", "70000"])
    assert e.value.code == 2 and "--admin-port: must be a TCP port" in capsys.readouterr().err


def _non_loopback_address() -> str | None:
    """The address this machine would send from off-host (a UDP connect sends nothing), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 9))
        except OSError:
            return None
        addr = s.getsockname()[0]
    return None if is_loopback(addr) or addr == "0.0.0.0" else addr


def test_a_peer_that_is_not_this_machines_loopback_is_refused(fleet):
    lf, _, _ = fleet
    addr = _non_loopback_address()
    if addr is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    port = free_port_block(1)
    lf.http.add(make_admin_app(lf), "0.0.0.0", port)  # reachable from outside, as with fleet serve --host 0.0.0.0
    with httpx.Client(timeout=30) as c:
        refused = c.post(f"http://{addr}:{port}/admin/replicas/chat/lose")
        assert refused.status_code == 403 and "loopback peers only" in refused.json()["error"]["message"]
        assert c.get(f"http://127.0.0.1:{port}/admin/replicas").status_code == 200
    assert all(r["alive"] for r in lf.replicas()), "a refused request changed the fleet"


@pytest.mark.parametrize(("peer", "ok"), [("127.0.0.1", True), ("127.9.8.7", True), ("::1", True),
                                          ("::ffff:127.0.0.1", True), ("192.0.2.2", False), ("::ffff:10.0.0.1", False),
                                          ("fd00::2", False), ("", False), (None, False), ("localhost", False)])
def test_loopback_peers(peer, ok):
    assert is_loopback(peer) is ok
