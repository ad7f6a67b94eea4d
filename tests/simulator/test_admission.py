"""The gateway's pure arithmetic: token buckets, fair-queueing tags, and the verdict of a tenant's quotas."""

import pytest

from goodput.simulator.admission import TenantUse, admission_cost, bucket_level, refusal, wfq_tag
from goodput.simulator.config import TenantQuota


def test_a_bucket_refills_at_its_per_minute_rate_up_to_its_depth():
    assert bucket_level(0.0, 10.0, 13.0, per_minute=60.0, depth=100.0) == pytest.approx(3.0)
    assert bucket_level(95.0, 0.0, 60.0, per_minute=60.0, depth=100.0) == 100.0
    assert bucket_level(-5.0, 0.0, 1.0, per_minute=600.0, depth=100.0) == pytest.approx(5.0)  # a debt is repaid first
    assert bucket_level(7.0, 5.0, 4.0, per_minute=60.0, depth=100.0) == 7.0  # time never runs backwards


def test_a_tag_is_the_later_of_the_lane_and_the_tenant_plus_cost_over_weight():
    assert wfq_tag(virtual_time=10.0, last_tag=4.0, cost=100, weight=2.0) == 60.0
    assert wfq_tag(virtual_time=10.0, last_tag=50.0, cost=100, weight=1.0) == 150.0


def test_a_flooding_tenant_only_pushes_its_own_tags_into_the_future():
    flood, tags = 0.0, []
    for _ in range(50):  # 50 requests queued at once by one tenant
        flood = wfq_tag(0.0, flood, 1000, 1.0)
        tags.append(flood)
    light = wfq_tag(0.0, 0.0, 1000, 1.0)  # another tenant's first request, queued after them
    assert sum(t < light for t in tags) == 0 and sum(t > light for t in tags) == 49
    heavy = wfq_tag(0.0, 0.0, 1000, 4.0)  # a tenant of weight 4 gets four requests in per one of weight 1
    assert heavy * 4 == light


def test_the_admission_cost_counts_the_prompt_and_every_token_it_may_generate():
    assert admission_cost(30_000, 1024) == 31_024  # a long prompt is what a requests-only limit lets through


@pytest.mark.parametrize(("quota", "use", "cost", "reason"), [
    (TenantQuota(), TenantUse(0.0, 0.0, 0.0, in_flight=10**6, spent=1e12), 10**6, None),
    (TenantQuota(token_budget=1000), TenantUse(0.0, 0.0, 0.0, spent=900), 101, "budget_exhausted"),
    (TenantQuota(token_budget=1000), TenantUse(0.0, 0.0, 0.0, spent=900), 100, None),
    (TenantQuota(concurrency=2), TenantUse(0.0, 0.0, 0.0, in_flight=2), 1, "concurrency_limit"),
    (TenantQuota(rpm=60), TenantUse(0.5, 0.0, 0.0), 1, None),  # half a second later the bucket holds one
    (TenantQuota(rpm=60), TenantUse(0.0, 0.0, 0.0), 1, "rate_limit"),
    (TenantQuota(tpm=6000), TenantUse(0.0, 40.0, 0.0), 200, "tpm_limit"),
    (TenantQuota(tpm=6000), TenantUse(0.0, 150.0, 0.0), 200, None),
    # a request larger than the bucket is let through when the bucket is full (then the tenant is in debt)
    (TenantQuota(tpm=600, burst_s=10), TenantUse(0.0, 100.0, 0.0), 5000, None),
    (TenantQuota(tpm=600, burst_s=10), TenantUse(0.0, 90.0, 0.0), 5000, "tpm_limit"),
])
def test_the_verdict_names_the_first_quota_the_request_would_exceed(quota, use, cost, reason):
    assert refusal(quota, use, cost, 0.5)[0] == reason


def test_the_verdict_gives_the_levels_the_request_would_take_from():
    q = TenantQuota(rpm=120, tpm=12_000, burst_s=30)
    full = TenantUse.full(q, 0.0)
    assert (full.requests, full.tokens) == (60.0, 6000.0)
    _, requests, tokens = refusal(q, TenantUse(0.0, 0.0, 0.0), 1, 2.0)
    assert (requests, tokens) == (4.0, 400.0)
