"""The demo's scripted incident (``goodput demo --headless``'s fleet: goodput/demo/incident.py) seen from inside it.

The store a live demo holds at a moment of the incident is cut from the simulator's run as the live fleet exports it
(finished requests whole, the admitted ones still in flight by their early spans: tests/analyzer/test_survivorship.py);
the final store holds every request of the same run, finished. At T+11 (the queue 11 minutes into its build-up) every
trace figure of every page, and of ``goodput analyze decompose|triage``, either equals the final store's over the
same window and filters, or says it is not final with the count of its requests still in flight — counted here from
the simulator's own record. At T+20 (replicas added at T+15, ready at T+17, the old one still draining its backlog)
Routing and triage name the scale-out instead of a 700x queue-wait skew, and the Releases page never words a scale
event as a release.
"""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from goodput.analyzer.completeness import verdict_window
from goodput.analyzer.decompose import decompose
from goodput.analyzer.ingest import ingest
from goodput.analyzer.regressions import scan_regressions
from goodput.analyzer.releases import load_releases
from goodput.analyzer.store import connect
from goodput.analyzer.triage import triage
from goodput.console import traces
from goodput.console.slos import slo_params
from goodput.demo.incident import INCIDENT_AT_S, RESCUE_AT_S, incident_fleet
from goodput.simulator.config import parse_fleet
from goodput.simulator.fleet import Fleet
from goodput.simulator.releases import write_releases
from goodput.simulator.workload import generate
from tests.analyzer.test_analysis import _cli
from tests.analyzer.test_survivorship import cut_store
from tests.conftest import REPO
from tests.console.test_pages import app, frame, no_exception, show

RUN_S = 2400.0
T0, T11, T20, T28 = 30.0, INCIDENT_AT_S + 660.0, INCIDENT_AT_S + 1200.0, INCIDENT_AT_S + 1680.0
REL = 1e-9


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    """The run (its config and every request, drained), and the stores: ``final``, ``t0`` (30 s in), ``t11``, ``t20``,
    ``t28`` (each a directory
    with db.duckdb and the releases.yaml of the events up to its moment)."""
    tmp = tmp_path_factory.mktemp("incident")
    fleet = incident_fleet(yaml.safe_load((REPO / "examples" / "fleet.yaml").read_text()), "examples/fleet.yaml",
                           only_rag=True)
    cfg = parse_fleet(fleet, "the demo's fleet")
    run = Fleet(cfg, generate(cfg, RUN_S, cfg.seed))
    run.run(RUN_S)
    run.drain(6000.0)
    stores = {}
    for name, cut in (("final", float("inf")), ("t0", T0), ("t11", T11), ("t20", T20), ("t28", T28)):
        d = tmp / name
        d.mkdir()
        write_releases([r for r in run.releases if r.time <= cut], cfg.start_time, d / "releases.yaml")
        con = connect(d / "db.duckdb")
        ingest(con, [cut_store(cfg, run.done, min(cut, 1e9), d / "store")])
        con.close()
        stores[name] = d / "db.duckdb"
    return cfg, run.done, stores


def _in_flight(cfg, done, cut_s: float, until, tier: str | None = None, minute=None) -> int:
    """The simulator's count of requests admitted by ``cut_s`` and unfinished then, arrived before ``until`` (and
    in ``minute``, a bucket start, and ``tier`` when given)."""
    start = pd.Timestamp(cfg.start_time)
    n = 0
    for r in done:
        at = start + pd.Timedelta(seconds=r.arrival)
        if r.queue_start <= cut_s < r.completed and at < until and (tier is None or r.tier == tier) and (
                minute is None or minute <= at < minute + pd.Timedelta(minutes=1)):
            n += 1
    return n


def _window(db: Path) -> dict:
    """The console's window over ``db`` with range=all: from the first request to the newest arrival (in flight too)."""
    with traces.open_store(db) as con:
        b = traces.query(con, "bounds", {})
    last = b["last"].iloc[0].to_pydatetime()
    return {"since": None, "until": last + timedelta(microseconds=1), "deployment": None, "tier": None, "tenant": None}


def _same(got: pd.DataFrame, want: pd.DataFrame, columns: list[str]) -> None:
    for c in columns:
        assert got[c].tolist() == pytest.approx(want[c].tolist(), rel=REL, nan_ok=True), c


def test_at_t11_every_trace_figure_is_final_or_says_how_many_are_in_flight(incident, monkeypatch):
    cfg, done, stores = incident
    db, final_db = stores["t11"], stores["final"]
    params = _window(db)
    until = pd.Timestamp(params["until"])
    total = _in_flight(cfg, done, T11, until)
    assert total > 100  # the queue's backlog: what the pages used to leave out silently

    # Overview, from the traces: one row per deployment and tier; not final, with the backlog's count
    at = show(app(monkeypatch, db, range="all"), "overview")
    no_exception(at)
    table = frame(at, "p95 queue wait s", "final")
    with traces.open_store(final_db) as con:
        slos = slo_params(REPO / "rules" / "slos.yaml")
        truth = traces.query(con, "overview", {**params, **slos})
    for row in table.to_dict("records"):
        n = _in_flight(cfg, done, T11, until, row["tier"])
        assert row["in_flight"] == n and row["final"] == (f"not final: {n} in flight" if n else "final"), row
        want = truth[(truth["deployment"] == row["deployment"]) & (truth["tier"] == row["tier"])].iloc[0]
        if row["final"] == "final":
            assert row["p95 queue wait s"] == pytest.approx(want["queue_p95_s"], rel=REL)
        else:  # the figure the page used to show as final is off: the survivors' queue wait
            assert row["p95 queue wait s"] < want["queue_p95_s"]
    assert any(f"not final: {total} in flight" in w.value for w in at.warning), [w.value for w in at.warning]

    # Latency: the decomposition's rows, the same
    at = show(app(monkeypatch, db, range="all"), "latency")
    no_exception(at)
    table = frame(at, "e2e_p95_s", "final")
    with traces.open_store(final_db) as con:
        truth = pd.DataFrame(decompose(con, ["deployment"], until=params["until"]).records())
    for row in table.to_dict("records"):
        n = _in_flight(cfg, done, T11, until)
        assert row["in_flight"] == n and (row["final"] == "final") == (n == 0)
        if n == 0:
            assert row["e2e_p95_s"] == pytest.approx(truth.iloc[0]["e2e_p95_s"], rel=REL)
    assert any("those still in flight are not listed" in c.value for c in at.caption)

    # KV & scheduler: per minute, each final bucket the final store's; the others say how many are in flight
    at = show(app(monkeypatch, db, range="all"), "kv")
    no_exception(at)
    table = frame(at, "preemptions", "final")
    with traces.open_store(final_db) as con:
        truth = traces.query(con, "kv", {**params, "bucket": "1 minute"}).set_index("bucket")
    assert (table["final"] == "final").sum() >= 10 and (table["final"] != "final").sum() >= 1
    for row in table.to_dict("records"):
        n = _in_flight(cfg, done, T11, until, minute=row["bucket"])
        assert row["in_flight"] == n and (row["final"] == "final") == (n == 0), row
        if n == 0:
            assert row["requests"] == truth.loc[row["bucket"], "requests"]

    # Releases and Workload: every point drawn solid is the final store's; the rest are drawn apart, "not final"
    with traces.open_store(final_db) as con:
        series = con.frame("bucket_series", {"bucket": "1 minute", "bucket_us": 60_000_000, "since": None,
                                             "until": params["until"], "deployment": None})
    at = show(app(monkeypatch, db, range="all"), "releases")
    no_exception(at)
    drawn = _lines(at, "p95 latency")
    solid, dotted = _points(drawn, "p95 e2e")
    want = {_utc(t): v for t, v in zip(series["bucket"], series["e2e_s"], strict=True)}
    assert solid and dotted
    for t, v in solid.items():
        assert v == pytest.approx(want[t], rel=REL), t
    assert all(_in_flight(cfg, done, T11, until, minute=t) > 0 for t in dotted if t not in solid)
    changed = [t for t, v in dotted.items() if t not in solid and v != pytest.approx(want.get(t), rel=REL)]
    assert changed  # the false recovery the page drew as final, now drawn as not final

    with traces.open_store(final_db) as con:
        lengths = traces.query(con, "workload", {**params, "bucket": "1 minute"})
    at = show(app(monkeypatch, db, range="all"), "workload")
    no_exception(at)
    solid, dotted = _points(_lines(at, "request lengths"), "input p95")
    want = {_utc(t): v for t, v in zip(lengths["bucket"], lengths["input_p95"], strict=True)}
    for t, v in solid.items():
        assert v == pytest.approx(want[t], rel=REL), t
    assert any(t not in solid for t in dotted)

    # Routing: per replica and per deployment, not final with the count
    at = show(app(monkeypatch, db, range="all"), "routing")
    no_exception(at)
    for key in (("replica", "final"), ("replicas", "final")):
        table = frame(at, *key)
        assert (table["final"] == f"not final: {total} in flight").all(), table

    # goodput analyze decompose: the same count per row, and a line that says so
    r = _cli("decompose", "--db", str(db), "--until", params["until"].isoformat(), "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(x["in_flight"], x["final"]) for x in rows] == [(total, f"not final: {total} in flight")]
    r = _cli("decompose", "--db", str(db), "--bucket", "1m")
    assert r.returncode == 0 and "not final: requests still in flight" in r.stdout
    lines = [x for x in r.stdout.splitlines() if x.startswith("rag")]
    assert lines[0].endswith("final") and "not final" in lines[-1]

    # goodput analyze triage: it reads only the final part of the window — its figures are the final store's
    rag = rows[0]["deployment"]
    with traces.open_store(db) as con:
        cut, cut_until, left_out = verdict_window(con, rag, None)
        now = triage(con, rag, releases=load_releases(db.parent / "releases.yaml"))
    with traces.open_store(final_db) as con:
        later = triage(con, rag, until=cut_until, releases=load_releases(db.parent / "releases.yaml"))
    assert left_out and now.left_out == left_out and f"{cut.in_flight} still in flight" in now.verdict
    for period in ("recent", "before"):  # the same figures (summed in another order: equal to the last bits)
        got, want = now.facts[period], later.facts[period]
        assert got.keys() == want.keys() and all(got[k] == pytest.approx(want[k], rel=REL) if isinstance(
            want[k], float) else got[k] == want[k] for k in want), (got, want)
    assert now.steps[1:] == later.steps[1:]


def _walk(node):
    """The page's elements in the order it shows them."""
    for child in getattr(node, "children", {}).values():
        yield child
        yield from _walk(child)


def _utc(t) -> pd.Timestamp:
    """A bucket start as one key, whether a chart's (naive, UTC) or the store's (aware)."""
    t = pd.Timestamp(t)
    return t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")


def _lines(at, title: str) -> list[dict]:
    chart = next(c for c in at.get("plotly_chart") if title in json.loads(c.proto.spec)["layout"]["title"]["text"])
    return json.loads(chart.proto.spec)["data"]


def _points(traces_: list[dict], name: str) -> tuple[dict, dict]:
    """The points of the series ``name`` drawn solid (final) and dotted (not final), by bucket start."""
    def values(v) -> list:  # Plotly sends a numeric array as base64 ("bdata") and its dtype
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).tolist() if isinstance(v, dict) else v

    def points(t: dict) -> dict:
        return {_utc(x): y for x, y in zip(values(t["x"]), values(t["y"]), strict=True)}
    solid = next(t for t in traces_ if t["name"].endswith(name))
    dotted = [t for t in traces_ if t["name"].endswith(f"{name} (not final)")]
    return points(solid), points(dotted[0]) if dotted else {}


def test_at_t20_routing_and_triage_name_the_scale_out_not_a_skew(incident, monkeypatch):
    cfg, done, stores = incident
    db = stores["t20"]
    releases = load_releases(db.parent / "releases.yaml")
    scale = next(r for r in releases if r.kind == "scale")
    event = f"{scale.from_version} -> {scale.to_version} replicas at {scale.time:%H:%M}"
    assert scale.time == pd.Timestamp(cfg.start_time) + pd.Timedelta(seconds=RESCUE_AT_S)

    at = show(app(monkeypatch, db, range="all"), "routing")
    no_exception(at)
    per_replica = frame(at, "replica", "queue_p95_s")
    assert per_replica["queue_p95_s"].max() / per_replica["queue_p95_s"].min() > 100  # the old one's backlog
    skew = frame(at, "replicas", "p95 queue wait max/min")
    assert skew["p95 queue wait max/min"].max() < 3 and skew["scale"].str.startswith(f"scale-out ({event})").all()
    assert any(f"scale-out ({event})" in i.value.replace("\\", "") and "Not a routing skew" in i.value.replace("\\", "")
               for i in at.info), [i.value for i in at.info]

    with traces.open_store(db) as con:
        t = triage(con, scale.deployment, releases=releases)
        bare = triage(con, scale.deployment)  # no releases file: the replicas first seen late say it
    routing = dict(t.steps)["4. routing and cache"]
    assert f"scale-out ({event})" in routing and "not a routing skew" in routing
    assert "routing imbalance" not in t.verdict and "pool is short" not in t.verdict
    assert f"the backlog from before the scale-out ({event}) still drains" in t.verdict
    assert "first seen from" in dict(bare.steps)["4. routing and cache"] and "routing imbalance" not in bare.verdict

    at = show(app(monkeypatch, db, range="all"), "releases")
    no_exception(at)
    verdicts = frame(at, "cause", "direction")
    ramp = verdicts[(verdicts["segment"] == "queue") & ~verdicts["blamed"].fillna(False).astype(bool)
                    & (verdicts["time"] > pd.Timestamp(releases[0].time))]
    # the backlog's ramp after the release: amber "backlog", never a red unexplained regression
    assert not ramp.empty and (ramp["direction"] == "backlog").all(), ramp
    # and the analyzer says so itself (`goodput analyze regressions`, the review): the same rows, the release named
    with traces.open_store(db) as con:
        scanned = scan_regressions(con, releases, deployment=scale.deployment).found
    said = {(r.time, r.metric): r.cause for r in scanned if r.segment == "queue" and not r.blamed
            and r.direction == "regression" and r.time > releases[0].time}
    backlog = f"backlog: the queue from release {releases[0].label()}, still building"
    assert said and set(said.values()) == {backlog}, said


def test_at_t28_the_releases_page_says_the_release_first_and_the_scale_event_as_one(incident, monkeypatch):
    cfg, done, stores = incident
    at = show(app(monkeypatch, stores["t28"], range="all"), "releases")
    no_exception(at)
    verdicts = frame(at, "cause", "direction")
    assert verdicts.iloc[0]["direction"] == "scale"  # the most significant change: the queue the scale-out drained
    said = [b.value.replace("\\", "") for b in _walk(at.main) if b.type in ("error", "success", "info")]
    assert "after release prompt_template" in said[0], said
    assert [s for s in said if "after the scale event 1 -> 4 replicas" in s], said
    assert not [s for s in said if "release scale" in s], said


def test_workload_compares_like_windows_and_says_when_there_is_not_enough(incident, monkeypatch):
    """Now against before: the last quarter of the final part of the range against the quarter just before it, the
    arrival rates the simulator's; a store a few seconds old has not enough to compare, and says so."""
    cfg, done, stores = incident
    db = stores["t11"]
    at = show(app(monkeypatch, db, range="all"), "workload")
    no_exception(at)
    shift = frame(at, "measure", "before", "now").set_index("measure")
    assert shift["before"].notna().all() and shift["now"].notna().all(), shift
    with traces.open_store(db) as con:
        first = traces.query(con, "bounds", {})["first"].iloc[0]
        _, final_until, _ = verdict_window(con, cfg.deployments[0].name, _window(db)["until"])
    length = (pd.Timestamp(final_until) - first) / 4
    start = pd.Timestamp(cfg.start_time)
    arrived = [start + pd.Timedelta(seconds=r.arrival) for r in done]
    for period, lo in (("before", final_until - 2 * length), ("now", final_until - length)):
        n = sum(1 for a in arrived if lo <= a < lo + length)
        got = shift.loc["arrival rate (req/s)", period] * length.total_seconds()
        assert abs(got - n) <= 1, (period, got, n)  # one request either way: a bucket edge rounded to microseconds

    at = show(app(monkeypatch, stores["t0"], range="all"), "workload")
    no_exception(at)
    assert any("Not enough to compare" in i.value for i in at.info), [i.value for i in at.info]
    assert not [d for d in at.dataframe if "measure" in d.value.columns]
