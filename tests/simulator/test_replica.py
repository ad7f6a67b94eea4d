"""Replica-level behaviour: prefill time at low load, KV accounting, preemption, prefix cache."""

import copy

import numpy as np
import pytest

from goodput.simulator.fleet import Fleet
from goodput.simulator.replica import Replica
from goodput.simulator.run import simulate
from goodput.simulator.workload import generate
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, make_fleet, stress_pool

FIXED_1000 = {"min": 1000, "p50": 1000, "p95": 1000, "p99": 1000, "max": 1000}
FIXED_100 = {"min": 100, "p50": 100, "p95": 100, "p99": 100, "max": 100}


def _one_replica(engine=None, rate=1.0, **wl):
    d = copy.deepcopy(BASE_DEPLOYMENT)
    d["replicas"] = 1
    d["engine"].update(engine or {})
    w = copy.deepcopy(BASE_WORKLOAD)
    w["arrival"]["rate"] = rate
    w.update(wl)
    return make_fleet(deployments=[d], workloads=[w])


def test_ttft_at_low_load_is_the_prefill_step():
    cfg = _one_replica(rate=0.05, input_tokens=FIXED_1000, output_tokens=FIXED_100)
    res = simulate(cfg, 4000.0)
    rf = res.fleet.deployments[0].roofline
    prefill = rf.step_time(1000, 1000 * 1001 / 2, 1000)
    done = [r for r in res.fleet.done if r.finish_reason == "stop"]
    ttft_engine = np.array([r.first_token - r.queue_start for r in done])
    waits = np.array([r.scheduled - r.queue_start for r in done])
    alone = ttft_engine[waits == 0]
    assert len(alone) > 0.8 * len(done)
    assert np.median(alone) == pytest.approx(prefill, rel=1e-9)
    # client-side TTFT adds only the gateway hop
    gw = np.array([r.queue_start - r.arrival for r in done])
    assert np.all(gw > 0) and np.median(gw) == pytest.approx(0.002, rel=0.1)


class CheckedReplica(Replica):
    max_used = 0

    def complete_segment(self):
        super().complete_segment()
        assert 0 <= self.used_blocks <= self.total_blocks
        live = sum(-(-(r.kv_len + self.counter - r.dec_start) // self.bs) if r.state == 3 else r.blocks
                   for r in self.running.values())
        assert live == self.used_blocks  # the O(1) bookkeeping equals the per-sequence truth
        CheckedReplica.max_used = max(CheckedReplica.max_used, self.used_blocks)


class CheckedFleet(Fleet):
    replica_class = CheckedReplica


def _run_checked(cfg, duration):
    CheckedReplica.max_used = 0
    fleet = CheckedFleet(cfg, generate(cfg, duration, cfg.seed))
    fleet.run(duration)
    fleet.drain(duration + 3600)
    return fleet


def test_kv_never_exceeds_capacity_and_preemption_recomputes():
    # small KV: 0.3 of the GPU leaves ~3.8 GiB for KV (~1,900 blocks); long outputs force preemptions
    cfg = _one_replica({"gpu_memory_utilization": 0.3, "max_num_seqs": 128, "max_model_len": 8192}, rate=6.0,
                       output_tokens={"p50": 600, "p95": 1500, "p99": 2000, "max": 3000}, max_tokens=4096)
    fleet = _run_checked(cfg, 300.0)
    rep = fleet.deployments[0].replicas[0]
    assert CheckedReplica.max_used == rep.total_blocks  # it did fill up
    assert rep.preemptions_total > 0
    preempted = [r for r in fleet.done if r.preemptions > 0]
    assert preempted and sum(r.preemptions for r in fleet.done) == rep.preemptions_total
    assert all(r.finish_reason in ("stop", "length") for r in preempted)
    assert all(r.generated == r.output_target for r in preempted)


class HeadOfQueueReplica(Replica):
    """Checks, after every scheduling decision, that no request started for the first time while one that was
    preempted still waited (vLLM V1 prepends a preempted request to the FCFS waiting queue)."""

    fresh_after_preemption = 0

    def complete_segment(self):
        super().complete_segment()
        if self.seg_start != self.seg_start or self.seg_kind != 1:  # only steps that may admit (SINGLE)
            return
        preempted_waiting = [e[3] for e in self.waiting if e[3].state == 1 and e[3].preemptions]
        started_now = [r for r in self.prefilling if not r.preemptions and r.scheduled == self.seg_start]
        assert not (preempted_waiting and started_now), (len(preempted_waiting), len(started_now))
        if started_now and self.preemptions_total:
            HeadOfQueueReplica.fresh_after_preemption += 1


class HeadOfQueueFleet(Fleet):
    replica_class = HeadOfQueueReplica


def test_a_preempted_request_goes_back_to_the_head_of_the_queue():
    """A burst that arrives at once into a pool that holds a fraction of it: the preempted requests are taken back
    before any of the burst's later requests start, so the burst runs in waves (the KV-bound serving rows)."""
    cfg = _one_replica({"gpu_memory_utilization": 0.3, "max_num_seqs": 128, "max_model_len": 8192},
                       input_tokens=FIXED_1000, output_tokens=FIXED_1000, max_tokens=1000,
                       arrival={"process": "batch", "batches": [{"at": 0.0, "count": 150}]})
    HeadOfQueueReplica.fresh_after_preemption = 0
    fleet = HeadOfQueueFleet(cfg, generate(cfg, 1.0, cfg.seed))
    fleet.run(1.0)
    fleet.drain(3600)
    rep = fleet.deployments[0].replicas[0]
    assert rep.preemptions_total > 10 and HeadOfQueueReplica.fresh_after_preemption > 0
    done = [r for r in fleet.done if r.finish_reason in ("stop", "length")]
    assert len(done) == 150


def test_prefix_cache_hits_shared_system_prompt():
    cfg = _one_replica({"prefix_cache": True}, rate=2.0, shared_prefix_tokens=512)
    res = simulate(cfg, 300.0)
    done = sorted(res.fleet.done, key=lambda r: r.arrival)[5:]
    long = [r.cached_tokens for r in done if r.prompt_tokens > 512]
    assert np.mean(np.array(long) == 512) > 0.95
    # a prompt no longer than the prefix still computes its last token
    assert all(r.cached_tokens <= r.prompt_tokens - 1 for r in done)
    cfg_off = _one_replica({"prefix_cache": False}, rate=2.0, shared_prefix_tokens=512)
    assert all(r.cached_tokens == 0 for r in simulate(cfg_off, 300.0).fleet.done)


def test_context_longer_than_max_model_len_is_rejected():
    cfg = _one_replica({"max_model_len": 2048}, rate=2.0)
    res = simulate(cfg, 300.0)
    long = [r for r in res.fleet.done if r.prompt_tokens >= 2048]
    assert long and all(r.finish_reason == "rejected" and r.reject_reason == "context_too_long" for r in long)
    capped = [r for r in res.fleet.done if r.prompt_tokens < 2048 and r.finish_reason == "length"]
    assert all(r.prompt_tokens + r.generated == 2048 for r in capped if r.max_tokens > 2048 - r.prompt_tokens)


def test_closed_form_decode_runs_equal_step_by_step_simulation():
    """The speed-up must not approximate: jumping over decode steps gives the same timeline as stepping."""
    cfg = make_fleet(**stress_pool())
    fast = simulate(cfg, 200.0)
    slow = simulate(cfg, 200.0, max_run_steps=1)
    # the comparison covers preemption, queue timeouts and a release in the middle of decode runs
    assert sum(r.preemptions for r in fast.fleet.done) > 0
    assert any(r.finish_reason == "timeout" for r in fast.fleet.done)
    a = {r.rid: r for r in fast.fleet.done}
    b = {r.rid: r for r in slow.fleet.done}
    assert a.keys() == b.keys()
    for rid, r in a.items():
        s = b[rid]
        assert (r.finish_reason, r.replica, r.generated, r.preemptions, r.cached_tokens) == (
            s.finish_reason, s.replica, s.generated, s.preemptions, s.cached_tokens)
        for k in ("scheduled", "first_token", "last_token", "completed"):
            assert getattr(r, k) == pytest.approx(getattr(s, k), abs=1e-6, nan_ok=True), (rid, k)
