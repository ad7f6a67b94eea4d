"""Fixtures the review and measured-demand tests share: a simulated week backfilled into a real Prometheus (and
copied into a VictoriaMetrics), built once per session."""

import json

import pytest

from goodput.review.backfill import serve_tsdb
from goodput.review.week import write_week
from goodput.simulator.config import load_fleet
from goodput.simulator.week import WeekSpec, parse_week
from tests.conftest import free_port_block, require

WEEK = "2026-W48"
WEEK_SPEC_WEEKS_BEFORE = 3  # weeks of demand history before WEEK
FLEET = """\
name: review-test-fleet
start_time: "2026-11-23T00:00:00Z"
seed: 3
deployments:
  - {name: chat-8b-h100, model: Llama-3.1-8B, gpu: H100-80GB-SXM, tp: 1, replicas: 3, router: least-outstanding,
     engine: {max_num_seqs: 128, max_num_batched_tokens: 8192, max_waiting_requests: 512, max_queue_time_s: 20},
     cold_start: {scheduling_s: 20, weights_cached: false, engine_start_s: 200}}
  - {name: batch-32b-a100, model: Qwen2.5-32B, gpu: A100-80GB, tp: 2, replicas: 2, router: round-robin,
     engine: {max_num_seqs: 256, max_num_batched_tokens: 16384, max_waiting_requests: 4096, max_queue_time_s: 1800}}
workloads:
  - {name: support-chat, scene: chat, route: chat, tier: P0, deployment: chat-8b-h100, tenants: {acme: 0.6, globex: 0.4},
     input_tokens: {p50: 700, p95: 2600, max: 14000}, output_tokens: {p50: 130, p95: 480, max: 1000},
     arrival: {process: poisson, rate: 12}}
  - {name: nightly, scene: batch, route: batch, tier: P2, deployment: batch-32b-a100, tenants: {initech: 1.0},
     input_tokens: {p50: 3000, p95: 8000, max: 16000}, output_tokens: {p50: 250, p95: 600, max: 1500},
     arrival: {process: poisson, rate: 0.5}}
events:
  - {at: 100, kind: release, deployment: chat-8b-h100, release_kind: framework, from: vllm-0.10.1, to: vllm-0.10.2,
     effects: {decode_time_scale: 1.3}}
  - {at: 200, kind: replica_lost, deployment: chat-8b-h100, replica: 2}
"""


@pytest.fixture(scope="session")
def week(tmp_path_factory):
    """``(Prometheus URL, truth.json, paths)`` of WEEK (and its three weeks of history) at a 150 s step: about a
    minute of backfill, so every test that reads it shares this one."""
    out = tmp_path_factory.mktemp("week")
    (out / "fleet.yaml").write_text(FLEET)
    spec = WeekSpec(WEEK, step_s=150, tenants=4, weeks_before=WEEK_SPEC_WEEKS_BEFORE)
    paths = write_week(load_fleet(out / "fleet.yaml"), spec, out, backfill_port=free_port_block(1),
                       progress=lambda m: None)
    served = serve_tsdb(paths["tsdb"], free_port_block(1))
    try:
        yield served.url, json.loads(paths["truth"].read_text()), paths
    finally:
        served.stop()


@pytest.fixture(scope="session")
def vm_week(week, tmp_path_factory):
    """The same week in a real VictoriaMetrics of its own: every sample the week's Prometheus holds (raw series and
    recorded rules, the weeks of history too), copied through both servers' APIs (``tests.victoria.copy_from``).
    Prometheus 2.42 remote-writes only samples newer than its start (its WAL watcher skips older ones), so a week
    in the past cannot reach a store by remote_write; the live tests show remote_write itself
    (``victoria_metrics``). Yields the store's ``Endpoint`` (the /prometheus prefix, basic auth from a file)."""
    from tests import victoria

    require(victoria.BINARY)
    vm = victoria.start(tmp_path_factory.mktemp("vm-week"))
    try:
        until = parse_week(WEEK).timestamp() + 7 * 86400 + 3600
        victoria.copy_from(vm, week[0], until, span_s=(WEEK_SPEC_WEEKS_BEFORE + 1) * 7 * 86400 + 7200)
        yield vm.endpoint
    finally:
        vm.stop()
