"""The gateway's decision arithmetic, pure: token buckets for per-minute quotas, weighted fair queueing tags, and
the one verdict a tenant's quotas give a request.

Quotas count requests (RPM), tokens (TPM: prompt + max output tokens, counted at admission, because a limit on
requests alone is bypassed by long prompts), requests in flight, and a token budget. Fair queueing is self-clocked
(SCFQ, Golestani 1994): a request's tag is its tenant's previous tag, or the lane's virtual time if later, plus its
cost over the tenant's weight; the lane serves the smallest tag and its virtual time becomes that tag, so a tenant
that floods only pushes its own tags into the future.
"""

from __future__ import annotations

from dataclasses import dataclass

from goodput.simulator.config import TenantQuota

__all__ = ["TenantUse", "admission_cost", "bucket_level", "refusal", "wfq_tag"]



def bucket_level(level: float, since: float, now: float, per_minute: float, depth: float) -> float:
    """A token bucket's level at ``now``: ``level`` at ``since``, refilled at ``per_minute``/60 per second up to
    ``depth``."""
    return min(depth, level + max(0.0, now - since) * per_minute / 60.0)


def wfq_tag(virtual_time: float, last_tag: float, cost: float, weight: float) -> float:
    """The SCFQ finish tag of a request costing ``cost`` from a tenant of ``weight`` whose previous tag was
    ``last_tag``, in a lane at ``virtual_time``."""
    return max(virtual_time, last_tag) + cost / weight


def admission_cost(prompt_tokens: int, max_tokens: int) -> int:
    """Tokens a request is charged at admission: its prompt and all it may generate (what TPM quotas count)."""
    return prompt_tokens + max_tokens


@dataclass
class TenantUse:
    """What a tenant holds at one instant: bucket levels (as of ``at``), requests in flight, tokens spent."""

    requests: float  # RPM bucket level
    tokens: float  # TPM bucket level
    at: float
    in_flight: int = 0
    spent: float = 0.0

    @classmethod
    def full(cls, q: TenantQuota, t: float) -> TenantUse:
        return cls(_depth(q.rpm, q), _depth(q.tpm, q), t)


def _depth(per_minute: float | None, q: TenantQuota) -> float:
    return per_minute * q.burst_s / 60.0 if per_minute is not None else 0.0


def refusal(q: TenantQuota, use: TenantUse, cost: float, t: float) -> tuple[str | None, float, float]:
    """Why ``q`` refuses a request costing ``cost`` tokens at ``t`` (None: admitted), with the buckets' levels at
    ``t`` before the request takes from them."""
    requests = bucket_level(use.requests, use.at, t, q.rpm, _depth(q.rpm, q)) if q.rpm is not None else 0.0
    tokens = bucket_level(use.tokens, use.at, t, q.tpm, _depth(q.tpm, q)) if q.tpm is not None else 0.0
    if q.token_budget is not None and use.spent + cost > q.token_budget:
        return "budget_exhausted", requests, tokens
    if q.concurrency is not None and use.in_flight >= q.concurrency:
        return "concurrency_limit", requests, tokens
    if q.rpm is not None and requests < 1.0:
        return "rate_limit", requests, tokens
    if q.tpm is not None and tokens < min(cost, _depth(q.tpm, q)):  # a request bigger than the bucket waits for it full
        return "tpm_limit", requests, tokens
    return None, requests, tokens
