"""Each banner names the server that failed: with Prometheus answering and Alertmanager down (or answering as
something else), the Overview's banners say Alertmanager, its URL and why, and none says Prometheus. Before: the
console's Alertmanager banner said "cannot reach Prometheus"."""

from __future__ import annotations

import json

import pytest

from goodput.console.prom import Alertmanager
from goodput.foundation.http import Server
from goodput.foundation.promapi import PromError
from tests.conftest import free_port_block
from tests.console.test_pages import app, no_exception, show, unescape

EMPTY = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
EMPTY_RANGE = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()


@pytest.fixture(scope="module")
def servers():
    """(Prometheus answering empty, an 'Alertmanager' answering HTML, a port where nothing listens)."""
    prom = Server("127.0.0.1", free_port_block(1), {
        ("GET", "/api/v1/query"): lambda h, b: (200, "application/json", EMPTY, {}),
        ("GET", "/api/v1/query_range"): lambda h, b: (200, "application/json", EMPTY_RANGE, {})})
    html = Server("127.0.0.1", free_port_block(1), {
        ("GET", "/api/v2/alerts"): lambda h, b: (200, "text/html", b"<html>a proxy's login page</html>", {}),
        ("GET", "/api/v2/silences"): lambda h, b: (200, "text/html", b"<html>a proxy's login page</html>", {})})
    prom.start()
    html.start()
    try:
        yield prom.url, html.url, f"http://127.0.0.1:{free_port_block(1)}"
    finally:
        prom.stop()
        html.stop()


@pytest.mark.parametrize("which", ["down", "html"])
def test_the_alertmanager_banner_names_alertmanager(monkeypatch, store, servers, which):
    prom, html, dead = servers
    am = dead if which == "down" else html
    for call in (Alertmanager(am).alerts, Alertmanager(am).silences):
        with pytest.raises(PromError) as e:
            call()
        assert e.value.url == am and "Alertmanager" in str(e.value) and "Prometheus" not in str(e.value)
    at = show(app(monkeypatch, store / "db.duckdb", prom, am, range="all"), "overview")
    no_exception(at)
    banners = [unescape(w.value) for w in at.warning if "unreachable" in w.value]
    assert len(banners) == 2, banners  # the firing alerts and the silences, each once
    for b in banners:
        assert b.startswith("Alertmanager is unreachable") and am in b and "Prometheus" not in b, b
