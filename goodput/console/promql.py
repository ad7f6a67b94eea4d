"""The PromQL each page runs. Raw metric names come from the catalog (``goodput/contracts/catalog.py``); recorded
series are the rules' (``rules/*.rules.yaml``), listed in ``RECORDED`` so a test checks they exist."""

from __future__ import annotations

from goodput.console.filters import Filters, label_matchers
from goodput.contracts.catalog import by_name
from goodput.contracts.vocabulary import GATEWAY_REJECT_REASONS

__all__ = ["RECORDED", "gateway", "kv", "overload", "overview", "routing"]

RECORDED = (
    "deployment_tier_route:llm_slo_ttft:attainment_5m", "deployment_tier_route:llm_slo_tpot:attainment_5m",
    "deployment_tier_route:llm_slo_ttft_errors:ratio_rate1h", "deployment_tier_route:llm_slo_tpot_errors:ratio_rate1h",
    "tier_route:llm_slo_objective:config", "deployment:llm_replicas_available:max",
    "deployment:llm_replicas_required:ceil", "deployment_tier:llm_gateway_queue_wait_seconds:p95_5m",
    "deployment:llm_kv_cache_usage_ratio:avg", "deployment:llm_gateway_tokens:rate5m",
    "deployment:llm_preemptions:rate5m", "deployment:llm_gateway_kv_capacity_rejections:rate5m",
    "deployment_tier_reason:llm_gateway_rejections:ratio_rate5m",
)


def _m(name: str) -> str:
    return by_name(name).name  # KeyError for a name that is not in the catalog


def _sel(f: Filters, labels: tuple[str, ...] = ("deployment", "tier")) -> str:
    m = label_matchers(f, labels)
    return "{" + m + "}" if m else ""


def overview(f: Filters) -> dict[str, str]:
    """Instant queries, each giving one value per (deployment[, tier[, route]])."""
    dt, d = _sel(f), _sel(f, ("deployment",))
    burn = "deployment_tier_route:llm_slo_{sli}_errors:ratio_rate1h{sel} / on (tier, route) group_left () " \
           "(1 - tier_route:llm_slo_objective:config)"
    goodput = _m("llm_capacity_replica_goodput_tokens_per_second")
    return {
        "ttft_attainment": f"deployment_tier_route:llm_slo_ttft:attainment_5m{dt}",
        "tpot_attainment": f"deployment_tier_route:llm_slo_tpot:attainment_5m{dt}",
        "ttft_burn_1h": burn.format(sli="ttft", sel=dt),
        "tpot_burn_1h": burn.format(sli="tpot", sel=dt),
        "replicas_available": f"deployment:llm_replicas_available:max{d}",
        "replicas_required": f"deployment:llm_replicas_required:ceil{d}",
        "queue_wait_p95_s": f"deployment_tier:llm_gateway_queue_wait_seconds:p95_5m{dt}",
        "kv_usage": f"deployment:llm_kv_cache_usage_ratio:avg{d}",
        "demand_tokens_per_s": f"deployment:llm_gateway_tokens:rate5m{d}",
        "capacity_tokens_per_s": f"deployment:llm_replicas_available:max{d} * on (deployment) "
                                 f"max by (deployment) ({goodput}{d})",
    }


def kv(f: Filters) -> dict[str, str]:
    """Range queries for the KV & scheduler page."""
    d = _sel(f, ("deployment",))
    return {
        "KV usage per replica": f"max by (deployment, replica) ({_m('llm_kv_cache_usage_ratio')}{d})",
        "preemptions /s": f"deployment:llm_preemptions:rate5m{d}",
        "KV-capacity rejections /s": f"deployment:llm_gateway_kv_capacity_rejections:rate5m{d}",
        "waiting": f"sum by (deployment) ({_m('llm_requests_waiting')}{d})",
        "running": f"sum by (deployment) ({_m('llm_requests_running')}{d})",
    }


def routing(f: Filters) -> dict[str, str]:
    """Range queries for the Routing page."""
    d, dt = _sel(f, ("deployment",)), _sel(f)
    hit, asked = _m("llm_prefix_cache_hit_tokens_total"), _m("llm_prefix_cache_queried_tokens_total")
    return {
        "load per replica (running + waiting)":
            f"sum by (deployment, replica) ({_m('llm_requests_running')}{d}) + "
            f"sum by (deployment, replica) ({_m('llm_requests_waiting')}{d})",
        "prefix-cache hit ratio per replica":
            f"sum by (deployment, replica) (rate({hit}{d}[5m])) / "
            f"sum by (deployment, replica) (rate({asked}{d}[5m]))",
        "rejections by reason (share of requests)": f"deployment_tier_reason:llm_gateway_rejections:ratio_rate5m{dt}",
    }


# the charts above whose values are shares of 1: drawn in percent, from 0, as the tables show shares
SHARES = frozenset({"KV usage per replica", "prefix-cache hit ratio per replica",
                    "rejections by reason (share of requests)"})


def gateway(f: Filters, range_s: int) -> dict[str, str]:
    """Instant queries for the Routing page's gateway: per tenant and tier over the last ``range_s`` seconds, its
    admission decisions and its rejections by the gateway's reasons (an engine's queue_full or queue_timeout
    counts there too: the exporter reads the reason, not who gave it)."""
    m = label_matchers(f, ("deployment", "tier", "tenant"))
    reasons = f'reason=~"{"|".join(GATEWAY_REJECT_REASONS)}"'
    return {
        "decisions": f"sum by (tenant, tier, decision) (increase({_m('llm_gateway_admissions_total')}"
                     f"{{{m}}}[{range_s}s]))",
        "rejections": f"sum by (tenant, tier, reason) (increase({_m('llm_gateway_rejections_total')}"
                      f"{{{','.join(x for x in (m, reasons) if x)}}}[{range_s}s]))",
    }


def overload(f: Filters, range_s: int) -> dict[str, str]:
    """Instant queries for the Routing page's overload ladder and fallback routes: each deployment's ladder step at
    its newest admission (now), each primary's circuit breaker state (the same query over the range draws its
    timeline), the fallback paths primary -> backup by reason as requests per second over the last
    ``range_s`` seconds (a deployment filter keeps the paths from it and to it), and what the ladder degraded there
    per tier and step."""
    d = label_matchers(f, ("deployment",))
    fallbacks, t = _m("llm_gateway_fallbacks_total"), label_matchers(f, ("tier", "tenant"))
    paths = "sum by (fallback_from, deployment, reason) (rate({m}{{{sel}}}[{r}s]))"
    to = paths.format(m=fallbacks, sel=",".join(x for x in (d, t) if x), r=range_s)
    away = paths.format(m=fallbacks, sel=",".join(x for x in (d.replace("deployment=", "fallback_from=", 1), t) if x),
                        r=range_s)
    return {
        "steps": f"max by (deployment, step) ({_m('llm_gateway_overload_step')}{_sel(f, ('deployment',))})",
        "circuits": f"max by (deployment, state) ({_m('llm_gateway_circuit_state')}{_sel(f, ('deployment',))})",
        "fallbacks": f"{to} or {away}" if d else to,
        "degradations": f"sum by (deployment, tier, step) (increase({_m('llm_gateway_degradations_total')}"
                        f"{_sel(f, ('deployment', 'tier', 'tenant'))}[{range_s}s]))",
    }
