"""The console's sources on their own: the database snapshot never blocks the demo's writer and a locked file says
busy, PromQL names exist in the catalog and the rules, URL values stay data, `goodput console` sets the
environment the app reads."""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import time

import duckdb
import httpx
import pytest
import yaml

from benchmarks.analyzer import GENERATE
from goodput.console import promql, traces
from goodput.console.cli import FLAGS, environment
from goodput.console.filters import Filters, label_matchers
from goodput.console.settings import ENV, Settings
from goodput.contracts.catalog import names
from goodput.demo.ingest_loop import IngestLoop
from tests.conftest import REPO, free_port_block


def _spans(root, n: int, offset: int) -> None:
    """n requests (6 spans each) in the request exporter's trace-store layout, trace ids from ``offset``."""
    root.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute(GENERATE.format(n=n, out=root).replace(f"FROM range({n})", f"FROM range({offset}, {offset + n})"))
    con.close()


def test_a_reader_keeps_its_snapshot_while_the_ingest_loop_publishes_a_new_one(tmp_path):
    loop = IngestLoop(tmp_path / "traces", tmp_path / "db.duckdb")
    _spans(tmp_path / "traces" / "a", 200, 0)
    loop.traces = tmp_path / "traces" / "a"
    assert loop.once() == 200
    with traces.snapshot(tmp_path / "db.duckdb") as con:
        _spans(tmp_path / "traces" / "b", 300, 10_000)
        loop.traces = tmp_path / "traces" / "b"
        assert loop.once() == 300  # the writer does not wait for the reader
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 200  # the reader's version
    with traces.snapshot(tmp_path / "db.duckdb") as con:
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 500
    assert loop.once() == 0  # nothing new


def test_a_database_locked_by_an_in_place_writer_is_busy_not_a_wait(tmp_path):
    db = tmp_path / "db.duckdb"
    holder = subprocess.Popen([sys.executable, "-c", f"import duckdb, time; c = duckdb.connect({str(db)!r}); "
                               "c.execute('CREATE TABLE requests (ts TIMESTAMPTZ)'); print('locked', flush=True); "
                               "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        t = time.monotonic()
        with pytest.raises(traces.StoreBusy), traces.snapshot(db):
            pass
        assert time.monotonic() - t < 30, "the console waited on the writer"
    finally:
        holder.kill()
        holder.wait()
    with pytest.raises(traces.StoreMissing), traces.snapshot(tmp_path / "none.duckdb"):
        pass


def test_every_promql_name_is_in_the_catalog_or_the_rules():
    recorded = {r["record"] for f in (REPO / "rules").glob("*.rules.yaml")
                for g in yaml.safe_load(f.read_text())["groups"] for r in g["rules"] if "record" in r}
    assert set(promql.RECORDED) <= recorded, set(promql.RECORDED) - recorded
    f = Filters(deployment="rag", tier="P1")
    for expr in [*promql.overview(f).values(), *promql.kv(f).values(), *promql.routing(f).values()]:
        used = set(re.findall(r"\b([a-z_]+:[a-z_0-9]+:[a-z_0-9]+|llm_[a-z_]+)\b", expr))
        assert used <= recorded | names(), (expr, used - recorded - names())


def test_label_values_from_a_link_are_quoted_and_escaped():
    f, bad = Filters.from_query({"deployment": 'x"} or vector(1) or {a="', "tier": "P1\\", "range": "1y"})
    assert bad == ["range"] and f.range == "1h"
    assert label_matchers(f) == 'deployment="x\\"} or vector(1) or {a=\\"",tier="P1\\\\"'
    assert Filters.from_query({"tenant": "a\nb"})[1] == ["tenant"]
    assert Filters.from_query({"tenant": "x" * 201})[1] == ["tenant"]


def test_the_sql_files_take_values_only_as_parameters():
    for path in (REPO / "goodput" / "console" / "sql").glob("*.sql"):
        text = re.sub(r"--[^\n]*", "", path.read_text())
        assert set(re.findall(r"\{(\w+)\}", text)) <= {"filtered"}, path.name


def test_goodput_console_sets_the_environment_the_app_reads(tmp_path):
    args = argparse.Namespace(**{**{k: None for k in FLAGS}, "db": tmp_path / "x.duckdb", "prometheus_url": "http://p:1"})
    env = environment(args, base={})
    assert env == {ENV["db"]: str(tmp_path / "x.duckdb"), ENV["prometheus_url"]: "http://p:1"}
    s = Settings.from_env(env)
    assert s.db == tmp_path / "x.duckdb" and s.prometheus_url == "http://p:1"
    assert s.alertmanager_url == "http://127.0.0.1:9093"  # the demo's default
    r = subprocess.run([sys.executable, "-m", "goodput", "console", "--help"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0 and "GOODPUT_DB" in r.stdout and "--prometheus-url" in r.stdout


def test_sigterm_to_goodput_console_stops_the_server_it_started():
    port = free_port_block(1)
    proc = subprocess.Popen([sys.executable, "-m", "goodput", "console", "--port", str(port), "--db",
                             str(REPO / "no-such.duckdb")], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        else:
            pytest.fail("the console never answered its health check")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        with pytest.raises(httpx.ConnectError):  # nothing is left serving behind the command
            httpx.get(f"http://127.0.0.1:{port}/_stcore/health", timeout=2)
    finally:
        proc.kill()
        proc.wait()


def test_relative_console_paths_resolve_against_the_working_directory_not_the_repository(tmp_path, monkeypatch):
    """Before: ``goodput console --db relative.duckdb`` looked for REPO/relative.duckdb (the app runs from there)."""
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(**{**{k: None for k in FLAGS}, "db": "relative.duckdb", "prometheus_url": "http://p:1",
                                 "fleet": "fleet.yaml"})
    env = environment(args, base={ENV["releases"]: "rel.yaml"})
    assert env[ENV["db"]] == str(tmp_path / "relative.duckdb") and env[ENV["fleet"]] == str(tmp_path / "fleet.yaml")
    assert env[ENV["releases"]] == str(tmp_path / "rel.yaml")  # from the environment, the same
    assert env[ENV["prometheus_url"]] == "http://p:1" and ENV["plan"] not in env  # a URL as given; a default unset
