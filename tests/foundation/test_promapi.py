"""The one Prometheus API client against servers that are and are not Prometheus (real sockets, http.server in a
thread): each answer it cannot use is one error of the right kind, one line naming the server and the query; both
transports (sync ``Client``, async ``run_queries``) behave alike."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest

from goodput.foundation.promapi import (
    MAX_POINTS,
    Alertmanager,
    Client,
    Malformed,
    PromError,
    Query,
    Refused,
    Unreachable,
    request,
    run_queries,
)

J = "application/json"
MALFORMED = {
    "not json": (200, J, b"{not json"),
    "a json list": (200, J, b"[1, 2]"),
    "no data": (200, J, b'{"status": "success"}'),
    "a series without values": (200, J, b'{"status": "success", "data": {"resultType": "matrix", '
                                         b'"result": [{"metric": {}}]}}'),
    "a value that is not a number": (200, J, b'{"status": "success", "data": {"resultType": "matrix", '
                                              b'"result": [{"metric": {}, "values": [[1, "x"]]}]}}'),
    "a string result": (200, J, b'{"status": "success", "data": {"resultType": "string", "result": [1, "a"]}}'),
}
REFUSED = {
    "an error page": (502, "text/html", b"<html>bad\ngateway</html>"),
    "prometheus' own error": (400, J, b'{"status": "error", "errorType": "bad_data", '
                                      b'"error": "1:5: parse error: unexpected end of input"}'),
}
QUERY = Query("demand", "sum(up)", 0.0, 600.0, 60.0)


@contextmanager
def serving(status: int, ctype: str, body: bytes, seen: list | None = None,
            headers: list | None = None) -> Iterator[str]:
    """A server answering every request with ``body``; ``seen`` gets (method, path, form) of each request,
    ``headers`` its headers (names lower-cased)."""
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            path, _, query = self.path.partition("?")
            form = self.rfile.read(int(self.headers.get("content-length", 0))).decode() or query
            if seen is not None:
                seen.append((self.command, path, {k: v[0] for k, v in parse_qs(form).items()}))
            if headers is not None:
                headers.append({k.lower(): v for k, v in self.headers.items()})
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer  # http.server's names

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _sync(url: str, q: Query):
    with Client(url) as c:
        return c.run(q)


def _async(url: str, q: Query):
    return run_queries(url, [q])[q.key]


TRANSPORTS = pytest.mark.parametrize("ask", [_sync, _async], ids=["sync", "async"])


@TRANSPORTS
@pytest.mark.parametrize("answer", sorted(MALFORMED))
def test_an_answer_that_is_not_prometheus_is_malformed_naming_server_and_query(ask, answer):
    with serving(*MALFORMED[answer]) as url, pytest.raises(Malformed) as e:
        ask(url, QUERY)
    assert (e.value.url, e.value.query) == (url, "demand")
    assert str(e.value).startswith(f"{url}: demand: not a Prometheus answer (") and "\n" not in str(e.value)


@TRANSPORTS
@pytest.mark.parametrize("answer", sorted(REFUSED))
def test_an_http_error_is_refused_with_prometheus_error_text(ask, answer):
    with serving(*REFUSED[answer]) as url, pytest.raises(Refused) as e:
        ask(url, QUERY)
    status = REFUSED[answer][0]
    assert e.value.status == status and f"{url}: demand: query refused (HTTP {status}): " in str(e.value)
    assert ("parse error: unexpected end of input" if status == 400 else "<html>bad gateway</html>") in str(e.value)
    assert "\n" not in str(e.value)


@TRANSPORTS
def test_a_connection_reset_mid_answer_is_unreachable_naming_the_url(ask):
    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"

    def reset() -> None:
        for _ in range(3):  # httpx may retry once on a fresh connection
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            conn.close()

    threading.Thread(target=reset, daemon=True).start()
    try:
        with pytest.raises(Unreachable) as e:
            ask(url, QUERY)
    finally:
        listener.close()
    assert str(e.value).startswith(f"{url}: demand: cannot reach Prometheus (") and "\n" not in str(e.value)


def test_nothing_listening_is_unreachable():
    with socket.create_server(("127.0.0.1", 0)) as s:
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(Unreachable, match="ConnectError"):
        _sync(url, QUERY)


@TRANSPORTS
def test_vector_matrix_and_scalar_answers_parse_into_series(ask):
    matrix = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"deployment": "chat"}, "values": [[60, "1.5"], [120, "NaN"], [180, "+Inf"]]}]}}
    seen: list = []
    with serving(200, J, json.dumps(matrix).encode(), seen) as url:
        (s,) = ask(url, QUERY)
    assert s.labels == {"deployment": "chat"} and s.times == [60.0, 120.0, 180.0]
    assert s.values[0] == 1.5 and s.values[1] != s.values[1] and s.values[2] == float("inf")  # as given
    method, path, form = seen[0]
    assert (method, path) == ("GET" if ask is _sync else "POST", "/api/v1/query_range")
    assert form == {"query": "sum(up)", "start": "0.000", "end": "600.000", "step": "60", "nocache": "1"}
    vector = {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [7, "2"]}]}}
    scalar = {"status": "success", "data": {"resultType": "scalar", "result": [7, "3"]}}
    for body, want in ((vector, 2.0), (scalar, 3.0)):
        seen.clear()
        with serving(200, J, json.dumps(body).encode(), seen) as url:
            (s,) = ask(url, Query("now", "x", 7.0, 7.0))
        assert s.times == [7.0] and s.values == [want] and seen[0][1] == "/api/v1/query"
        assert seen[0][2] == {"query": "x", "time": "7.000"}


def test_a_long_range_widens_its_step_under_the_points_limit():
    _, params = request(Query("k", "up", 0.0, 28 * 86400.0, 15.0))
    assert 28 * 86400 / float(params["step"]) <= MAX_POINTS
    assert request(Query("k", "up", 0.0, 3600.0, 60.0))[1]["step"] == "60"


def test_every_kind_is_a_prom_error_and_get_json_reads_other_apis():
    assert issubclass(Unreachable, PromError) and issubclass(Refused, PromError) and issubclass(Malformed, PromError)
    with serving(200, J, b'[{"labels": {"alertname": "A"}}]') as url, Client(url) as c:
        assert c.get_json("/api/v2/alerts", {"active": "true"}) == [{"labels": {"alertname": "A"}}]


def test_alertmanager_reads_active_alerts_and_silences_as_mappings_of_strings():
    alerts = [{"labels": {"alertname": "A", "severity": "page", "replicas": 2}, "annotations": {}, "startsAt": "t"}]
    seen: list = []
    with serving(200, J, json.dumps(alerts).encode(), seen) as url:
        got = Alertmanager(url + "/").alerts('severity="page"')
    assert got == [{"labels": {"alertname": "A", "severity": "page", "replicas": "2"}, "annotations": {},
                    "startsAt": "t"}]
    assert seen == [("GET", "/api/v2/alerts", {"active": "true", "silenced": "false", "inhibited": "false",
                                               "filter": 'severity="page"'})]
    silences = [{"status": {"state": "active"}, "matchers": [{"name": "deployment", "value": "chat"}]}]
    with serving(200, J, json.dumps(silences).encode(), seen) as url:
        assert Alertmanager(url).silences() == silences and seen[-1][1] == "/api/v2/silences"


def test_alertmanager_errors_name_alertmanager_and_its_url():
    with socket.create_server(("127.0.0.1", 0)) as s:
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(Unreachable) as e:
        Alertmanager(url).alerts()
    assert e.value.server == "Alertmanager" and str(e.value).startswith(f"{url}: alerts: cannot reach Alertmanager (")
    for body, why in ((b'{"data": []}', "answered dict, not a list of alerts"),
                      (b'[{"labels": "x"}]', "labels is a str, not a mapping"), (b"<html>", "not valid JSON")):
        with serving(200, J, body) as url, pytest.raises(Malformed) as e:
            Alertmanager(url).alerts()
        assert str(e.value).startswith(f"{url}: alerts: not an Alertmanager answer (") and why in str(e.value)
