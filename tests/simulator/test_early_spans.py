"""The live fleet exports a request's early spans while it is in flight, through a real OTLP receiver.

``llm.gateway`` goes out after admission and ``llm.queue`` after scheduling, the root and the rest at the end,
each span once. A fleet with one small replica and more traffic than it serves builds a queue; it is stopped, the
sink flushed, and the receiver's trace store ingested: every request the fleet still holds is in flight in the
analyzer (none quarantined), every finished one is whole, and no span came twice. Closed, the fleet aborts what it
held and exports those requests' final spans: the store then has none in flight.
"""

import copy
import time

from goodput.analyzer.completeness import completeness
from goodput.analyzer.ingest import ingest
from goodput.analyzer.store import connect
from goodput.exporters.requests import RequestMetrics, TraceReceiver
from goodput.exporters.trace_store import TraceStore
from goodput.foundation.http import Server
from goodput.simulator.live import LiveFleet
from goodput.simulator.span_sink import SpanSink
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, free_port_block, make_fleet


def _fleet():
    dep = copy.deepcopy(BASE_DEPLOYMENT)
    dep.update(replicas=1, engine={"max_num_seqs": 4, "max_queue_time_s": 600})
    wl = copy.deepcopy(BASE_WORKLOAD)
    wl["arrival"]["rate"] = 20.0
    return make_fleet(deployments=[dep], workloads=[wl])


def test_in_flight_requests_reach_the_store_before_they_finish(tmp_path):
    cfg = _fleet()
    metrics = RequestMetrics()
    store = TraceStore(tmp_path / "traces")
    recv = TraceReceiver(metrics, store)
    otlp = Server("127.0.0.1", 0, {("POST", "/v1/traces"): recv.route}).start()
    sink = SpanSink(cfg, 1, f"{otlp.url}/v1/traces", None, interval_s=0.2)
    live = LiveFleet(cfg, base_port=free_port_block(2), sink=sink)
    try:
        live.start()
        time.sleep(3.0)
        live.stop_event.set()  # stop the engine thread: the fleet is frozen as it stands
        live.engine_thread.join(timeout=30)
        assert not live.engine_thread.is_alive()
        with live.lock:  # what finished up to the stop goes to the sink, as the engine loop would have handed it
            sink.add(list(live.fleet.done))
            live.fleet.done.clear()
        sink.close()  # flushed: the store holds every span the fleet has ended, early or final
        # counted here, at the stop, where the store's view was taken; close (below) drains the fleet, so reading
        # in-flight state after it finds none (why an earlier drain on close was backed out: this test read it there)
        held = live.fleet.in_flight()
        running = sum(len(r.running) for d in live.fleet.deployments for r in d.replicas)
        store.flush()
        assert metrics.duplicates == 0  # each span went once, early or late

        con = connect(tmp_path / "db.duckdb")
        out = ingest(con, [tmp_path / "traces"])
        assert held > 20 and out.in_flight == held and out.quarantined == 0, (held, out)
        scheduled = con.execute("SELECT count(*) FILTER (WHERE queue_end IS NOT NULL) FROM in_flight").fetchall()[0][0]
        assert running <= scheduled <= out.in_flight  # the running ones (and any preempted back to the queue) were scheduled
        assert out.requests > 0 and con.execute(
            "SELECT count(*) FROM requests WHERE gateway_s IS NULL OR queue_s IS NULL").fetchall() == [(0,)]
        c = completeness(con, "chat")["chat"]
        assert c.early_spans and c.in_flight == out.in_flight and c.final_before == c.oldest_arrival
        finished = out.requests
    finally:
        aborted = live.close()  # the engine thread is stopped: no drain, every request still held is aborted
        otlp.stop()
    # after close nothing is left in flight: each held request's final spans reached the store, as aborted
    assert aborted == held and live.fleet.in_flight() == 0 and sink.dropped_docs == 0
    store.flush()
    store.close()
    assert metrics.duplicates == 0
    after = ingest(connect(tmp_path / "after.duckdb"), [tmp_path / "traces"])
    assert (after.in_flight, after.quarantined, after.requests) == (0, 0, finished + held), after


def _receiver(busy_posts: int):
    """A real OTLP endpoint that answers 503 (Retry-After: 1) to its first ``busy_posts`` posts, then 200."""
    got: list[bytes] = []

    def route(h, body):
        if busy_posts > len(got) + route.busy:
            route.busy += 1
            return 503, "text/plain", b"busy\n", {"Retry-After": "1"}
        got.append(body)
        return 200, "application/json", b"{}", {}

    route.busy = 0
    return Server("127.0.0.1", 0, {("POST", "/v1/traces"): route}).start(), got


def test_close_keeps_retrying_a_busy_receiver_and_counts_what_it_never_took():
    """The last spans go out at close: a receiver that is busy then is retried (one attempt used to leave them
    unsent and uncounted); one that is gone is not waited for, and what it missed counts as dropped."""
    srv, got = _receiver(busy_posts=2)
    sink = SpanSink(_fleet(), 1, f"{srv.url}/v1/traces", None)
    try:
        sink.docs.extend(['{"resourceSpans": []}'] * 3)
        sink.close()
    finally:
        srv.stop()
    assert (len(got), sink.sent_docs, sink.dropped_docs) == (3, 3, 0)

    gone = SpanSink(_fleet(), 1, f"http://127.0.0.1:{free_port_block(1)}/v1/traces", None)
    gone.docs.extend(['{"resourceSpans": []}'] * 3)
    started = time.monotonic()
    gone.close()
    assert gone.dropped_docs == 3 and time.monotonic() - started < 5
