"""The pages against hostile sources: a real HTTP server on loopback that answers as Prometheus and Alertmanager
with the wrong shapes (not a list, not a mapping, NaN values, JSON nested past the recursion limit, errors), and a
releases file whose names are markdown and HTML. Every page shows a banner or the text, never an exception and
never markup from data."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from goodput.foundation.http import Server
from tests.conftest import free_port_block
from tests.console.test_pages import app, no_exception, show

NESTED = "[" * 50_000 + "]" * 50_000
NOW = 1.0e9


def vector(value: str) -> str:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"deployment": "batch-32b-a100", "tier": "P2"}, "value": [NOW, value]},
        {"metric": {"tier": "P2"}, "value": [NOW, "1"]}]}})  # a series without the deployment label


def matrix(value: str) -> str:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"deployment": "batch-32b-a100"}, "values": [[NOW, value], [NOW + 15, value]]}]}})


OK_ALERTS = "[]"
# case -> (status, Prometheus instant body, range body, Alertmanager alerts body, silences body)
CASES = {
    "alerts not a list": (200, vector("1"), matrix("1"), json.dumps({"data": []}), "{}"),
    "alerts of strings": (200, vector("1"), matrix("1"), '["x", 1]', '["x"]'),
    "labels not a mapping": (200, vector("1"), matrix("1"), '[{"labels": "x", "annotations": []}]',
                             '[{"status": {}, "matchers": "x"}]'),
    "NaN values": (200, vector("NaN"), matrix("NaN"), OK_ALERTS, "[]"),
    "nested JSON": (200, NESTED, NESTED, NESTED, NESTED),
    "Prometheus error": (422, json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}),
                         json.dumps({"status": "error", "error": "boom"}), "<html>not json</html>", ""),
}


@pytest.fixture(scope="module")
def hostile():
    """One loopback server answering both APIs; ``answer`` says with what."""
    answer: dict[str, tuple] = {"case": CASES["alerts not a list"]}

    def route(index: int):
        def handle(h, body):
            case = answer["case"]
            status = case[0] if index < 3 else 200
            return status, "application/json", case[index].encode(), {}
        return handle

    routes = {("GET", "/api/v1/query"): route(1), ("GET", "/api/v1/query_range"): route(2),
              ("GET", "/api/v2/alerts"): route(3), ("GET", "/api/v2/silences"): route(4)}
    server = Server("127.0.0.1", free_port_block(1), routes)
    server.start()
    try:
        yield server.url, answer
    finally:
        server.stop()


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_answer_is_a_banner_on_every_page_that_reads_it(monkeypatch, store, hostile, case):
    url, answer = hostile
    answer["case"] = CASES[case]
    at = app(monkeypatch, store / "db.duckdb", url, url, range="all")
    for path in ("overview", "capacity", "kv"):  # instant queries and both APIs; range queries (charts, markers)
        show(at, path)
        no_exception(at)
        if path == "overview" and case != "NaN values":
            banners = [w.value for w in at.warning if "unreachable" in w.value]
            assert banners, (case, [w.value for w in at.warning])
    if case == "NaN values":  # NaN is no figure: the what-if assumes a demand rather than multiply a NaN
        assert any("no live demand; assumed" in c.value for c in show(at, "capacity").caption)


UNSAFE = re.compile(r"(?<!\\)(!\[|<img|<a |\]\(http)")  # unescaped markdown image or link, HTML


def test_names_from_data_are_text_never_markdown_or_html(monkeypatch, store, tmp_path):
    """A release whose versions are markdown (an image that fetches a URL) and HTML reaches every banner, table and
    chart as text."""
    rel = yaml.safe_load((store / "releases.yaml").read_text())
    rel[0]["to"] = "![x](http://127.0.0.1:9/px.png)<img src=http://127.0.0.1:9/i.png>"
    rel[0]["note"] = "<a href='http://127.0.0.1:9/'>**click**</a>"
    (tmp_path / "releases.yaml").write_text(yaml.safe_dump(rel))
    at = app(monkeypatch, store / "db.duckdb", releases=tmp_path / "releases.yaml", range="all", deployment="rag")
    seen = 0
    for path in ("releases", "workload", "kv", "overview", "latency"):
        show(at, path)
        no_exception(at)
        texts = [e.value for kind in ("markdown", "error", "warning", "info", "success", "caption")
                 for e in getattr(at, kind)]
        assert not [t for t in texts if UNSAFE.search(t)], (path, [t for t in texts if UNSAFE.search(t)])
        charts = [json.dumps(c.proto.spec) if hasattr(c.proto, "spec") else str(c.proto) for c in at.get("plotly_chart")]
        assert not [c for c in charts if "<img" in c or "<a " in c], path
        seen += sum("px.png" in t for t in texts) + sum("px.png" in c for c in charts)
    assert seen >= 2, "the hostile release was shown nowhere, so this test tested nothing"
