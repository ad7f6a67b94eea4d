"""Shared fixtures: paths to the vendored data, the external tools a test needs, free loopback ports, small fleets
built from dicts."""

from __future__ import annotations

import copy
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from goodput.simulator.config import FleetConfig, parse_fleet

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"  # every sample the tests read (SOURCES.md says where each comes from)
TRACES = REPO / "examples" / "traces"  # the public workload traces the examples and benchmarks replay
ARTIFACTS = REPO / "out" / "test-artifacts"  # what a person looks at after a run: screenshots of every page


def artifact(*parts: str) -> Path:
    """A path under ``out/test-artifacts/`` (kept after the run, unlike ``tmp_path``), its folder made."""
    path = ARTIFACTS.joinpath(*parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def offline_page(width: int = 1400, height: int = 1000) -> Iterator[tuple[object, list[str], list[str]]]:
    """A page of Debian's headless Chromium that may load only ``file://`` URLs: yields ``(page, errors, fetched)``,
    the console errors, page errors and dialogs it saw, and every other URL it tried (and was refused)."""
    playwright = pytest.importorskip("playwright.sync_api")
    errors: list[str] = []
    fetched: list[str] = []

    def route(r) -> None:
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            fetched.append(r.request.url)
            r.abort()

    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu", "--headless"])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("dialog", lambda d: (errors.append(f"dialog: {d.message}"), d.dismiss()))
            page.route("**/*", route)
            yield page, errors, fetched
        finally:
            browser.close()


def require(*tools: str) -> None:
    """Skip the calling test when an external tool is not on PATH, but FAIL it under CI (``CI`` set): `make test`
    installs promtool, amtool, prometheus and alertmanager, so in CI a missing one is a broken setup, and a skip
    would hide every check behind it. ``"a|b"`` accepts either name (Debian's ``prometheus-alertmanager`` or
    upstream's ``alertmanager``)."""
    missing = [t for t in tools if not any(shutil.which(name) for name in t.split("|"))]
    if not missing:
        return
    why = f"needs {', '.join(missing)} on PATH"
    if os.environ.get("CI"):
        pytest.fail(f"{why}; under CI this is a failure, not a skip (make deps-debian installs it)", pytrace=False)
    pytest.skip(why)


def needs(*tools: str) -> pytest.MarkDecorator:
    """``@needs("promtool")`` (or ``pytestmark = needs(...)``): :func:`require` before the test runs."""
    return pytest.mark.needs(*tools)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs(*tools): external tools the test runs (skipped without them, failed under CI)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules that hold a ``slow`` test run first, the rest in their order: `make test` spreads modules over
    workers (pytest-xdist, ``--dist loadfile --no-loadscope-reorder``: without that flag xdist deals the modules with
    the most tests first and undoes this order), and a minutes-long module dealt out last would run alone at the end."""
    slow = {item.module.__name__ for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module.__name__ not in slow)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("needs"):
        require(*mark.args)


def wait_answering(url: str, timeout: float = 30.0) -> None:
    """Until ``url`` answers at all (any status): a server process that is still coming up refuses connections."""
    import httpx  # only for the tests that start a server

    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def free_port_block(n: int, below_ephemeral: bool = False) -> int:
    """A base port such that base .. base+n-1 are all free on 127.0.0.1 right now. ``below_ephemeral``: below the
    kernel's ephemeral range, for ports bound long after (there any outgoing connection may take one meanwhile)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]) if below_ephemeral else 0
    for _ in range(200):
        if below_ephemeral:
            base = random.randrange(10_000, low - n)
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                base = s.getsockname()[1]
        if base + n >= 65000:
            continue
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port block")


BASE_DEPLOYMENT = {
    "name": "chat", "model": "Llama-3.1-8B", "gpu": "H100-80GB-SXM", "tp": 1, "replicas": 2,
    "router": "least-outstanding", "engine": {"max_num_seqs": 64, "max_num_batched_tokens": 4096,
                                              "prefill_chunk_tokens": 2048, "max_queue_time_s": 600},
}
BASE_WORKLOAD = {
    "name": "chat", "scene": "chat", "tier": "P0", "deployment": "chat", "tenants": {"acme": 0.7, "globex": 0.3},
    "input_tokens": {"p50": 500, "p95": 2000, "p99": 3000, "max": 4000},
    "output_tokens": {"p50": 100, "p95": 400, "p99": 600, "max": 800}, "max_tokens": 1024,
    "arrival": {"process": "poisson", "rate": 5.0},
}


def stress_pool(**deployment) -> dict:
    """Two replicas with little KV (3.8 GiB, 31k tokens each), long outputs, an 8 s queue limit, shared prefixes and
    bursty arrivals, and a release mid-run: the run preempts, times out and hits the prefix cache, for comparing two
    timelines."""
    return {
        "deployments": [dict(copy.deepcopy(BASE_DEPLOYMENT), replicas=2,
                             engine={"max_num_seqs": 48, "gpu_memory_utilization": 0.257, "max_model_len": 8192,
                                     "prefix_cache": True, "max_queue_time_s": 8}, **deployment)],
        "workloads": [dict(copy.deepcopy(BASE_WORKLOAD), shared_prefix_tokens=256, max_tokens=4096,
                           output_tokens={"p50": 600, "p95": 1500, "p99": 2000, "max": 3000},
                           arrival={"process": "gamma", "rate": 12.0, "cv": 2.0})],
        "events": [{"at": 100, "kind": "release", "deployment": "chat", "effects": {"decode_time_scale": 1.3}}],
    }


def fleet_data(deployments: list[dict] | None = None, workloads: list[dict] | None = None,
               events: list[dict] | None = None, **extra) -> dict:
    """A fleet file's contents, as a test would write it."""
    return {
        "name": "test-fleet", "start_time": "2026-11-23T09:00:00Z", "seed": 3,
        "deployments": deployments or [copy.deepcopy(BASE_DEPLOYMENT)],
        "workloads": workloads or [copy.deepcopy(BASE_WORKLOAD)],
        "events": events or [],
        **extra,
    }


def make_fleet(deployments: list[dict] | None = None, workloads: list[dict] | None = None,
               events: list[dict] | None = None, **extra) -> FleetConfig:
    return parse_fleet(fleet_data(deployments, workloads, events, **extra), "test-fleet.yaml")


@pytest.fixture
def fleet_factory():
    return make_fleet


@contextmanager
def fleet_serve(tmp_path: Path, base_port: int, *extra: str) -> Iterator[tuple[subprocess.Popen, list[str]]]:
    """``goodput fleet serve examples/fleet.yaml`` as a real process on ports from ``base_port``, with no traffic of
    its own: yields it and the lines it printed until it was ready; kills it if the test left it running."""
    exe = Path(sys.executable).with_name("goodput")
    proc = subprocess.Popen([str(exe), "fleet", "serve", str(REPO / "examples" / "fleet.yaml"), "--base-port",
                             str(base_port), "--targets", str(tmp_path / "targets.yaml"), "--traffic", "0", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while not any("Ctrl-C to stop." in ln for ln in lines):
            if proc.poll() is not None or time.monotonic() > deadline:
                if proc.poll() is None:
                    proc.kill()
                out, err = proc.communicate()
                raise AssertionError(f"fleet serve did not start (exit {proc.returncode}): {''.join(lines) + out}{err}")
            lines.append(proc.stdout.readline())
        yield proc, lines
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.fixture(scope="session")
def chdb(tmp_path_factory):
    """The test session's chDB (ClickHouse in-process; one directory per process): each user takes its own database."""
    from goodput.foundation.clickhouse import connect

    return connect(f"chdb:{tmp_path_factory.mktemp('chdb')}")


def clickhouse_of(chdb, run: Path, database: str):
    """The run's OTLP spans (the same requests its DuckDB store holds) in an otel_traces table made by the Collector's
    DDL, as its clickhouseexporter writes them: the analyzer reads them there in place."""
    from goodput.analyzer.backend import ClickHouseBackend  # the engine only for the tests that ask
    from goodput.exporters.otel_traces import TableSpec, create_table, insert_spans
    from goodput.exporters.otlp import decode_json
    from goodput.foundation.clickhouse import connect as connect_clickhouse
    from goodput.foundation.clickhouse import parse_target

    spec = TableSpec(database=database)
    create_table(chdb, spec)
    with open(run / "spans.otlp.jsonl") as f:
        insert_spans(chdb, (span for line in f for span in decode_json(line)), spec)
    return ClickHouseBackend(connect_clickhouse(parse_target(f"chdb:{chdb.target.path}?database={database}")))


@pytest.fixture(scope="session")
def victoria_metrics(tmp_path_factory):
    """One real VictoriaMetrics for the session (``tests/victoria.py``) that the live Prometheus of the plan and
    console tests remote-write into. (The simulated week the review reads is in one of its own,
    ``tests/review/conftest.py``: its deployments are the live plan test's, and a window of weeks from now may
    reach back into it.)"""
    from tests import victoria  # httpx and the server only for the tests that ask

    require(victoria.BINARY)
    vm = victoria.start(tmp_path_factory.mktemp("victoria-metrics"))
    try:
        yield vm
    finally:
        vm.stop()
