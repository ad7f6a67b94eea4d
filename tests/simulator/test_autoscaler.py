"""The autoscaler's queue vote reads the queue as it stands at the scrape, so it falls as a backlog drains."""

import copy

from goodput.simulator.autoscaler import Autoscaler, ScalingPolicy
from goodput.simulator.fleet import Fleet
from goodput.simulator.workload import scaled
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, make_fleet


def test_the_queue_vote_stops_scaling_up_once_the_backlog_is_served():
    """Issue 35 item 8: a 2 minutes' burst at 10x on one small replica builds a backlog of hundreds; the queue vote
    (the only one that can vote here) scales out one replica per scrape. Once nothing waits, it must stop: the p95
    of the waits observed in the window, which the vote read before, stays at 40-50 s for a window after the
    backlog is gone and took the pool from 5 replicas to 7 with the queue empty."""
    dep = dict(copy.deepcopy(BASE_DEPLOYMENT), replicas=1)
    dep["engine"] = dict(dep["engine"], max_num_seqs=16)
    wl = copy.deepcopy(BASE_WORKLOAD)
    wl["arrival"] = {"process": "step", "steps": [{"at": 0, "rate": 2.0}, {"at": 60, "rate": 20.0},
                                                  {"at": 180, "rate": 2.0}]}
    cfg = make_fleet(deployments=[dep], workloads=[wl])
    fleet = Fleet(cfg, scaled(cfg, 600.0, 1, 1.0))
    policy = ScalingPolicy("signals", 1, 8, goodput_tokens_per_s=1e9, kv_target_ratio=1.0, waiting_per_replica=1e9,
                           cold_start_s=30.0, scale_up_replicas=1, scale_up_period_s=15.0)
    scaler = Autoscaler(fleet, "chat", policy)
    scaler.run(600.0)
    samples = scaler.samples
    peak = max(range(len(samples)), key=lambda i: samples[i].signals["waiting"])
    assert samples[peak].signals["waiting"] > 200 and samples[peak].signals["queue_wait_now_s"] > 10
    served = next(i for i in range(peak, len(samples)) if samples[i].signals["waiting"] == 0)
    assert samples[served].signals["queue_wait_p95_s"] > 10  # what the window observed: still high
    assert samples[served].signals["queue_wait_now_s"] == 0  # what waits now: nothing
    assert max(s.desired for s in samples[served:]) == samples[served].desired < policy.max_replicas, \
        [(s.t, s.desired) for s in samples]
    # and the vote fell while the backlog drained: from its peak, the age of the oldest waiting request shrinks
    ages = [s.signals["queue_wait_now_s"] for s in samples[peak:served + 1]]
    assert max(ages) > ages[-2] > ages[-1], ages
