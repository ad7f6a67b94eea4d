"""The live fleet's admin API: list, lose and add replicas over HTTP; loopback peers only, same-origin JSON requests
only (a web page in headless Chromium on another origin cannot drive it), known Host names only, or a token."""

from __future__ import annotations

import asyncio
import http.server
import json
import signal
import socket
import threading
import time
from unittest import mock

import httpx
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from goodput.cli import main
from goodput.simulator.admin_api import is_loopback, make_admin_app
from goodput.simulator.live import LiveFleet
from tests.conftest import REPO, fleet_serve, free_port_block, make_fleet, needs

JSON = {"Content-Type": "application/json"}
GEN = {"model": "Llama-3.1-8B", "prompt": "hello", "max_tokens": 4000, "ignore_eos": True, "stream": True}


@pytest.fixture
def fleet(tmp_path):
    base = free_port_block(4, below_ephemeral=True)  # two replicas, one added later, the admin port
    lf = LiveFleet(make_fleet(), base_port=base, traffic=0, targets=tmp_path / "targets.yaml", admin_port=base + 3)
    lf.start()
    yield lf, base, tmp_path
    lf.close()


def test_lose_and_add_replicas_through_the_admin_api(fleet):
    lf, base, tmp = fleet
    admin = f"http://127.0.0.1:{base + 3}/admin/replicas"
    with httpx.Client(timeout=30, headers=JSON) as c:
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
    with httpx.Client(timeout=30, headers=JSON) as c:
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
    with socket.socket() as taken, httpx.Client(timeout=30, headers=JSON) as c:
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
    base = free_port_block(9, below_ephemeral=True)  # the example fleet's 8 replicas and the admin port
    with fleet_serve(tmp_path, base, "--admin-port", str(base + 8)) as (proc, lines):
        assert any(f"admin API (loopback peers only): http://127.0.0.1:{base + 8}/admin/replicas" in ln for ln in lines)
        listed = httpx.get(f"http://127.0.0.1:{base + 8}/admin/replicas", timeout=30).json()["replicas"]
        assert len(listed) == 8 and all(r["alive"] for r in listed)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0 and "Traceback" not in err, err


def test_a_bad_admin_port_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["fleet", "serve", str(REPO / "examples" / "fleet.yaml"), "--admin-port", "70000"])
    assert e.value.code == 2 and "--admin-port: must be a port in 1..65535" in capsys.readouterr().err


@pytest.mark.parametrize(("peer", "status"), [("192.0.2.2", 403), ("10.1.2.3", 403), ("127.0.0.1", 200)])
def test_a_peer_that_is_not_loopback_is_refused_before_any_handler_runs(fleet, peer, status):
    """In process, with the peer address the server would see: connecting from a non-loopback address for real
    would send traffic off the loopback range, which tests here never do."""
    lf, _, _ = fleet
    app = make_admin_app(lf)
    ran = []

    async def handler(request: web.Request) -> web.StreamResponse:
        ran.append(request.remote)
        return web.json_response({})

    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda key, default=None: (peer, 40000) if key == "peername" else default
    request = make_mocked_request("POST", "/admin/replicas/chat/lose", app=app, transport=transport,
                                  headers={"Host": "127.0.0.1", **JSON})
    response = asyncio.run(app.middlewares[0](request, handler))
    assert response.status == status
    assert ran == ([] if status == 403 else [peer])
    if status == 403:
        assert "loopback peers only" in json.loads(response.body)["error"]["message"]
    assert all(r["alive"] for r in lf.replicas()), "a refused request changed the fleet"


@pytest.mark.parametrize(("peer", "ok"), [("127.0.0.1", True), ("127.9.8.7", True), ("::1", True),
                                          ("::ffff:127.0.0.1", True), ("192.0.2.2", False), ("::ffff:10.0.0.1", False),
                                          ("fd00::2", False), ("", False), (None, False), ("localhost", False)])
def test_loopback_peers(peer, ok):
    assert is_loopback(peer) is ok


def _alive(lf) -> list[bool]:
    return [r["alive"] for r in lf.replicas()]


@pytest.mark.parametrize(("headers", "status", "says"), [
    ({"Origin": "http://evil.example"}, 403, "cross-origin"),
    ({"Origin": "http://127.0.0.1:1"}, 403, "cross-origin"),  # another port on this machine is another origin
    ({"Host": "evil.example"}, 403, "is not this admin API"),  # DNS rebinding: evil.example -> 127.0.0.1
    ({"Host": "127.0.0.1:1"}, 403, "is not this admin API"),
    ({"Content-Type": "text/plain"}, 415, "application/json"),  # what a no-cors page may send
    ({"Content-Type": "application/x-www-form-urlencoded"}, 415, "application/json"),  # a plain HTML form
])
def test_requests_a_web_page_could_send_are_refused_and_change_nothing(fleet, headers, status, says):
    lf, base, _ = fleet
    r = httpx.post(f"http://127.0.0.1:{base + 3}/admin/replicas/chat/lose", headers=JSON | headers, timeout=30)
    assert r.status_code == status and says in r.json()["error"]["message"], r.text
    assert _alive(lf) == [True, True]
    same = {"Origin": f"http://localhost:{base + 3}", "Host": f"localhost:{base + 3}"}
    for h in ({}, same):  # its own origin, or a loopback name, and JSON: answered
        assert httpx.get(f"http://127.0.0.1:{base + 3}/admin/replicas", headers=h, timeout=30).status_code == 200


@needs("chromium")
def test_a_page_on_another_origin_cannot_lose_replicas_from_headless_chromium(fleet):
    playwright = pytest.importorskip("playwright.sync_api")
    lf, base, _ = fleet
    admin = f"http://127.0.0.1:{base + 3}/admin/replicas"
    page_port = free_port_block(1)
    html = f"""<!doctype html><title>not the fleet</title><script>
      window.done = (async () => {{
        const sent = [];
        for (const verb of ["lose", "lose"]) {{
          for (const init of [{{method: "POST", mode: "no-cors"}},
                              {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}}, body: "{{}}"}},
                              {{method: "POST", headers: {{"Content-Type": "application/json"}}, body: "{{}}"}}]) {{
            try {{ await fetch("{admin}/chat/" + verb, init); sent.push("sent"); }}
            catch (e) {{ sent.push("blocked: " + e); }}
          }}
        }}
        return sent;
      }})();
    </script>""".encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(html)))
            self.end_headers()
            self.wfile.write(html)

        def log_message(self, *args):
            pass

    page_server = http.server.ThreadingHTTPServer(("127.0.0.1", page_port), Page)
    threading.Thread(target=page_server.serve_forever, daemon=True).start()
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                        args=["--no-sandbox", "--disable-gpu", "--headless"])
            try:
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{page_port}/", timeout=30_000)
                sent = page.evaluate("window.done")
            finally:
                browser.close()
    finally:
        page_server.shutdown()
        page_server.server_close()
    assert sent.count("sent") >= 4, sent  # the no-cors requests did reach the API (opaque answers)
    assert _alive(lf) == [True, True], "a page on another origin lost replicas"


def test_a_token_admits_any_peer_that_sends_it_and_refuses_others(tmp_path):
    base = free_port_block(3)
    lf = LiveFleet(make_fleet(), base_port=base, traffic=0, targets=tmp_path / "targets.yaml", admin_port=base + 2,
                   admin_token="s3cret")
    lf.start()
    try:
        url = f"http://127.0.0.1:{base + 2}/admin/replicas"
        assert httpx.get(url, timeout=30).status_code == 401
        assert httpx.get(url, headers={"Authorization": "Bearer wrong"}, timeout=30).status_code == 401
        ok = httpx.get(url, headers={"Authorization": "Bearer s3cret", "Host": "fleet.internal"}, timeout=30)
        assert ok.status_code == 200, ok.text  # with a token, any name the fleet is reached by
        assert _alive(lf) == [True, True]
    finally:
        lf.close()


def test_fleet_serve_on_a_non_loopback_address_without_a_token_is_one_line(capsys, monkeypatch):
    monkeypatch.delenv("GOODPUT_ADMIN_TOKEN", raising=False)
    code = main(["fleet", "serve", str(REPO / "examples" / "fleet.yaml"), "--host", "0.0.0.0", "--admin-port", "9"])
    err = capsys.readouterr().err
    assert code == 2 and "needs a token" in err and err.count("\n") == 1, err
