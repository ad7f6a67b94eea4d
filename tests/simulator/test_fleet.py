"""Fleet-level behaviour against queueing facts: conservation, ordering, overload, Little's law, bursts, failover."""

import copy
import math
from collections import Counter

import numpy as np
import pytest

from goodput.contracts.vocabulary import FINISH_REASONS, REJECT_REASONS
from goodput.simulator.fleet import Fleet
from goodput.simulator.run import simulate
from goodput.simulator.workload import generate, scaled
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, make_fleet


def _dep(**kw):
    d = copy.deepcopy(BASE_DEPLOYMENT)
    engine = kw.pop("engine", {})
    d.update(kw)
    d["engine"].update(engine)
    return d


def _wl(**kw):
    w = copy.deepcopy(BASE_WORKLOAD)
    arrival = kw.pop("arrival", None)
    w.update(kw)
    if arrival is not None:
        w["arrival"] = arrival
    return w


OVERLOAD = make_fleet(
    deployments=[_dep(replicas=2, engine={"max_num_seqs": 16, "max_waiting_requests": 64, "max_queue_time_s": 20})],
    workloads=[_wl(arrival={"process": "poisson", "rate": 40.0}),
               _wl(name="batch", tier="P2", arrival={"process": "batch", "rate": 1.0,
                                                      "batches": [{"at": 100, "count": 300}]})],
    events=[{"at": 150, "kind": "replica_lost", "deployment": "chat", "replica": 1},
            {"at": 200, "kind": "replica_added", "deployment": "chat", "cold_start_s": 30}],
)


@pytest.fixture(scope="module")
def overloaded():
    return simulate(OVERLOAD, 300.0)


def test_every_arrival_ends_in_exactly_one_terminal_state(overloaded):
    done = overloaded.fleet.done
    assert len(done) == overloaded.arrivals
    assert len({r.rid for r in done}) == len(done)
    assert all(r.finish_reason in FINISH_REASONS for r in done)
    rejected = [r for r in done if r.finish_reason in ("rejected", "timeout")]
    assert rejected and all(r.reject_reason in REJECT_REASONS for r in rejected)
    assert all(r.reject_reason == "" for r in done if r.finish_reason in ("stop", "length"))


def test_timestamps_are_ordered(overloaded):
    for r in overloaded.fleet.done:
        ts = [r.arrival, r.queue_start, r.scheduled, r.first_token, r.last_token, r.completed]
        present = [t for t in ts if not math.isnan(t)]
        assert present == sorted(present), r
        if r.finish_reason in ("stop", "length"):
            assert len(present) == 6


def test_overload_queues_then_rejects_with_reasons(overloaded):
    done = overloaded.fleet.done
    reasons = {r.reject_reason for r in done if r.reject_reason}
    assert {"queue_full", "queue_timeout"} <= reasons
    timeouts = [r for r in done if r.finish_reason == "timeout"]
    assert all(r.completed - r.queue_start == pytest.approx(20.0) for r in timeouts)
    ok = sorted((r for r in done if r.finish_reason == "stop" and r.tier == "P0"), key=lambda r: r.arrival)
    early = np.median([r.scheduled - r.queue_start for r in ok if r.arrival < 0.5])
    late = np.median([r.scheduled - r.queue_start for r in ok if 50 < r.arrival < 100])
    assert late > 10 * max(early, 1e-3)


def test_tier_orders_the_waiting_queue(overloaded):
    # the P2 batch of 300 lands at t=100 into a saturated pool; P0 requests keep being scheduled first
    done = overloaded.fleet.done
    p2 = [r for r in done if r.tier == "P2" and not math.isnan(r.scheduled)]
    p0 = [r for r in done if r.tier == "P0" and not math.isnan(r.scheduled) and 100 < r.arrival < 140]
    assert np.median([r.scheduled - r.queue_start for r in p0]) < np.median([r.scheduled - r.queue_start for r in p2])


def test_lost_replica_traffic_moves_to_the_others(overloaded):
    done = overloaded.fleet.done
    lost = [r for r in done if r.replica == 1]
    assert all(r.queue_start <= 150 for r in lost)
    failed = [r for r in lost if r.finish_reason == "error"]
    assert failed and all(r.completed == 150 for r in failed)
    after = [r for r in done if 150 < r.queue_start < 200 and r.replica >= 0]
    assert after and {r.replica for r in after} == {0}
    # the added replica takes traffic only after its cold start
    added = [r for r in done if r.replica == 2]
    assert added and min(r.queue_start for r in added) >= 230


def test_same_seed_same_output_and_a_different_seed_differs():
    a = simulate(OVERLOAD, 120.0).table.arrow()
    b = simulate(OVERLOAD, 120.0).table.arrow()
    c = simulate(OVERLOAD, 120.0, seed=99).table.arrow()
    assert a.equals(b)
    assert not a.equals(c)


def test_littles_law_on_the_waiting_queue():
    cfg = make_fleet(deployments=[_dep(replicas=1, engine={"max_num_seqs": 12, "max_queue_time_s": 10_000,
                                                           "max_waiting_requests": 100_000})],
                     workloads=[_wl(arrival={"process": "poisson", "rate": 8.0})])
    fleet = Fleet(cfg, generate(cfg, 2400.0, 5))
    rep = fleet.deployments[0].replicas[0]
    lo, hi, dt = 200.0, 2200.0, 0.05
    samples = []
    for t in np.arange(lo, hi, dt):
        fleet.run(float(t))
        samples.append(rep.n_waiting)
    fleet.run(2400.0)
    fleet.drain(10_000.0)
    L = float(np.mean(samples))
    reqs = [r for r in fleet.done if lo <= r.queue_start < hi]
    lam = len(reqs) / (hi - lo)
    W = float(np.mean([r.scheduled - r.queue_start for r in reqs]))
    assert L > 2.0  # a real queue, not an empty one
    assert pytest.approx(lam * W, rel=0.05) == L


def test_burst_raises_queue_wait_and_the_queue_drains():
    cfg = make_fleet(deployments=[_dep(replicas=1, engine={"max_num_seqs": 32, "max_queue_time_s": 10_000,
                                                           "max_waiting_requests": 100_000})],
                     workloads=[_wl(arrival={"process": "poisson", "rate": 6.0,
                                             "bursts": [{"at": 300, "factor": 5, "duration": 60}]})])
    res = simulate(cfg, 1200.0)
    waits = {}
    for name, (a, b) in {"before": (0, 300), "burst": (330, 360), "after": (900, 1200)}.items():
        waits[name] = np.percentile([r.scheduled - r.queue_start for r in res.fleet.done if a <= r.arrival < b], 95)
    assert waits["burst"] > 20 * waits["before"]
    assert waits["after"] < 3 * waits["before"] + 0.05


def test_releases_change_prompts_and_step_time():
    cfg = make_fleet(
        deployments=[_dep(replicas=2)],
        workloads=[_wl(arrival={"process": "poisson", "rate": 3.0})],
        events=[{"at": 600, "kind": "release", "deployment": "chat", "release_kind": "prompt_template",
                 "from": "v1", "to": "v2", "effects": {"input_scale": 2.0}},
                {"at": 1200, "kind": "release", "deployment": "*", "release_kind": "framework",
                 "from": "0.10.1", "to": "0.10.2", "note": "slower decode", "effects": {"decode_time_scale": 1.2}}],
    )
    done = simulate(cfg, 1800.0).fleet.done
    def med(a, b, f):
        return np.median([f(r) for r in done if a <= r.arrival < b and r.finish_reason == "stop"])
    assert med(600, 1200, lambda r: r.prompt_tokens) / med(0, 600, lambda r: r.prompt_tokens) == pytest.approx(2, rel=0.1)
    tpot = lambda r: (r.last_token - r.first_token) / max(1, r.generated - 1)  # noqa: E731
    long = lambda a, b: [tpot(r) for r in done if a <= r.arrival < b and r.generated > 50]  # noqa: E731
    ratio = np.median(long(1250, 1800)) / np.median(long(650, 1150))
    assert ratio == pytest.approx(1.2, rel=0.05)


@pytest.mark.parametrize("gateway", [None, {"max_in_flight_per_replica": 8}])
def test_kv_aware_routing_sends_traffic_to_a_replica_added_by_a_scale_out(gateway):
    """Issue 35 item 8: the old replica caches the shared prompt prefix and, under a gateway's cap or light load, queues
    nothing; kv-aware routing then sent every request there and none to the added, empty replica (its free KV the
    largest), for as long as the run lasted. Both replicas now share the traffic after the scale-out."""
    dep = dict(copy.deepcopy(BASE_DEPLOYMENT), replicas=1, router="kv-aware")
    dep["engine"] = dict(dep["engine"], prefix_cache=True)
    wl = dict(copy.deepcopy(BASE_WORKLOAD), shared_prefix_tokens=400)
    cfg = make_fleet(deployments=[dep], workloads=[wl], **({"gateway": gateway} if gateway else {}))
    fleet = Fleet(cfg, scaled(cfg, 240.0, 1, 1.0))
    fleet.run(60.0)
    fleet.start_replica(fleet.deployments[0], 60.0, 0.0)
    fleet.run(240.0)
    after = Counter(r.replica for r in fleet.done if r.queue_start > 60.0)
    assert sum(after.values()) > 400
    assert min(after[0], after[1]) > 0.3 * sum(after.values()), after  # before: {0: 866}, nothing to replica 1
