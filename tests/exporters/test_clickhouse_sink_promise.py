"""The ClickHouse sink's promise, acknowledged means stored, against a real HTTP server that lies, streams, trickles
and stalls (``FakeClickHouse``, backed by the real engine), on real exporter processes stopped with SIGTERM, and
against chDB: a 200 that stored nothing is retried, replies are capped in size and time, a stop returns within
Kubernetes' grace leaving what is owed in the log, a table that cannot deduplicate is named at start."""

from __future__ import annotations

import contextlib
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import httpx
import pytest

from goodput.exporters.clickhouse_sink import MAX_REPLY_BYTES, ClickHouseSink
from goodput.exporters.otel_traces import TableSpec, create_table
from goodput.exporters.otlp import decode_json
from goodput.exporters.requests import RequestMetrics, TraceReceiver
from goodput.exporters.store_sink import SinkFailed
from goodput.exporters.trace_store import encode_spans
from goodput.foundation.clickhouse import parse_target
from goodput.foundation.http import Server
from tests.conftest import REPO, free_port_block, wait_answering
from tests.exporters.test_clickhouse_store import _DB, FakeClickHouse, _chdb_target, _doc, _exactly_once, _spans, _store

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # long: dealt out first (tests/conftest.py)


@pytest.fixture
def ch(chdb):
    fake = FakeClickHouse(chdb, stall_s=120, stream_mb=MAX_REPLY_BYTES // (1 << 20) * 8)
    yield fake
    fake.close()


@pytest.mark.parametrize("lie", ["exception", "short", "proxy", "stream"])
def test_a_200_that_stored_nothing_is_retried_and_healthz_says_so(tmp_path, ch, lie):
    store = _store(tmp_path, ch, timeout_s=10)
    otlp = Server("127.0.0.1", 0, TraceReceiver(RequestMetrics(), store).routes()).start()
    spans = _spans("acme", 4)
    try:
        assert httpx.post(f"{otlp.url}/v1/traces", content=_doc(spans)).status_code == 200
        ch.script = [lie]
        assert store.flush() == 0
        r = httpx.get(f"{otlp.url}/healthz")
        assert r.status_code == 503 and f"{ch.url}?table=otel_traces" in r.text
        assert store.buffered == 4 and list((tmp_path / "wal" / "_wal").glob("*.wal"))
        assert store.flush() == 4  # ClickHouse answers truly now
        assert httpx.get(f"{otlp.url}/healthz").status_code == 200
    finally:
        otlp.stop()
        store.close()
    _exactly_once(ch, spans)
    assert ch.seen[0][1] == ch.seen[1][1]  # the same insert again


def _replayed_once(tmp_path, chdb, spans) -> None:
    """The next start on the same WAL, against a ClickHouse that answers, stores the 50 spans owed exactly once."""
    ok = FakeClickHouse(chdb)
    try:
        again = _store(tmp_path, ok)
        assert again.recovered == 50
        again.close()
        _exactly_once(ok, spans)
    finally:
        ok.close()


def test_a_trickled_reply_is_cut_at_the_insert_timeout(tmp_path, ch):
    store = _store(tmp_path, ch, timeout_s=0.5)
    spans = _spans("acme", 4)
    store.accept(spans, _doc(spans), "J")
    ch.script = ["trickle"]
    done = threading.Event()
    t0 = time.monotonic()
    threading.Thread(target=lambda: (store.flush(), done.set()), daemon=True).start()
    assert done.wait(10), "a server trickling its reply holds the flush"
    assert time.monotonic() - t0 < 3 and "0.5 s" in (store.error or "")
    store.close()
    _exactly_once(ch, spans)


def test_a_sink_not_keeping_up_is_named_by_healthz(tmp_path, ch):
    store = _store(tmp_path, ch, max_buffered_spans=10)
    otlp = Server("127.0.0.1", 0, TraceReceiver(RequestMetrics(), store).routes()).start()
    try:
        assert httpx.post(f"{otlp.url}/v1/traces", content=_doc(_spans("acme", 7))).status_code == 200
        assert httpx.get(f"{otlp.url}/healthz").status_code == 200
        assert httpx.post(f"{otlp.url}/v1/traces", content=_doc(_spans("acme", 2, 1))).status_code == 200
        r = httpx.get(f"{otlp.url}/healthz")
        assert r.status_code == 503 and "not keeping up" in r.text and ch.url in r.text
        store.flush()
        assert httpx.get(f"{otlp.url}/healthz").status_code == 200
    finally:
        otlp.stop()
        store.close()


def _exporter(tmp_path, url: str, *extra: str) -> tuple[subprocess.Popen, int]:
    port, otlp = free_port_block(1), free_port_block(1)
    p = subprocess.Popen([sys.executable, "-m", "goodput", "exporter", "requests", "--store", url,
                          "--wal", str(tmp_path / "wal"), "--port", str(port), "--otlp-port", str(otlp), *extra],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_answering(f"http://127.0.0.1:{otlp}/healthz", 60)
    while "OTLP at" not in p.stdout.readline():  # the last line before it takes SIGTERM
        assert p.poll() is None, p.stderr.read()
    time.sleep(0.2)
    return p, otlp


def _sigterm(p: subprocess.Popen) -> tuple[float, str]:
    """SIGTERM ``p`` and wait for it to exit: the seconds that took, and what it wrote to stderr."""
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    return time.monotonic() - t0, err


@pytest.mark.parametrize("stall", ["stall", "trickle"])
def test_sigterm_with_clickhouse_stalled_returns_within_the_grace_and_keeps_the_log(tmp_path, chdb, stall):
    stalled = FakeClickHouse(chdb, stall_s=300)
    stalled.script = [stall] * 100
    spans = _spans("acme", 50)
    p, otlp = _exporter(tmp_path, stalled.url, "--flush-interval", "0.2")  # the default 30 s insert timeout
    try:
        assert httpx.post(f"http://127.0.0.1:{otlp}/v1/traces", content=_doc(spans)).status_code == 200
        while not stalled.seen:
            time.sleep(0.05)  # the flush is in ClickHouse's hands
        took, err = _sigterm(p)
    finally:
        if p.poll() is None:
            p.kill()
        stalled.close()
    assert took < 25, f"SIGTERM took {took:.0f} s with ClickHouse stalled"
    assert p.returncode == 0 and "only in the write-ahead log" in err, err
    assert list((tmp_path / "wal" / "_wal").glob("*.wal"))
    _replayed_once(tmp_path, chdb, spans)


def test_sigterm_with_a_post_in_flight_and_clickhouse_stalled_exits_within_the_grace(tmp_path, chdb):
    """The whole shutdown fits ``--shutdown-grace`` (default 25 s, inside Kubernetes' 30 s): a post still arriving
    gets its drain, the stalled insert is cut at the store's share, and nothing waits a full default of its own
    (5 s of drain, then 20 s of flush, then the metrics server's drain took ~26 s before)."""
    stalled = FakeClickHouse(chdb, stall_s=300)
    stalled.script = ["stall"] * 100
    spans = _spans("acme", 50)
    p, otlp = _exporter(tmp_path, stalled.url, "--flush-interval", "0.2")  # the default 30 s insert timeout
    slow = socket.create_connection(("127.0.0.1", otlp))
    stop = threading.Event()

    def trickle() -> None:  # 128 KiB/s: above the receiver's body-rate floor, so the post stays in flight
        with contextlib.suppress(OSError):
            slow.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 8000000\r\n\r\n")
            while not stop.wait(0.25):
                slow.sendall(b" " * 32768)

    poster = threading.Thread(target=trickle)
    try:
        assert httpx.post(f"http://127.0.0.1:{otlp}/v1/traces", content=_doc(spans)).status_code == 200
        while not stalled.seen:
            time.sleep(0.05)  # the flush is in ClickHouse's hands
        poster.start()
        time.sleep(0.5)
        took, err = _sigterm(p)
    finally:
        stop.set()
        slow.close()
        if poster.is_alive():
            poster.join(10)
        if p.poll() is None:
            p.kill()
        stalled.close()
    assert took < 25, f"SIGTERM took {took:.0f} s with a post in flight and ClickHouse stalled"
    assert p.returncode == 0 and "only in the write-ahead log" in err, err
    _replayed_once(tmp_path, chdb, spans)


def test_stop_by_cuts_the_insert_under_way(tmp_path, ch):
    """An insert begun before the shutdown has the whole insert timeout; ``stop_by`` ends it at the deadline."""
    store = _store(tmp_path, ch, timeout_s=60)
    spans = _spans("acme", 4)
    store.accept(spans, _doc(spans), "J")
    ch.script = ["stall"]
    done = threading.Event()
    threading.Thread(target=lambda: (store.flush(), done.set()), daemon=True).start()
    while not ch.seen:
        time.sleep(0.02)
    store.sink.stop_by(time.monotonic() + 0.5)
    assert done.wait(15), "the insert under way outlived the shutdown deadline"
    assert store.buffered == 4 and store.error


def test_no_chdb_insert_starts_after_the_shutdown_deadline(chdb):
    """A chDB insert under way cannot be cut (docs/collector.md); none starts after the deadline, so a shutdown
    overruns by one insert at most and what is owed stays in the log."""
    target = _chdb_target(chdb)
    sink = ClickHouseSink(target)
    sink.stop_by(time.monotonic())
    with pytest.raises(SinkFailed, match="no time left"):
        sink.write(decode_json(_doc(_spans("acme", 3))))
    df = chdb.query_df("SELECT count() AS n FROM {db:Identifier}.otel_traces", {"db": target.database})
    assert int(df["n"][0]) == 0


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.3])
def test_a_sigterm_during_start_up_drains_and_loses_nothing_acknowledged(tmp_path, chdb, delay):
    """SIGTERM the moment the exporter has opened its log (replaying what a dead run acknowledged), and a little
    later: each time it exits 0 having stored every replayed span once, as after a SIGTERM when serving (before, the
    handler came after start-up and the signal's default action killed it, exit -15)."""
    ch = FakeClickHouse(chdb)
    spans = _spans("acme", 5000)
    wal = tmp_path / "wal" / "_wal"
    wal.mkdir(parents=True)
    (wal / "segment-00000000.wal").write_bytes(_record("J", _doc(spans)))
    port, otlp = free_port_block(1), free_port_block(1)
    p = subprocess.Popen([sys.executable, "-m", "goodput", "exporter", "requests", "--store", ch.url,
                          "--wal", str(tmp_path / "wal"), "--port", str(port), "--otlp-port", str(otlp)],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not (wal / "segment-00000001.wal").exists():  # the log is open: start-up is under way
            assert p.poll() is None, p.stderr.read() if p.stderr else ""
            time.sleep(0.002)
        time.sleep(delay)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
        ch.close() if p.returncode != 0 else None
    assert p.returncode == 0, err
    try:
        _exactly_once(ch, spans)
    finally:
        ch.close()
    assert not list(wal.glob("*.wal"))


def test_a_sigterm_while_the_start_up_replay_waits_on_a_stalled_clickhouse_exits_within_the_grace(tmp_path, chdb):
    """The replay at start is an insert too: a SIGTERM while ClickHouse stalls it ends it where the shutdown's flush
    would end (``--shutdown-grace`` less the margin), not at ``--insert-timeout``; the log is kept for the next try."""
    stalled = FakeClickHouse(chdb, stall_s=300)
    stalled.script = ["stall"] * 100
    spans = _spans("acme", 50)
    wal = tmp_path / "wal" / "_wal"
    wal.mkdir(parents=True)
    (wal / "segment-00000000.wal").write_bytes(_record("J", _doc(spans)))
    port, otlp = free_port_block(1), free_port_block(1)
    p = subprocess.Popen([sys.executable, "-m", "goodput", "exporter", "requests", "--store", stalled.url,
                          "--wal", str(tmp_path / "wal"), "--port", str(port), "--otlp-port", str(otlp),
                          "--shutdown-grace", "6"],  # the default 30 s insert timeout
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not stalled.seen:
            assert p.poll() is None, p.stderr.read() if p.stderr else ""
            time.sleep(0.02)  # the replay's insert is in ClickHouse's hands
        took, err = _sigterm(p)
    finally:
        if p.poll() is None:
            p.kill()
        stalled.close()
    assert took < 15, f"SIGTERM during a stalled replay took {took:.0f} s"
    assert p.returncode == 0 and "only in the write-ahead log" in err, err
    _replayed_once(tmp_path, chdb, spans)


# ---------------------------------------------------------------------------------------------- deduplication


def test_a_table_without_a_deduplication_window_is_named_at_start(tmp_path, chdb):
    plain = FakeClickHouse(chdb, dedup=False)
    try:
        assert "non_replicated_deduplication_window" in ClickHouseSink(parse_target(plain.url)).dedup_problem()
        p, _ = _exporter(tmp_path, plain.url)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        plain.close()
    warning, = [line for line in err.splitlines() if "WARNING" in line]
    assert plain.url in warning and "MODIFY SETTING non_replicated_deduplication_window" in warning


def test_a_table_that_deduplicates_passes_the_check(ch):
    assert ClickHouseSink(parse_target(ch.url)).dedup_problem() is None


def test_chdb_tables_are_checked_too(chdb):
    target = _chdb_target(chdb)
    assert ClickHouseSink(target).dedup_problem() is None  # the sink makes it with a window
    database = f"otel_user_{next(_DB)}"
    create_table(chdb, TableSpec(database=database))  # the user's, made by the Collector's DDL
    user = parse_target(f"chdb:{chdb.target.path}?database={database}", "--store")
    assert "non_replicated_deduplication_window" in (ClickHouseSink(user).dedup_problem() or "")


# ---------------------------------------------------------------------------------------------- bad --store


@pytest.mark.parametrize("kind", ["parquet", "chdb", "wal"])
@pytest.mark.parametrize("where", ["file", "under-a-file"])
def test_a_store_that_is_a_file_or_cannot_be_made_is_one_line(tmp_path, kind, where):
    (tmp_path / "f").write_text("x")
    bad = tmp_path / "f" if where == "file" else tmp_path / "f" / "sub"
    args = {"parquet": ["--store", str(bad)], "chdb": ["--store", f"chdb:{bad}", "--wal", str(tmp_path / "w")],
            "wal": ["--store", str(tmp_path / "s"), "--wal", str(bad)]}[kind]
    r = subprocess.run([sys.executable, "-m", "goodput", "exporter", "requests", *args], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    line, = r.stderr.strip().splitlines()
    flag = "--wal" if kind == "wal" else "--store"
    assert line.startswith(f"goodput: error: {flag}: ") and str(bad) in line


def test_a_payload_acknowledged_is_in_the_log_whatever_clickhouse_said(tmp_path, ch):
    """The log lets go only after a true answer: a lie leaves the segment, the next start replays it."""
    spans = _spans("acme", 6)
    store = _store(tmp_path, ch)
    store.accept(decode_json(_doc(spans)), _doc(spans), "J")
    ch.script = ["proxy"]
    store.close()
    assert "without X-ClickHouse-Summary" in (store.error or "") and list((tmp_path / "wal" / "_wal").glob("*.wal"))
    again = _store(tmp_path, ch)
    again.close()
    _exactly_once(ch, spans)


# ---------------------------------------------------------------------------------------------- SIGKILL


def _pour(otlp: int, stop: threading.Event, acked: list, seed: int, n: int, cut: list | None = None) -> None:
    """Post ``n`` spans at a time until ``stop`` or the exporter is gone, keeping those acknowledged in ``acked`` (and
    in ``cut`` those of the post the exporter's end cut: maybe written, never acknowledged)."""
    while not stop.is_set():
        spans = _spans("acme", n, seed)
        seed += 1
        try:
            if httpx.post(f"http://127.0.0.1:{otlp}/v1/traces", content=_doc(spans)).status_code == 200:
                acked.extend(spans)
        except httpx.HTTPError:
            if cut is not None:
                cut.extend(spans)
            return  # killed: not acknowledged


def test_sigkill_mid_insert_then_a_restart_on_the_same_wal_stores_every_acknowledged_span_once(tmp_path, chdb):
    """The insert is stored, its reply never comes, the process is killed while more spans arrive: the restart must
    send the same insert again (same rows, same token, which ClickHouse recognises), not a batch cut afresh from
    every leftover segment (which stored 3,850-7,800 spans twice in the probe)."""
    ch = FakeClickHouse(chdb, stall_s=60)
    ch.script = ["ok"] * 3 + ["late"]  # the fourth insert is stored and its reply withheld
    acked: list = []
    p, otlp = _exporter(tmp_path, ch.url, "--flush-interval", "0.2")
    stop = threading.Event()
    t = threading.Thread(target=_pour, args=(otlp, stop, acked, 0, 50))
    try:
        t.start()
        while not any(what == "late" for what, _ in ch.seen):
            time.sleep(0.02)
        time.sleep(0.5)  # more spans are logged while the insert waits for its reply
        p.kill()
        p.wait(30)
        stop.set()
        t.join(30)
        ch.release.set()
        again, _ = _exporter(tmp_path, ch.url)  # the same --wal
        again.send_signal(signal.SIGTERM)
        out, err = again.communicate(timeout=60)
        assert again.returncode == 0, err
        _exactly_once(ch, acked)
    finally:
        stop.set()
        for proc in (p,):
            if proc.poll() is None:
                proc.kill()
        ch.close()
    assert not list((tmp_path / "wal" / "_wal").glob("*.wal"))


def test_segments_a_rewrite_replaced_are_skipped_if_a_crash_left_them(tmp_path, chdb):
    """A crash between the rewritten segment's rename and the old segments' removal leaves both: replay takes the
    rewrite (what is still owed) and skips what it names, which holds spans already stored (on a table without a
    deduplication window, replaying them would store them twice)."""
    plain = FakeClickHouse(chdb, dedup=False)
    try:
        spans = _spans("acme", 10)
        store = _store(tmp_path, plain)
        store.accept(spans, _doc(spans), "J")
        wal = tmp_path / "wal" / "_wal"
        before = {seg.name: seg.read_bytes() for seg in wal.glob("*.wal")}
        plain.script = ["ok", "500"]
        assert store.flush() == 4  # the log is rewritten to hold spans[4:]
        for name, data in before.items():
            (wal / name).write_bytes(data)  # ... and the crash kept the segment it replaced
        del store
        again = _store(tmp_path, plain)
        assert again.recovered == 6
        again.close()
        _exactly_once(plain, spans)
    finally:
        plain.close()


def _record(kind: str, payload: bytes) -> bytes:
    return struct.pack(">IB", len(payload), ord(kind)) + payload


def test_a_batch_in_two_segments_is_replayed_once(tmp_path, chdb):
    """A crafted log: a segment, its rewrite (spans[4:] owed), the rewrite's own rewrite (spans[8:10] owed) with a
    crash before the first rewrite was removed, and a later segment where a client resent spans 8 and 9 with two new
    ones. Replay owes spans[8:12], each once: the replaced rewrite's batch and the resent spans are not stored again
    (the table has no deduplication window, so nothing else would catch them)."""
    plain = FakeClickHouse(chdb, dedup=False)
    spans = _spans("acme", 12)
    wal = tmp_path / "wal" / "_wal"
    wal.mkdir(parents=True)
    segments = [_record("J", _doc(spans[:10])),
                _record("X", b'["segment-00000000.wal"]') + _record("B", encode_spans(spans[4:10])),
                _record("X", b'["segment-00000001.wal"]') + _record("B", encode_spans(spans[8:10])),
                _record("J", _doc(spans[8:12]))]
    for n, data in enumerate(segments):
        if n != 0:  # the first rewrite's removal of segment 0 did happen
            (wal / f"segment-{n:08d}.wal").write_bytes(data)
    try:
        again = _store(tmp_path, plain)
        assert again.recovered == 4
        again.close()
        _exactly_once(plain, spans[8:12])
    finally:
        plain.close()


def test_a_damaged_rewrite_record_is_quarantined_not_a_crash(tmp_path, ch):
    wal = tmp_path / "wal" / "_wal"
    wal.mkdir(parents=True)
    (wal / "segment-00000000.wal").write_bytes(struct.pack(">IB", 2, ord("X")) + b"17")
    store = _store(tmp_path, ch)
    assert store.quarantined_total == 1 and list((tmp_path / "wal" / "_quarantine").iterdir())
    store.close()


def test_sigkill_under_load_on_chdb_twice_then_a_stop_stores_every_acknowledged_span_once(tmp_path):
    """The real engine: an exporter with ``--store chdb:DIR`` killed twice while spans pour in, restarted each time on
    the same ``--wal`` and directory, then stopped; the table is read back in a process of its own (chDB is one
    directory per process). An end-to-end check on the engine: chDB answers so fast that a kill seldom lands between
    a stored insert and its log's removal (it passed against the old store too); the test above forces that moment."""
    acked: list = []
    cut: list = []  # a post in flight when the process died: its spans may be in the WAL, their 200 never sent
    store = f"chdb:{tmp_path / 'ch'}"
    for round_ in range(3):
        p, otlp = _exporter(tmp_path, store, "--flush-interval", "0.1")
        stop = threading.Event()
        t = threading.Thread(target=_pour, args=(otlp, stop, acked, round_ * 10_000, 100, cut))
        t.start()
        time.sleep(1.5 + round_ * 0.37)  # flushes are landing all the while
        if round_ < 2:
            p.kill()
        else:
            p.send_signal(signal.SIGTERM)
        p.communicate(timeout=60)
        stop.set()
        t.join(30)
        assert p.returncode == (-9 if round_ < 2 else 0)
    got = subprocess.run([sys.executable, "-c", "import sys; from chdb import session; s = session.Session(sys.argv[1]); "
                          "print(s.query('SELECT TraceId, SpanId FROM otel.otel_traces', 'CSV')); "
                          "s.close()", str(tmp_path / "ch")], capture_output=True, text=True, timeout=120)
    stored = [tuple(line.replace('"', "").split(",")) for line in got.stdout.split()]
    ids = lambda spans: {(sp.trace_id, sp.span_id) for sp in spans}  # noqa: E731
    assert len(acked) > 1000 and len(stored) == len(set(stored)), got.stderr  # each span stored once
    assert ids(acked) <= set(stored)  # every acknowledged one
    assert set(stored) - ids(acked) <= ids(cut)  # and else only what a cut post had sent
