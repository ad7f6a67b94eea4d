"""The engine exporter against real sockets: one healthy target and every way a target can fail."""

import contextlib
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from goodput.exporters import engine as engine_module
from goodput.exporters.config import Plan, Target, Targets, load_plan, load_targets
from goodput.exporters.engine import EngineExporter
from goodput.exporters.normalize import MAX_LABEL_VALUE_BYTES, MAX_SERIES_PER_TARGET, cap_label
from goodput.foundation.errors import ConfigError
from goodput.foundation.http import Server, metrics_routes
from tests.conftest import REPO, require
from tests.exporters.test_exporter_processes import serve

GOOD = (REPO / "tests" / "fixtures" / "vllm_v1_simulated.txt").read_text()
RELEASE = threading.Event()  # /slow answers only once the test module is done
BARRIER = threading.Barrier(3, timeout=20)  # /together answers only when three requests wait at once
BODIES: dict[str, bytes] = {}  # /body/NAME serves what a test put here


class FaultyEngines(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        path = self.path
        if path == "/slow":
            RELEASE.wait(60)
            body = GOOD.encode()
        elif path.startswith("/together"):
            try:
                BARRIER.wait()
                body = GOOD.encode()
            except threading.BrokenBarrierError:
                body = b"never met\n"
        elif path.startswith("/pause/"):
            time.sleep(1.0)
            body = GOOD.encode()
        elif path.startswith("/body/"):
            body = BODIES[path.removeprefix("/body/")]
        elif path == "/500":
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        elif path == "/garbage":
            body = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
        elif path == "/unknown":
            body = b"# TYPE node_load1 gauge\nnode_load1 0.42\n"
        elif path == "/huge":
            body = GOOD.encode() * 200
        elif path == "/truncated":
            self.send_response(200)
            self.send_header("Content-Length", str(len(GOOD) * 2))
            self.end_headers()
            self.wfile.write(GOOD.encode()[:5000])
            self.wfile.flush()
            self.connection.close()
            return
        else:
            body = GOOD.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the exporter stopped reading: too large
            self.wfile.write(body)


@pytest.fixture(scope="module")
def engines():
    srv = serve(FaultyEngines)
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    RELEASE.set()
    srv.shutdown()


def _targets(base):
    names = ["ok", "slow", "500", "garbage", "unknown", "huge", "truncated"]
    ts = [Target("chat", f"chat-{n}", f"{base}/{n}", "auto", "Llama-3.1-8B") for n in names]
    ts.append(Target("chat", "chat-down", "http://127.0.0.1:9/metrics"))  # nothing listens on port 9
    return Targets(tuple(ts), {"chat": 10})


def test_faulty_targets_are_down_and_the_others_keep_serving(engines):
    exp = EngineExporter(_targets(engines), Plan({"chat": 5200.0}, {}), timeout_s=0.8, max_bytes=200_000)
    exp.scrape_once()  # /slow never answers in time: the round ends anyway, on its timeout
    text = exp.render()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    up = {s.labels["replica"]: s.value for s in fams["llm_engine_up"].samples}
    assert up == {"chat-ok": 1, "chat-slow": 0, "chat-500": 0, "chat-garbage": 0, "chat-unknown": 0, "chat-huge": 0,
                  "chat-truncated": 0, "chat-down": 0}
    errors = {s.labels["kind"]: s.value for s in fams["llm_exporter_errors"].samples if s.name.endswith("_total")}
    assert {"timeout", "http_500", "unknown_dialect", "too_large", "connect"} <= set(errors)
    running = [s for s in fams["llm_requests_running"].samples]
    assert [(s.labels["replica"], s.value) for s in running] == [("chat-ok", 6.0)]
    assert running[0].labels == {"model": "Llama-3.1-8B", "deployment": "chat", "replica": "chat-ok"}
    replicas = {s.labels["state"]: s.value for s in fams["llm_deployment_replicas"].samples}
    assert replicas == {"desired": 10, "available": 1}
    goodput = fams["llm_capacity_replica_goodput_tokens_per_second"].samples
    assert goodput[0].labels == {"deployment": "chat"} and goodput[0].value == 5200
    require("promtool")
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr


def test_targets_are_scraped_concurrently(engines):
    """Three targets that answer only while all three wait at once: all up only if scraped side by side."""
    ts = Targets(tuple(Target("chat", f"chat-{i}", f"{engines}/together/{i}") for i in range(3)), {})
    exp = EngineExporter(ts, timeout_s=30)
    exp.scrape_once()
    assert [st.up for st in exp.states] == [True, True, True], [st.error for st in exp.states]


def test_a_target_waiting_for_a_scrape_slot_is_not_timed_out_for_its_wait(engines, monkeypatch):
    """More targets than scrape slots, each answering in 1 s, timeout 1.6 s: a target's timeout runs from its own
    request, so those queued behind the first two are up too (it ran from the round's start: at 1,000 targets
    behind 64 slots, 936 were timed out)."""
    monkeypatch.setattr(engine_module, "CONCURRENCY", 2)
    ts = Targets(tuple(Target("chat", f"chat-{i}", f"{engines}/pause/{i}") for i in range(4)), {})
    exp = EngineExporter(ts, timeout_s=1.6)
    exp.scrape_once()
    assert [st.up for st in exp.states] == [True] * 4, [st.error for st in exp.states]


def test_a_malformed_url_is_one_down_target_not_a_dead_loop(engines):
    """httpx raises InvalidURL (not an HTTPError) for this URL; it used to end the scraper thread."""
    ts = Targets((Target("chat", "chat-bad", "http://127.0.0.1:194l4/metrics"),
                  Target("chat", "chat-ok", f"{engines}/ok")), {})
    exp = EngineExporter(ts, interval_s=0.1, timeout_s=5)
    exp.start()
    try:
        deadline = time.monotonic() + 30
        while exp.rounds < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert exp.rounds >= 3, "the scrape loop stopped after a malformed URL"
        assert exp.heartbeat.thread.is_alive() and exp.heartbeat.problem() is None
        fams = {f.name: f for f in text_string_to_metric_families(exp.render())}
        up = {s.labels["replica"]: s.value for s in fams["llm_engine_up"].samples}
        assert up == {"chat-bad": 0, "chat-ok": 1}
        errors = {s.labels["kind"]: s.value for s in fams["llm_exporter_errors"].samples if s.name.endswith("_total")}
        assert errors["invalid_url"] >= 3
    finally:
        exp.stop()


def test_healthz_says_503_when_rounds_stop_finishing(engines, monkeypatch):
    exp = EngineExporter(Targets((Target("chat", "chat-0", f"{engines}/ok"),), {}), interval_s=0.1, timeout_s=0.2)
    srv = Server("127.0.0.1", 0, metrics_routes(exp.render, exp.heartbeat.problem)).start()
    exp.start()
    try:
        assert httpx.get(f"{srv.url}/healthz").status_code == 200

        def broken_round() -> None:
            raise RuntimeError("a bug in a round")

        monkeypatch.setattr(exp, "scrape_once", broken_round)
        deadline = time.monotonic() + 30
        r = httpx.get(f"{srv.url}/healthz")
        while r.status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.1)
            r = httpx.get(f"{srv.url}/healthz")
        assert r.status_code == 503 and "has not finished a round" in r.text, r.text
        assert exp.heartbeat.thread.is_alive(), "a failing round ended the loop"
        assert 'kind="round_RuntimeError"' in httpx.get(f"{srv.url}/metrics").text
        monkeypatch.undo()  # rounds finish again: healthy again
        deadline = time.monotonic() + 30
        while httpx.get(f"{srv.url}/healthz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert httpx.get(f"{srv.url}/healthz").status_code == 200
    finally:
        exp.stop()
        srv.stop()
    exp.heartbeat.thread.join(timeout=30)
    assert exp.heartbeat.problem() == "the scrape loop is not running"


def _scrape(engines, name: str, body: str, model: str | None = None) -> tuple[EngineExporter, dict]:
    BODIES[name] = body.encode()
    exp = EngineExporter(Targets((Target("chat", "chat-0", f"{engines}/body/{name}", "auto", model),), {}),
                         timeout_s=10)
    exp.scrape_once()
    return exp, {f.name: f for f in text_string_to_metric_families(exp.render())}


def _errors(fams) -> dict[str, float]:
    return {s.labels["kind"]: s.value for s in fams["llm_exporter_errors"].samples if s.name.endswith("_total")}


def test_a_huge_label_value_is_capped_not_copied_onto_every_line(engines):
    huge = "m" * 1_000_000
    body = "".join(f'vllm:num_requests_running{{engine="{i}",model_name="{huge}"}} 1\n' for i in range(3))
    body += f'vllm:request_success_total{{finished_reason="{"r" * 5000}",model_name="{huge}"}} 4\n'
    exp, fams = _scrape(engines, "huge-label", body)
    text = exp.render()
    assert len(text.encode()) < 20_000, len(text)  # was 3 copies of the 1 MB name and more
    (running,) = fams["llm_requests_running"].samples
    assert running.value == 3
    model = running.labels["model"]
    assert len(model.encode()) <= MAX_LABEL_VALUE_BYTES and model.startswith("mmm") and "…" in model
    assert model == cap_label(huge) != cap_label(huge + "x")  # a digest keeps distinct long values apart
    (finished,) = fams["llm_requests_finished"].samples
    assert len(finished.labels["finished_reason"].encode()) <= MAX_LABEL_VALUE_BYTES and finished.value == 4
    assert _errors(fams)["label_truncated"] == 2


def test_a_repeated_series_keeps_its_last_sample_and_is_counted(engines):
    body = 'vllm:num_requests_running{model_name="m"} 6\nvllm:num_requests_running{model_name="m"} 99\n'
    _, fams = _scrape(engines, "dup", body)
    assert [s.value for s in fams["llm_requests_running"].samples] == [99]  # not 6 + 99
    assert _errors(fams)["duplicate_series"] == 1


def test_two_models_in_one_body_are_kept_apart(engines):
    body = ('vllm:num_requests_running{model_name="a"} 6\nvllm:num_requests_running{model_name="b"} 2\n'
            'vllm:prompt_tokens_total{model_name="a"} 10\nvllm:prompt_tokens_total{model_name="b"} 30\n')
    for model in (None, "configured"):  # a configured model name cannot merge two engines' models
        _, fams = _scrape(engines, f"two-{model}", body, model)
        running = {s.labels["model"]: s.value for s in fams["llm_requests_running"].samples}
        prompt = {s.labels["model"]: s.value for s in fams["llm_prompt_tokens"].samples if s.name.endswith("_total")}
        assert running == {"a": 6, "b": 2} and prompt == {"a": 10, "b": 30}


def test_served_over_http_with_background_scrapes(engines):
    targets = Targets((Target("chat", "chat-0", f"{engines}/ok"),), {})
    exp = EngineExporter(targets, interval_s=0.2)
    srv = Server("127.0.0.1", 0, metrics_routes(exp.render)).start()
    exp.start()
    try:
        deadline = time.monotonic() + 5
        while exp.rounds < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        r = httpx.get(f"{srv.url}/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        assert 'llm_engine_up{model="Llama-3.1-8B",deployment="chat",replica="chat-0"} 1.0' in r.text
        assert httpx.get(f"{srv.url}/nope").status_code == 404
    finally:
        exp.stop()
        srv.stop()


def test_targets_and_plan_files(tmp_path):
    t = tmp_path / "targets.yaml"
    t.write_text("targets:\n- {deployment: chat, replica: chat-0, url: 'http://127.0.0.1:8100/metrics', engine: vllm}\n"
                 "deployments: {chat: {desired_replicas: 3}}\n")
    ts = load_targets(t)
    assert ts.targets[0].engine == "vllm" and ts.desired == {"chat": 3}
    t.write_text("targets:\n- {deployment: chat, replica: chat-0, url: 'ftp://x'}\n")
    with pytest.raises(ConfigError, match=r"targets\[0\].url: not an http"):
        load_targets(t)
    t.write_text("targets:\n- {deployment: chat, replica: chat-0, url: 'http://x', engine: ollama}\n")
    with pytest.raises(ConfigError, match=r"targets\[0\].engine"):
        load_targets(t)
    p = tmp_path / "plan.yaml"
    p.write_text("plan_version: 1\ndeployments:\n  chat: {replica_goodput_tokens_per_second: 4100, desired_replicas: 6}\n")
    assert load_plan(p) == Plan({"chat": 4100.0}, {"chat": 6})
    p.write_text("deployments:\n  chat: {replica_goodput_tokens_per_second: -1}\n")
    with pytest.raises(ConfigError, match="replica_goodput_tokens_per_second: expected a finite number > 0"):
        load_plan(p)
    p.write_text("deployments:\n  chat: {replica_goodput_tokens_per_second: .nan}\n")
    with pytest.raises(ConfigError, match="chat.replica_goodput_tokens_per_second: expected a finite number > 0"):
        load_plan(p)


@pytest.mark.parametrize(("url", "problem"), [
    ("http://127.0.0.1:194l4/metrics", "not a valid URL"),  # passes a prefix check; httpx cannot request it
    ("http://127.0.0.1:99999/metrics", "not a valid URL"),
    ("http:///metrics", "not an http(s) URL with a host"),
    ("ftp://127.0.0.1/metrics", "not an http(s) URL with a host"),
    (17, "is required (a string)"),
])
def test_a_bad_target_url_is_refused_at_load_naming_the_entry(tmp_path, url, problem):
    t = tmp_path / "targets.yaml"
    good = [{"deployment": "chat", "replica": f"chat-{i}", "url": f"http://127.0.0.1:{8100 + i}/metrics"} for i in range(3)]
    bad = {"deployment": "chat", "replica": "chat-3", "url": url}
    t.write_text(yaml.safe_dump({"targets": [*good, bad]}))
    with pytest.raises(ConfigError) as e:
        load_targets(t)
    assert str(e.value).startswith(f"{t}: targets[3].url: {problem}"), str(e.value)


def test_a_label_value_in_the_targets_file_is_capped_at_load(tmp_path):
    t = tmp_path / "targets.yaml"
    t.write_text(yaml.safe_dump({"targets": [{"deployment": "d" * 300, "replica": "r", "url": "http://x/metrics"}]}))
    with pytest.raises(ConfigError, match=r"targets\[0\].deployment: longer than 256 bytes"):
        load_targets(t)


@pytest.mark.parametrize("url", ["http://scraper:hunter2@127.0.0.1:99999/metrics", "ftp://scraper:hunter2@127.0.0.1/m",
                                 "http://scraper:hunter2@[::1/metrics"])
def test_a_bad_target_url_is_reported_without_its_password(tmp_path, url):
    f = tmp_path / "targets.yaml"
    f.write_text(yaml.safe_dump({"targets": [{"deployment": "d", "replica": "r", "url": url}]}))
    with pytest.raises(ConfigError) as e:
        load_targets(f)
    assert "hunter2" not in str(e.value) and "scraper:***@" in str(e.value), str(e.value)


def test_a_target_publishing_100000_models_is_down_at_the_series_cap_and_the_others_keep_serving(engines, caplog):
    BODIES["models"] = "".join(f'vllm:num_requests_running{{model_name="m{i}"}} 1\n'
                               for i in range(100_000)).encode()  # ~4 MB, under --max-bytes
    ts = Targets((Target("chat", "chat-ok", f"{engines}/ok", "auto", "Llama-3.1-8B"),
                  Target("chat", "chat-many", f"{engines}/body/models")), {})
    exp = EngineExporter(ts, timeout_s=30)
    with caplog.at_level("WARNING", logger="goodput.exporters.engine"):
        exp.scrape_once()
        exp.scrape_once()
    fams = {f.name: f for f in text_string_to_metric_families(exp.render())}
    up = {s.labels["replica"]: s.value for s in fams["llm_engine_up"].samples}
    assert up == {"chat-ok": 1, "chat-many": 0}
    assert [s.labels["replica"] for s in fams["llm_requests_running"].samples] == ["chat-ok"]
    assert _errors(fams)["too_many_series"] == 2
    warned = [r.getMessage() for r in caplog.records if "chat-many" in r.getMessage()]
    assert len(warned) == 1 and f"more than {MAX_SERIES_PER_TARGET} series" in warned[0], warned  # once, not per round


def test_cold_start_runs_from_the_process_start_to_the_first_good_scrape_and_a_restart_measures_again(engines):
    now = [999_000.0]
    body = 'vllm:num_requests_running{model_name="m"} 1\nprocess_start_time_seconds 999820.5\n'
    BODIES["cold"] = body.encode()
    exp = EngineExporter(Targets((Target("chat", "chat-0", f"{engines}/body/cold", "auto", "m"),), {}),
                         timeout_s=10, clock=lambda: now[0])
    now[0] = 1_000_000.0

    def cold() -> list[tuple[dict, float]]:
        fams = {f.name: f for f in text_string_to_metric_families(exp.render())}
        return [(s.labels, s.value) for s in fams["llm_replica_cold_start_seconds"].samples]

    exp.scrape_once()
    assert cold() == [({"model": "m", "deployment": "chat", "replica": "chat-0"}, 179.5)]
    now[0] += 3600  # later scrapes of the same process leave its cold start as it was
    exp.scrape_once()
    assert [v for _, v in cold()] == [179.5]
    BODIES["cold"] = body.replace("999820.5", str(now[0] - 42)).encode()  # the engine restarted
    exp.scrape_once()
    assert [v for _, v in cold()] == [42]


def test_the_first_request_served_ends_at_the_first_scrape_that_counts_one_finished_and_a_restart_measures_again(
        engines):
    now = [1_000_000.0]
    exp = EngineExporter(Targets((Target("chat", "chat-0", f"{engines}/body/first", "auto", "m"),), {}),
                         timeout_s=10, clock=lambda: now[0])

    def body(start: float, stop: int, abort: int) -> bytes:
        return (f'process_start_time_seconds {start}\n'
                f'vllm:request_success_total{{model_name="m",finished_reason="stop"}} {stop}\n'
                f'vllm:request_success_total{{model_name="m",finished_reason="abort"}} {abort}\n').encode()

    def first() -> list[float]:
        fams = {f.name: f for f in text_string_to_metric_families(exp.render())}
        return [s.value for s in fams["llm_replica_first_request_seconds"].samples] if (
            "llm_replica_first_request_seconds" in fams) else []

    start = now[0] + 10
    now[0] += 130
    BODIES["first"] = body(start, 0, 0)  # ready, nothing served yet
    exp.scrape_once()
    assert first() == []
    now[0] += 15
    BODIES["first"] = body(start, 0, 2)  # two requests aborted: nobody served
    exp.scrape_once()
    assert first() == []
    now[0] += 15
    BODIES["first"] = body(start, 3, 2)
    exp.scrape_once()
    assert first() == [150]
    now[0] += 600
    exp.scrape_once()
    assert first() == [150]  # later scrapes of the same process leave it
    start = now[0] - 40  # a restart: measured again, from nothing served
    BODIES["first"] = body(start, 0, 0)
    exp.scrape_once()
    assert first() == []
    now[0] += 5
    BODIES["first"] = body(start, 1, 0)
    exp.scrape_once()
    assert first() == [45]


def test_an_engine_without_a_process_start_has_no_cold_start_series(engines):
    exp, fams = _scrape(engines, "no-start", 'vllm:num_requests_running{model_name="m"} 1\n')
    assert "llm_replica_cold_start_seconds" not in fams and "llm_replica_cold_start_seconds{" not in exp.render()


def test_a_process_older_than_the_exporter_has_no_cold_start_its_uptime_is_not_one(engines):
    now = [1_000_000.0]
    BODIES["old"] = b'vllm:num_requests_running{model_name="m"} 1\nprocess_start_time_seconds 990000\n'
    exp = EngineExporter(Targets((Target("chat", "chat-0", f"{engines}/body/old", "auto", "m"),), {}),
                         timeout_s=10, clock=lambda: now[0])
    exp.scrape_once()
    assert "llm_replica_cold_start_seconds{" not in exp.render()
    now[0] += 600  # the engine restarts while this exporter watches: that start is measured
    BODIES["old"] = f'vllm:num_requests_running{{model_name="m"}} 1\nprocess_start_time_seconds {now[0] - 90}\n'.encode()
    exp.scrape_once()
    fams = {f.name: f for f in text_string_to_metric_families(exp.render())}
    assert [s.value for s in fams["llm_replica_cold_start_seconds"].samples] == [90]


def test_a_target_listed_later_is_measured_only_when_its_process_started_about_then(engines):
    """A replica added by a scale-out (its process starts after it is listed, or before: listed once Ready, after a
    long weights load) is measured; a replica that ran for days before someone listed it is not — its uptime would read
    as a days-long cold start and page LLMColdStartAbovePlan."""
    now = [1_000_000.0]
    exp = EngineExporter(Targets((), {}), timeout_s=10, clock=lambda: now[0])
    now[0] += 3600  # listed an hour after the exporter started
    start = {"added": now[0] + 30, "late": now[0] - 1800, "running": now[0] - 3 * 86400}
    for name, t in start.items():
        BODIES[f"listed-{name}"] = f'vllm:num_requests_running{{model_name="m"}} 1\nprocess_start_time_seconds {t}\n'.encode()
    exp.set_targets(Targets(tuple(Target("chat", f"chat-{name}", f"{engines}/body/listed-{name}", "auto", "m")
                                  for name in start), {}))
    now[0] += 120
    exp.scrape_once()
    fams = {f.name: f for f in text_string_to_metric_families(exp.render())}
    got = {s.labels["replica"]: s.value for s in fams["llm_replica_cold_start_seconds"].samples}
    assert got == {"chat-added": 90, "chat-late": 1920}


def test_the_plans_cold_start_is_published_beside_its_goodput(engines, tmp_path):
    p = tmp_path / "plan.yaml"
    p.write_text("plan_version: 1\ndeployments:\n"
                 "  chat: {replica_goodput_tokens_per_second: 4100, cold_start_s: 240}\n"
                 "  rag: {replica_goodput_tokens_per_second: 900, headroom_inputs: {cold_start_s: 600, burst_factor: 2}}\n"
                 "  batch: {replica_goodput_tokens_per_second: 700}\n")
    plan = load_plan(p)
    assert plan.cold_start == {"chat": 240.0, "rag": 600.0}  # the key plan replicas writes, or one typed beside it
    exp = EngineExporter(Targets((), {}), plan)
    fams = {f.name: f for f in text_string_to_metric_families(exp.render())}
    assert {s.labels["deployment"]: s.value for s in fams["llm_capacity_cold_start_seconds"].samples} == plan.cold_start
    p.write_text("plan_version: 1\ndeployments:\n  chat: {replica_goodput_tokens_per_second: 1, cold_start_s: -5}\n")
    with pytest.raises(ConfigError, match=r"deployments\.chat\.cold_start_s"):
        load_plan(p)
