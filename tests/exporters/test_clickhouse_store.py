"""The request exporter's ClickHouse store: the insert path on the real ClickHouse engine (chDB), the failure paths
against a real HTTP server that speaks ClickHouse's insert interface, backed by chDB, and misbehaves on cue."""

import contextlib
import itertools
import json
import signal
import subprocess
import sys
import threading
import time
import zlib
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from goodput.exporters.clickhouse_sink import INSERT_ROWS, ClickHouseSink, insert_token, parse_store
from goodput.exporters.otel_traces import TableSpec, create_table
from goodput.exporters.otlp import Span, decode_json
from goodput.exporters.requests import RequestMetrics, TraceReceiver
from goodput.exporters.trace_store import TraceStore
from goodput.foundation.clickhouse import parse_target
from goodput.foundation.http import Server
from tests.conftest import REPO, free_port_block, wait_answering

_DB = itertools.count()


def _spans(tenant: str, n: int, seed: int = 0) -> list[Span]:
    t0 = 1795424400_000_000_000
    return [Span(f"{zlib.crc32(tenant.encode()):08x}{seed:08x}{i:016x}", f"{i + 1:016x}", "", "llm.request", 2,
                 t0 + i * 10**6, t0 + i * 10**6 + 10**9 + i, 1, "", "gw",
                 {"llm.tenant": tenant, "llm.output_tokens": i}, {"service.name": "gw"}) for i in range(n)]


def _doc(spans: list[Span]) -> bytes:
    def value(v):
        return {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}

    return json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "gw"}}]}, "scopeSpans": [{"spans": [
            {"traceId": s.trace_id, "spanId": s.span_id, "name": s.name, "kind": s.kind,
             "startTimeUnixNano": str(s.start_ns), "endTimeUnixNano": str(s.end_ns), "status": {"code": 1},
             "attributes": [{"key": k, "value": value(v)} for k, v in s.attributes.items()]}
            for s in spans]}]}]}).encode()


def _unescape(text: str) -> str:
    """A query parameter as ClickHouse reads it (escaped text) back to the value."""
    out, chars = [], iter(text)
    for c in chars:
        out.append({"n": "\n", "t": "\t", "\\": "\\", "'": "'", "0": "\0"}.get(next(chars), "?") if c == "\\" else c)
    return "".join(out)


class FakeClickHouse:
    """ClickHouse's HTTP interface for inserts (statement and ``param_*`` as a multipart form, the database in the URL),
    run on the real engine (the test session's chDB, a database of its own with the Collector's table, made
    deduplicating as a user makes a plain MergeTree one). ``script`` says how each insert goes: ``ok``, ``500``
    (refused), ``reset`` (connection dropped, nothing stored), ``lost`` (stored, then the connection dropped before
    the reply), ``stall`` (no answer for ``stall_s``, nothing stored) or ``late`` (stored, then no answer for
    ``stall_s``); or it answers 200 and stores nothing: ``exception`` (an exception in its headers and body, as
    ClickHouse does when a query fails after the 200 went out), ``short`` (a summary that wrote 0 rows), ``proxy``
    (a bare 200, as a proxy that never reached ClickHouse), ``stream`` (``stream_mb`` of reply) or ``trickle`` (a
    reply a byte at a time, for ever). Once the script is used up every insert is ``ok``, answered as ClickHouse
    does (an empty body, ``X-ClickHouse-Summary`` with ``written_rows``). A SELECT is run and answered as
    JSONEachRow. ``dedup=False`` leaves the table as the Collector makes it, without a deduplication window."""

    def __init__(self, con, stall_s: float = 3.0, dedup: bool = True, stream_mb: int = 64) -> None:
        self.con, self.database = con, f"otel_fake_{next(_DB)}"
        create_table(con, TableSpec(database=self.database))
        if dedup:
            con.command(f"ALTER TABLE `{self.database}`.otel_traces MODIFY SETTING "
                        "non_replicated_deduplication_window = 1000")
        self.script: list[str] = []
        self.seen: list[tuple[str, str]] = []  # (what happened, token)
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.stall_s, self.stream_mb = stall_s, stream_mb
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (_FakeHandler,), {"fake": self}))
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"clickhouse://127.0.0.1:{self.port}/{self.database}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def span_counts(self) -> dict[tuple[str, str], int]:
        with self.lock:
            df = self.con.query_df(f"SELECT TraceId, SpanId, count() AS n FROM `{self.database}`.otel_traces "
                                   "GROUP BY TraceId, SpanId")
        return {(t, s): int(n) for t, s, n in df.itertuples(index=False)}

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


class _FakeHandler(BaseHTTPRequestHandler):
    """``FakeClickHouse``'s request handler: ``fake`` is the server it plays."""

    fake: FakeClickHouse

    def log_message(self, *a):
        pass

    def do_POST(self):
        fake = self.fake
        settings = {k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()}
        body = self.rfile.read(int(self.headers["Content-Length"]))
        form = BytesParser(policy=HTTP).parsebytes(
            f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode() + body)
        fields = {part.get_param("name", header="content-disposition"): part.get_payload(decode=True).decode()
                  for part in form.iter_parts()}
        token = _unescape(fields.get("param_token", ""))
        params = {k.removeprefix("param_"): _unescape(v) for k, v in fields.items() if k.startswith("param_")}
        if fields["query"].lstrip().startswith("SELECT"):
            self.select(fields["query"], params)
            return
        with fake.lock:
            what = fake.script.pop(0) if fake.script else "ok"
            fake.seen.append((what, token))
        if what == "stall":
            fake.release.wait(fake.stall_s)
            self.close_connection = True
            return
        if what == "500":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"Code: 242. DB::Exception: Table is in readonly mode. (TABLE_IS_READ_ONLY)\n")
            return
        if what == "reset":
            self.connection.shutdown(2)
            self.close_connection = True
            return
        if what in ("exception", "short", "proxy", "stream", "trickle"):
            self.lie(what)
            return
        assert settings["database"] == fake.database and fields["param_database"] == fake.database
        with fake.lock:  # the statement carries its own token (its SETTINGS clause)
            fake.con.command(fields["query"], params)
        if what == "late":
            fake.release.wait(fake.stall_s)
        if what in ("lost", "late"):
            self.connection.shutdown(2)
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("X-ClickHouse-Summary", json.dumps(
            {"read_rows": "0", "written_rows": str(len(params["rows"].splitlines()))}))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def select(self, sql: str, params: dict[str, str]) -> None:
        fake = self.fake
        with fake.lock:
            df = fake.con.query_df(sql.replace("FORMAT JSONEachRow", ""), params)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(df.to_json(orient="records", lines=True).encode())

    def lie(self, what: str) -> None:
        """Answer 200 to an insert that stored nothing."""
        self.send_response(200)
        if what == "exception":
            self.send_header("X-ClickHouse-Exception-Code", "252")
        if what == "short":
            self.send_header("X-ClickHouse-Summary", '{"written_rows":"0"}')
        self.end_headers()
        if what == "exception":
            self.wfile.write(b"Code: 252. DB::Exception: Too many parts (300). (TOO_MANY_PARTS)\n")
        block = b"x" * (1 << 20)
        with contextlib.suppress(OSError):  # the client hangs up: what a capped reader does
            for _ in range(self.fake.stream_mb if what == "stream" else 0):
                self.wfile.write(block)
            while what == "trickle" and not self.fake.release.wait(0.05):
                self.wfile.write(b"x")
                self.wfile.flush()
        self.close_connection = True


@pytest.fixture
def ch(chdb):
    fake = FakeClickHouse(chdb)
    yield fake
    fake.close()


def _exactly_once(ch: FakeClickHouse, spans: list[Span]) -> None:
    counts = ch.span_counts()
    assert counts == {(s.trace_id, s.span_id): 1 for s in spans}


# ---------------------------------------------------------------------------------------------- the insert path


def _chdb_target(chdb):
    """A database of its own in the test session's chDB, which the sink creates with the Collector's DDL."""
    return parse_target(f"chdb:{chdb.target.path}?database=otel_sink_{next(_DB)}", "--store")


def test_spans_become_otel_traces_rows_in_chdb(tmp_path, chdb):
    spans = _spans("acme", 5)
    target = _chdb_target(chdb)
    store = TraceStore(tmp_path / "wal", sink=ClickHouseSink(target), flush_interval_s=3600)
    doc = _doc(spans)
    store.accept(decode_json(doc), doc, "J")
    assert store.flush() == 5 and store.health() is None
    store.close()
    df = chdb.query_df(
        "SELECT TraceId, SpanId, SpanName, SpanKind, ServiceName, toUnixTimestamp64Nano(Timestamp) AS t, Duration, "
        "StatusCode, SpanAttributes['llm.tenant'] AS tenant, SpanAttributes['llm.output_tokens'] AS out, "
        "ResourceAttributes['service.name'] AS svc FROM {db:Identifier}.otel_traces ORDER BY SpanId",
        {"db": target.database})
    assert [list(r) for r in df.itertuples(index=False)] == [
        [x.trace_id, x.span_id, "llm.request", "Server", "gw", x.start_ns, x.end_ns - x.start_ns, "Ok", "acme",
         str(x.attributes["llm.output_tokens"]), "gw"] for x in spans]
    assert not list((tmp_path / "wal" / "_wal").iterdir())


def test_the_log_is_replayed_into_chdb_on_start(tmp_path, chdb):
    target = _chdb_target(chdb)
    doc = _doc(_spans("acme", 7))
    store = TraceStore(tmp_path / "wal", sink=ClickHouseSink(target), flush_interval_s=3600)
    store.accept(decode_json(doc), doc, "J")  # acknowledged, then the process dies before any flush
    del store
    again = TraceStore(tmp_path / "wal", sink=ClickHouseSink(target), flush_interval_s=3600)
    assert again.recovered == 7
    again.close()
    df = chdb.query_df("SELECT count() AS n FROM {db:Identifier}.otel_traces", {"db": target.database})
    assert int(df["n"][0]) == 7


def test_a_batch_written_again_into_the_table_the_sink_made_is_stored_once(chdb):
    """A hard kill after an insert succeeded and before the log was rewritten replays the batch: the table the sink
    creates (a plain MergeTree, as the Collector's default) remembers its inserts' tokens, so it is stored once."""
    target = _chdb_target(chdb)
    sink = ClickHouseSink(target)
    spans = [s for d in (_spans("acme", 6),) for s in decode_json(_doc(d))]
    assert sink.write(spans) == [] and sink.write(spans) == []
    df = chdb.query_df("SELECT count() AS n FROM {db:Identifier}.otel_traces", {"db": target.database})
    assert int(df["n"][0]) == 6


# ---------------------------------------------------------------------------------------------- failure paths


def _store(tmp_path, ch, **kw) -> TraceStore:
    sink = ClickHouseSink(parse_target(ch.url), insert_rows=kw.pop("insert_rows", 4), timeout_s=kw.pop("timeout_s", 0.5))
    return TraceStore(tmp_path / "wal", sink=sink, flush_interval_s=3600, **kw)


@pytest.mark.parametrize("failure", ["500", "reset", "lost", "stall", "late"])
def test_a_failed_insert_keeps_its_spans_and_the_retry_stores_each_once(tmp_path, ch, failure):
    metrics = RequestMetrics()
    store = _store(tmp_path, ch)
    recv = TraceReceiver(metrics, store)
    otlp = Server("127.0.0.1", 0, recv.routes()).start()
    first, later = _spans("acme", 10), _spans("globex", 6)
    try:
        assert httpx.post(f"{otlp.url}/v1/traces", content=_doc(first)).status_code == 200
        ch.script = ["ok", failure]  # the first insert of 4 lands, the second fails
        assert store.flush() == 4
        r = httpx.get(f"{otlp.url}/healthz")
        assert r.status_code == 503 and f"{ch.url}?table=otel_traces" in r.text
        assert store.buffered == 6 and list((tmp_path / "wal" / "_wal").glob("*.wal"))
        assert 'llm_exporter_store_write_errors_total{exporter="requests",sink="clickhouse"} 1.0' in metrics.render(store)
        assert httpx.post(f"{otlp.url}/v1/traces", content=_doc(later)).status_code == 200  # arrives meanwhile
        assert store.flush() == 12
        assert httpx.get(f"{otlp.url}/healthz").status_code == 200
    finally:
        otlp.stop()
        store.close()
    _exactly_once(ch, first + later)
    tokens = [t for _, t in ch.seen]
    assert tokens[1] == tokens[2]  # the retry is the same insert, so a lost reply is deduplicated
    assert not list((tmp_path / "wal" / "_wal").iterdir())


def test_a_lost_reply_before_a_restart_is_still_recognised(tmp_path, ch):
    """The log is rewritten after a failed write, so the next start retries the very insert whose reply was lost,
    not a batch cut afresh from every logged payload (which would straddle two flushes and store some spans twice)."""
    a, b = _spans("acme", 10), _spans("globex", 6)
    store = _store(tmp_path, ch)
    ch.script = ["ok", "500"]
    store.accept(a, _doc(a), "J")
    assert store.flush() == 4  # a[4:] waits for a retry
    store.accept(b, _doc(b), "J")
    ch.script = ["ok", "ok", "lost"]
    assert store.flush() == 6  # the rest of a is stored, b's first insert is stored but its reply is lost
    ch.script = ["500"]
    store.close()  # ClickHouse refuses the last flush: b stays in the log
    assert store.error is not None
    again = _store(tmp_path, ch)
    assert again.recovered == 6
    again.close()
    _exactly_once(ch, a + b)


def test_a_payload_logged_twice_is_replayed_once(tmp_path, ch):
    """A sender that retried after its answer was lost, past the receiver's de-dup window: one log, two copies."""
    spans = _spans("acme", 5)
    store = _store(tmp_path, ch)
    for _ in range(2):
        store.accept(decode_json(_doc(spans)), _doc(spans), "J")
    del store  # the process dies before any flush
    again = _store(tmp_path, ch)
    assert again.recovered == 5
    again.close()
    _exactly_once(ch, spans)


def test_without_the_token_a_lost_reply_would_store_spans_twice(tmp_path, ch):
    """What the token is for: the same rows inserted again under another token are stored again."""
    store = _store(tmp_path, ch)
    spans = _spans("acme", 4)
    ch.script = ["lost"]
    store.accept(spans, b"{}", "J")
    assert store.flush() == 0
    store.sink.write = lambda rows, real=store.sink.write: real(rows[::-1])  # same spans, another insert
    assert store.flush() == 4
    store.close()
    assert set(ch.span_counts().values()) == {2}


def test_a_full_buffer_while_clickhouse_is_down_answers_503_and_loses_nothing(tmp_path, ch):
    store = _store(tmp_path, ch, max_buffered_spans=8)
    recv = TraceReceiver(RequestMetrics(), store)
    otlp = Server("127.0.0.1", 0, recv.routes()).start()
    acked: list[Span] = []
    try:
        ch.script = ["500"] * 4
        for seed in range(4):
            spans = _spans("acme", 4, seed)
            r = httpx.post(f"{otlp.url}/v1/traces", content=_doc(spans))
            if r.status_code == 200:
                acked += spans
            else:
                assert r.status_code == 503 and r.headers["Retry-After"]
            store.flush()
        assert len(acked) == 8 and store.health() is not None
        while store.buffered:
            store.flush()
    finally:
        otlp.stop()
        store.close()
    _exactly_once(ch, acked)


def test_clickhouse_unreachable_at_shutdown_leaves_the_log_for_the_next_start(tmp_path, ch):
    port = free_port_block(1)  # nothing listens here
    dead = parse_target(f"clickhouse://127.0.0.1:{port}/{ch.database}")
    store = TraceStore(tmp_path / "wal", sink=ClickHouseSink(dead, timeout_s=0.5), flush_interval_s=3600)
    spans = _spans("acme", 9)
    doc = _doc(spans)
    store.accept(decode_json(doc), doc, "J")
    store.close()
    assert "Connection refused" in (store.error or "") and list((tmp_path / "wal" / "_wal").glob("*.wal"))
    again = _store(tmp_path, ch)
    assert again.recovered == 9
    again.close()
    _exactly_once(ch, spans)
    assert not list((tmp_path / "wal" / "_wal").iterdir())


def test_the_token_names_the_spans_in_order():
    a, b = _spans("acme", 3), _spans("acme", 3, seed=1)
    assert insert_token(a) == insert_token(list(a)) != insert_token(b)
    assert insert_token(a) != insert_token(a[::-1])


def test_sigterm_under_load_stores_every_acknowledged_span_once(tmp_path, ch):
    port, otlp = free_port_block(1), free_port_block(1)
    ch.script = ["500", "lost"]  # the exporter starts against a ClickHouse that fails, then recovers
    p = subprocess.Popen([sys.executable, "-m", "goodput", "exporter", "requests",
                          "--store", ch.url, "--wal", str(tmp_path / "wal"),
                          "--port", str(port), "--otlp-port", str(otlp), "--flush-interval", "0.2"],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked: list[Span] = []
    try:
        wait_answering(f"http://127.0.0.1:{otlp}/healthz", 30)
        stop = threading.Event()

        def load():
            seed = 0
            while not stop.is_set():
                spans = _spans("acme", 50, seed)
                seed += 1
                try:
                    if httpx.post(f"http://127.0.0.1:{otlp}/v1/traces", content=_doc(spans)).status_code == 200:
                        acked.extend(spans)
                except httpx.HTTPError:
                    pass  # the exporter has stopped listening: not acknowledged

        t = threading.Thread(target=load)
        t.start()
        while len(acked) < 500 and t.is_alive():
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)  # under load
        out, err = p.communicate(timeout=60)
        stop.set()
        t.join(30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert "stopped" in out, err
    _store(tmp_path, ch, insert_rows=INSERT_ROWS).close()  # the next start replays what the last flush could not store
    _exactly_once(ch, acked)
    assert not list((tmp_path / "wal" / "_wal").iterdir())


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("spec, problem", [
    ("postgres://h:1/db", "not a directory, clickhouse:// URL or chdb:DIR"),
    ("clickhouse://h:8123/db?table=a.b", "not a plain identifier"),
    ("chdb:", "needs a directory"),
])
def test_a_bad_store_is_one_line_naming_it(tmp_path, spec, problem):
    r = subprocess.run([sys.executable, "-m", "goodput", "exporter", "requests", "--store", spec,
                        "--wal", str(tmp_path / "wal")], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    line, = r.stderr.strip().splitlines()
    assert line.startswith(f"goodput: error: --store: {spec}: ") and problem in line


def test_a_directory_store_is_parquet(tmp_path):
    assert parse_store(str(tmp_path)) == tmp_path


def test_cli_wants_a_wal_for_clickhouse():
    r = subprocess.run([sys.executable, "-m", "goodput", "exporter", "requests", "--store", "clickhouse://h:8123/otel"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--wal DIR" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
