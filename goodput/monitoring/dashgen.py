"""Grafana dashboards as code: dashboards/*.json, generated from the metric catalog and the recorded rules.

Built with Grafana's ``grafana-foundation-sdk`` (typed builders for the dashboard schema Grafana itself
publishes). Every query names a metric through :meth:`Names.m` (the catalog, ``goodput/contracts/catalog.py``) or
:meth:`Names.r` (a series ``goodput.monitoring.rulegen`` records from the same spec), so a renamed metric or rule fails
generation instead of leaving an empty panel. Uids, panel ids and variables are fixed in
``goodput.contracts.dashboard_ids``: alerts link to them. The JSON is committed; ``--check`` fails when it is stale.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from grafana_foundation_sdk.builders import common as gc
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from goodput.analyzer.releases import load_releases
from goodput.contracts import dashboard_ids as ids
from goodput.contracts import recorded
from goodput.contracts.catalog import GATEWAY_BUCKETS, by_name, names
from goodput.contracts.recorded import (
    AUTOSCALE_DESIRED,
    AUTOSCALE_SIGNAL,
    KV_USAGE_AVG,
    QUEUE_WAIT_P95,
    TOKENS_RATE,
    tier_quantile,
)
from goodput.foundation.errors import ConfigError
from goodput.monitoring.placeholders import Knob, fill, mark, params
from goodput.monitoring.rulegen import BURN_WINDOWS, CIRCUIT_OPEN, OVERLOAD_ACTIONS, QUOTA_REJECTIONS, RULE_FILES, Spec, knobs
from goodput.monitoring.rulegen import build as build_rules

__all__ = ["KNOBS", "PROMETHEUS_BUILTINS", "RELEASE_RULE", "Names", "Panel", "Query", "build", "release_rules", "templates",
           "write"]

# the dashboards' configurable values besides the rules' (goodput.monitoring.placeholders; the mixin's _config)
TAGS = ["goodput", "llm"]  # every dashboard's; its dashboard menu lists the dashboards with the first


def _refresh(v: str, src: str, key: str) -> str:
    if not re.fullmatch(r"|[1-9][0-9]*(ms|s|m|h|d)", v):
        raise ConfigError(src, key, f"expected a Grafana refresh interval (30s, 1m, or \"\" for off), got {v!r}")
    return v


KNOBS = (Knob("datasourceUid", ("datasourceUid",), "text", "${datasource}",
              "the Prometheus data source of every query (default: the dashboard's Data source variable)"),
         Knob("dashboardNamePrefix", ("dashboardNamePrefix",), "text", "",
              "put before every dashboard's title (e.g. 'Team / ')"),
         Knob("dashboardTags", ("dashboardTags",), "strings", TAGS,
              "every dashboard's tags; the dashboards menu of each lists those with the first"),
         Knob("refresh", ("refresh",), "text", "30s", "every dashboard's refresh interval ('' for off)", _refresh))
DATASOURCE = common.DataSourceRef(type_val="prometheus", uid=mark("datasourceUid"))
RELEASE_RULE = "deployment:llm_release:timestamp_seconds"
# series Prometheus itself provides: target health and the alerts it evaluates
PROMETHEUS_BUILTINS = ("up", "ALERTS")
TOKENS_PER_S = "suffix: tokens/s"  # Grafana has no token unit; a suffix keeps the SI scaling
UNITS = {"bytes": "bytes", "watts": "watt", "celsius": "celsius", "hertz": "hertz", "seconds": "s", "ratio": "percentunit"}


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    id: int
    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"  # or "table" (instant)
    threshold: float | None = None  # a line drawn at this value (an alert or autoscaling target)
    max: float | None = None
    stacked: bool = False  # the series add up (parts of one whole)
    repeat: str | None = None  # one panel per value of this variable (so stacks never mix its values)


class Names:
    """Metric and recorded-rule names, checked: a query can only name what the catalog or the rules define."""

    def __init__(self, spec: Spec) -> None:
        self.catalog = names()
        self.recorded = {r["record"] for text in _rule_docs(spec) for g in text["groups"] for r in g["rules"]
                         if "record" in r} | {RELEASE_RULE}
        self.spec = spec

    def m(self, name: str) -> str:
        if name not in self.catalog:
            raise ValueError(f"{name} is not in goodput/contracts/catalog.py")
        return name

    def r(self, name: str) -> str:
        if name not in self.recorded:
            raise ValueError(f"{name} is not recorded by goodput.monitoring.rulegen")
        return name


def _rule_docs(spec: Spec) -> list[dict]:
    text = build_rules(spec)
    return [yaml.safe_load(text[f]) for f in RULE_FILES]


def _sel(*labels: str) -> str:
    """A label selector filtering on the dashboard variables named in ``labels`` (each a regex of its values)."""
    return "{" + ",".join(f'{x}=~"${x}"' for x in labels) + "}"


# appended to the description of each panel that draws histogram_quantile over the gateway's latency buckets
QUANTILE_NOTE = (f" A histogram quantile is known only to within its bucket: at or under {GATEWAY_BUCKETS[0] * 1e3:g} ms "
                 f"(the first bucket) it is an upper bound, interpolated from 0, not a measurement; at "
                 f"{GATEWAY_BUCKETS[-1]:g} s it is a lower bound (the quantile fell past the last bucket).")


# the same for an engine histogram, whose buckets are the engine's (the exporter passes them on)
ENGINE_QUANTILE_NOTE = (" A histogram quantile is known only to within its bucket, here the engine's own: in the first "
                        "bucket it is an upper bound, interpolated from 0, and past the last finite one it is that "
                        "bound (a lower bound), not a measurement.")


def _quantile(q: float, metric: str, by: str, sel: str) -> str:
    return f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket{sel}[$__rate_interval])))"


# ------------------------------------------------------------------ the five dashboards


def _fleet(n: Names) -> list[Panel]:
    dtr = _sel("deployment", "tier", "route")
    burn_windows = dict.fromkeys(long for _, _, long, _, _, _ in BURN_WINDOWS)
    burn_alerts = "; ".join(f"{alert} {factor:g}x over {long}" for alert, _, long, _, factor, _ in BURN_WINDOWS)
    att = {s: n.r(f"deployment_tier_route:llm_slo_{s}:attainment_5m") for s in ("ttft", "tpot")}
    joint = (f'min by (deployment, tier) (label_replace({att["ttft"]}, "sli", "ttft", "", "") or '
             f'label_replace({att["tpot"]}, "sli", "tpot", "", ""))')
    tokens = (f"({n.r('deployment_tier:llm_gateway_input_tokens:rate5m')}{_sel('deployment', 'tier')} + on (deployment, "
              f"tier) {n.r('deployment_tier:llm_gateway_output_tokens:rate5m')})")
    objective = n.r("tier_route:llm_slo_objective:config")
    return [
        Panel(1, "TTFT SLO attainment", "Share of requests whose client-edge time to first token met the tier and "
              "route's SLO threshold over the last 5 minutes (rules/slos.yaml).", "percentunit",
              (Query(f"{att['ttft']}{dtr}", "{{deployment}} {{tier}} {{route}}"),), max=1),
        Panel(2, "TPOT SLO attainment", "Share of requests whose time per output token met the tier and route's SLO "
              "threshold over the last 5 minutes.", "percentunit",
              (Query(f"{att['tpot']}{dtr}", "{{deployment}} {{tier}} {{route}}"),), max=1),
        Panel(ids.FLEET_BURN_RATE, "SLO error-budget burn rate",
              "How many times faster than the objective allows the error budget burns, per SLI, over the long windows "
              f"of the burn-rate alerts ({burn_alerts}; each also over a short window). 1 = on budget.", "x",
              tuple(Query(f"{n.r(f'deployment_tier_route:llm_slo_{s}_errors:ratio_rate{w}')}{dtr}"
                          f" / on (tier, route) group_left () (1 - {objective})",
                          f"{s} {w} {{{{deployment}}}} {{{{tier}}}} {{{{route}}}}")
                    for s in ("ttft", "tpot") for w in burn_windows), threshold=1.0),
        Panel(4, "Goodput vs demand", "Demand: input + output tokens/s arriving at the gateway. Goodput: the same "
              "tokens weighted by the lower of the TTFT and TPOT SLO attainment of their tier, i.e. tokens/s served "
              "within the SLO (an estimate from 5-minute attainment ratios).", TOKENS_PER_S,
              (Query(f"sum by (deployment) {tokens}", "demand {{deployment}}"),
               Query(f"sum by (deployment) ({tokens} * on (deployment, tier) group_left {joint})",
                     "goodput {{deployment}}"))),
        Panel(5, "Replicas available vs required", "Available replicas (llm_deployment_replicas) against the replicas "
              "the demand requires at the capacity plan's per-replica goodput, with the configured redundancy.",
              "short", (Query(f"{n.r('deployment:llm_replicas_available:max')}{_sel('deployment')}",
                              "available {{deployment}}"),
                        Query(f"{n.r('deployment:llm_replicas_required:ceil')}{_sel('deployment')}",
                              "required {{deployment}}"))),
        Panel(ids.FLEET_FIRING_ALERTS, "Firing alerts", "Alerts Prometheus evaluates as firing now, by name, "
              "severity and deployment (GoodputWatchdog always fires: it proves the pipeline works).", "short",
              (Query('sum by (alertname, severity, deployment, tier) (ALERTS{alertstate="firing"})', ""),),
              kind="table"),
        Panel(ids.FLEET_EXPORTERS_UP, "Exporters up", "Prometheus's scrape health of goodput's exporters; 0 means "
              "that part of the fleet is invisible (LLMExporterDown).", "short",
              (Query(f"up{{{mark('exporterSelector')}}}", "{{job}} {{instance}}"),), max=1),
    ]


def _deployment(n: Names) -> list[Panel]:
    dt, d = _sel("deployment", "tier"), _sel("deployment")
    pct = lambda metric, qs: tuple(  # noqa: E731
        Query(f"{n.r(tier_quantile(metric, q))}{dt}", f"{q} {{{{deployment}}}} {{{{tier}}}}") for q in qs)
    rate = lambda metric: f"sum by (deployment) (rate({n.m(metric)}{d}[$__rate_interval]))"  # noqa: E731
    gen = f"sum by (deployment, replica) (rate({n.m('llm_generation_tokens_total')}{d}[$__rate_interval]))"
    return [
        Panel(ids.DEPLOYMENT_QUEUE_WAIT, "Queue wait p50 / p95 / now", "Time from admission at the gateway to "
              "engine scheduling, per tier: of the requests scheduled in 5 minutes (histogram quantiles), and now (the "
              "oldest still queued, or that p95, whichever is longer). The queue alert fires when the wait now is above "
              "the tier's threshold, the engines' queue grows, and replicas are short." + QUANTILE_NOTE, "s",
              (*pct("llm_gateway_queue_wait_seconds", ("p50", "p95")),
               Query(f"{n.r(recorded.QUEUE_WAIT_NOW)}{dt}", "now {{deployment}} {{tier}}"))),
        Panel(ids.DEPLOYMENT_TTFT, "TTFT p50 / p95 / p99", "Client-edge time to first token per tier (histogram "
              "quantiles over 5 minutes), and p99 per route, which LLMTTFTSLOBreachWithRejects holds against the "
              "route's SLO threshold." + QUANTILE_NOTE, "s",
              (*pct("llm_gateway_time_to_first_token_seconds", ("p50", "p95", "p99")),
               Query(f"{n.r('deployment_tier_route:llm_gateway_time_to_first_token_seconds:p99_5m')}{dt}",
                     "p99 {{deployment}} {{tier}} {{route}}"))),
        Panel(3, "TPOT p50 / p95 / p99", "Time per output token after the first, per tier (histogram quantiles over "
              "5 minutes)." + QUANTILE_NOTE, "s", pct("llm_gateway_time_per_output_token_seconds", ("p50", "p95", "p99"))),
        Panel(4, "E2E latency p50 / p95 / p99", "Client-edge request latency per tier (histogram quantiles over "
              "5 minutes)." + QUANTILE_NOTE, "s", pct("llm_gateway_e2e_latency_seconds", ("p50", "p95", "p99"))),
        Panel(5, "Running vs waiting", "Sequences in the engines' running batches and requests queued in the "
              "engines, summed over the deployment's replicas.", "short",
              (Query(f"sum by (deployment) ({n.m('llm_requests_running')}{d})", "running {{deployment}}"),
               Query(f"sum by (deployment) ({n.m('llm_requests_waiting')}{d})", "waiting {{deployment}}"))),
        Panel(6, "KV-cache usage", "Fraction of KV-cache blocks in use: the fullest replica and the mean. Near 1, "
              "new sequences preempt running ones.", "percentunit",
              (Query(f"{n.r('deployment:llm_kv_cache_usage_ratio:max')}{d}", "max {{deployment}}"),
               Query(f"{n.r(KV_USAGE_AVG)}{d}", "mean {{deployment}}")), max=1),
        Panel(ids.DEPLOYMENT_KV_FAILURES, "KV allocation failures: preemptions and KV-capacity rejections",
              "Sequences preempted because a KV block could not be allocated, and requests the gateway refused for "
              "KV capacity, per second over 5 minutes (LLMKVCacheAllocationFailures).", "reqps",
              (Query(f"{n.r('deployment:llm_preemptions:rate5m')}{d}", "preemptions {{deployment}}"),
               Query(f"{n.r('deployment:llm_gateway_kv_capacity_rejections:rate5m')}{d}",
                     "KV-capacity rejections {{deployment}}")),
              threshold=float(n.spec.thresholds["preemptions_per_second"])),
        Panel(8, "Prefix-cache hit ratio", "Prompt tokens found in the prefix cache over prompt tokens looked up.",
              "percentunit", (Query(f"{rate('llm_prefix_cache_hit_tokens_total')} / "
                                    f"{rate('llm_prefix_cache_queried_tokens_total')}", "{{deployment}}"),), max=1),
        Panel(9, "Per-replica skew", "Each replica's generated tokens/s over its deployment's mean: 1 is an even "
              "spread; far from 1, the router or a slow replica unbalances the pool.", "short",
              (Query(f"{gen} / on (deployment) group_left avg by (deployment) ({gen})", "{{replica}}"),),
              threshold=1.0),
        Panel(10, "Rejections by reason", "Share of requests the gateway refused, by reason, per tier.",
              "percentunit", (Query(f"{n.r('deployment_tier_reason:llm_gateway_rejections:ratio_rate5m')}{dt}",
                                    "{{reason}} {{deployment}} {{tier}}"),)),
        *_kv_transfer(n),
        Panel(ids.DEPLOYMENT_ENGINES_UP, "Engines up and replicas", "Per replica, 1 when the last scrape of its "
              "engine succeeded, the engine exporter's or Prometheus' own where it scrapes the engines directly "
              "(LLMEngineDown); and the deployment's desired (from the plan) and available replicas.", "short",
              (Query(f"{n.m('llm_engine_up')}{d}", "{{replica}} up"),
               Query(f'up{{deployment=~"$deployment",replica!=""}} unless on (deployment, replica) '
                     f"{n.m('llm_engine_up')}", "{{replica}} up (scraped directly)"),
               Query(f"max by (deployment) ({n.m('llm_deployment_replicas')}"
                     f'{{state="desired",deployment=~"$deployment"}})', "desired {{deployment}}"),
               Query(f"{n.r('deployment:llm_replicas_available:max')}{d}", "available {{deployment}}"))),
    ]


def _kv_transfer(n: Names) -> list[Panel]:
    """P/D disaggregation: the KV cache's move from a prefill replica to a decode replica (empty for a deployment
    that prefills and decodes on the same replicas)."""
    d = _sel("deployment")
    rate = lambda metric, part="": f"sum by (deployment) (rate({n.m(metric)}{part}{d}[$__rate_interval]))"  # noqa: E731
    seconds = "llm_kv_transfer_seconds"
    return [
        Panel(12, "KV transfer p50 / p95 (P/D disaggregation)", "Time to move a request's KV cache from its prefill "
              "replica to its decode replica (histogram quantiles over the rate window), per deployment and p95 per "
              "replica; it is part of TTFT. Empty for a deployment that is not disaggregated. A rise while the bytes "
              "per second stay level is the link between the pools slowing (`goodput analyze triage` names it from "
              "the traces)." + ENGINE_QUANTILE_NOTE, "s",
              (*(Query(_quantile(q, n.m(seconds), "deployment", d), f"p{q * 100:g} {{{{deployment}}}}")
                 for q in (0.5, 0.95)),
               Query(_quantile(0.95, n.m(seconds), "deployment, replica", d), "p95 {{replica}}"))),
        Panel(13, "KV transfer bytes per second", "KV-cache bytes moved from prefill to decode replicas per second, "
              "and the rate a transfer achieves while it runs (bytes over seconds spent transferring): the link's "
              "effective bandwidth, which falls when the interconnect degrades or is shared.", "Bps",
              (Query(rate("llm_kv_transfer_bytes_total"), "moved {{deployment}}"),
               Query(f"{rate('llm_kv_transfer_bytes_total')} / {rate(seconds, '_sum')}",
                     "per transfer {{deployment}}"))),
        Panel(14, "KV transfer failures", "KV-cache transfers from prefill to decode replicas that failed per "
              "second, against the transfers that completed.", "reqps",
              (Query(rate("llm_kv_transfer_failures_total"), "failed {{deployment}}"),
               Query(rate(seconds, "_count"), "completed {{deployment}}"))),
    ]


def _tenants(n: Names) -> list[Panel]:
    c = _sel("model", "deployment", "tier", "tenant", "route")
    h = _sel("deployment", "tier", "route")
    rate = lambda metric, by: f"sum by ({by}) (rate({n.m(metric)}{c}[$__rate_interval]))"  # noqa: E731
    return [
        Panel(1, "Requests per tenant", "Requests per second at the gateway, per tenant (tenants beyond the request "
              "exporter's --max-tenants are folded into `other`).", "reqps",
              (Query(rate("llm_gateway_requests_total", "tenant"), "{{tenant}}"),)),
        Panel(2, "Requests by route and outcome", "Requests per second per route and outcome (ok, rejected, "
              "timeout, error, cancelled).", "reqps",
              (Query(rate("llm_gateway_requests_total", "route, outcome"), "{{route}} {{outcome}}"),)),
        Panel(3, "Input tokens per tenant", "Prompt tokens per second per tenant.", TOKENS_PER_S,
              (Query(rate("llm_gateway_input_tokens_total", "tenant"), "{{tenant}}"),)),
        Panel(4, "Output tokens per tenant", "Generated tokens per second per tenant.", TOKENS_PER_S,
              (Query(rate("llm_gateway_output_tokens_total", "tenant"), "{{tenant}}"),)),
        Panel(5, "Rejections by reason", "Requests per second the gateway refused, per reason and tenant.", "reqps",
              (Query(rate("llm_gateway_rejections_total", "reason, tenant"), "{{reason}} {{tenant}}"),)),
        Panel(6, "TTFT p95 per tier and route", "Client-edge time to first token, p95 per tier and route (the "
              "latency histograms carry no tenant label, to bound the series count)." + QUANTILE_NOTE, "s",
              (Query(_quantile(0.95, n.m("llm_gateway_time_to_first_token_seconds"), "tier, route", h),
                     "{{tier}} {{route}}"),)),
        Panel(7, "TPOT p95 per tier and route", "Time per output token, p95 per tier and route." + QUANTILE_NOTE, "s",
              (Query(_quantile(0.95, n.m("llm_gateway_time_per_output_token_seconds"), "tier, route", h),
                     "{{tier}} {{route}}"),)),
        Panel(8, "E2E latency p95 per tier and route", "Client-edge request latency, p95 per tier and route."
              + QUANTILE_NOTE, "s",
              (Query(_quantile(0.95, n.m("llm_gateway_e2e_latency_seconds"), "tier, route", h),
                     "{{tier}} {{route}}"),)),
        Panel(ids.TENANTS_QUOTA_REJECTIONS, "Quota rejections per tenant", "Share of each tenant's requests the "
              "gateway refused for the tenant's own limits (rate, tokens per minute, concurrency, token budget) over 5 "
              "minutes; LLMTenantAtQuota opens a ticket when it stays over the least rejection share while P0 meets "
              "its SLO.", "percentunit",
              (Query(f"{n.r(QUOTA_REJECTIONS)}{_sel('deployment', 'tenant')}", "{{tenant}} {{deployment}}"),)),
        Panel(ids.TENANTS_OVERLOAD_ACTIONS, "Degraded and fallen back", "Share of each deployment's requests the "
              "overload ladder degraded (output cap, context trim) or that a fallback route moved to or away from it, "
              "over 5 minutes; LLMOverloadProtectionNotHoldingP0 pages when it grows while P0 burns its TTFT budget, "
              "LLMOverloadProtectionEngaged opens a ticket when it lasts while P0 holds.", "percentunit",
              (Query(f"{n.r(OVERLOAD_ACTIONS)}{_sel('deployment')}", "{{action}} {{deployment}}"),)),
        Panel(ids.TENANTS_FALLBACK_PATHS, "Fallback paths", "Requests per second a backup served instead of their "
              "primary, per primary, backup and reason (circuit_open: the primary's breaker is open, LLMCircuitOpen "
              "pages; capacity; unavailable).", "reqps",
              (Query(rate("llm_gateway_fallbacks_total", "fallback_from, deployment, reason"),
                     "{{fallback_from}} -> {{deployment}} {{reason}}"),
               Query(f"{n.r(CIRCUIT_OPEN)}{_sel('deployment')}", "circuit open: {{deployment}} -> {{backup}}"))),
        Panel(12, "Circuit breakers", "Each primary's circuit breaker while it is not closed: 1 on open (its traffic "
              "goes to a backup) or half_open (one probe goes through), from the newest admission routed at it "
              "(llm_gateway_circuit_state, resilience4j's convention: one series per state, 1 on the current one); "
              "nothing drawn while closed.", "short",
              (Query(f'max by (deployment, state) ({n.m("llm_gateway_circuit_state")}'
                     f'{{deployment=~"$deployment",state!="closed"}} == 1)', "{{deployment}} {{state}}"),), max=1),
    ]


def _gpus(n: Names) -> list[Panel]:
    key = "gpu, uuid, instance"
    owner = (f"* on ({key}) group_left (deployment, replica) max by ({key}, deployment, replica) "
             f"({n.m('llm_gpu_deployment_info')}{_sel('deployment')})")
    own = lambda expr, by=key: f"max by ({by}) ({expr}) {owner}"  # noqa: E731
    per_gpu = "{{deployment}} {{replica}} GPU {{gpu}}"

    def gauge(id_: int, title: str, metric: str) -> Panel:
        spec = by_name(metric)
        return Panel(id_, title, f"{spec.help} Per GPU, with the deployment and replica that run on it.",
                     UNITS[spec.unit], (Query(own(n.m(metric)), per_gpu),))

    return [
        Panel(ids.GPUS_LOST, "GPUs lost", "1 when a GPU cannot be read or has fallen off the bus (llm_gpu_up == 0, "
              "or DCGM's XID 79), per GPU of the selected deployments (LLMGPULost).", "short",
              (Query(own(n.r("gpu:llm_gpu_lost:bool")), per_gpu),), max=1),
        Panel(2, "GPU utilisation", "GPU busy fraction per GPU, from goodput's GPU exporter or dcgm-exporter "
              "(DCGM_FI_DEV_GPU_UTIL, via the compatibility rule). Busy is not saturated: read it with KV usage and "
              "queue wait.", "percentunit", (Query(own(n.r("gpu:llm_gpu_utilization:ratio")), per_gpu),), max=1),
        Panel(3, "GPU memory used", "Framebuffer memory used per GPU (goodput's exporter or DCGM_FI_DEV_FB_USED), "
              "and the total.", "bytes",
              (Query(own(n.r("gpu:llm_gpu_memory_used:bytes")), f"used {per_gpu}"),
               Query(own(n.m("llm_gpu_memory_total_bytes")), f"total {per_gpu}"))),
        gauge(4, "Power draw", "llm_gpu_power_watts"),
        gauge(5, "Temperature", "llm_gpu_temperature_celsius"),
        Panel(ids.GPUS_XID, "XID errors", "XID error events per GPU and code in the last 5 minutes (goodput's "
              "exporter or DCGM_FI_DEV_XID_ERRORS); critical codes page (LLMGPUXidErrors).", "short",
              (Query(own(n.r("gpu_xid:llm_gpu_xid_errors:increase5m"), f"{key}, xid"), f"{per_gpu} XID {{{{xid}}}}"),)),
        Panel(7, "Utilisation per deployment", "Mean GPU busy fraction of each deployment's GPUs.", "percentunit",
              (Query(f"avg by (deployment) ({own(n.r('gpu:llm_gpu_utilization:ratio'))})", "{{deployment}}"),), max=1),
        gauge(8, "SM clock", "llm_gpu_sm_clock_hertz"),
    ]


def _capacity(n: Names) -> list[Panel]:
    d = _sel("deployment")
    demand = f"{n.r(TOKENS_RATE)}{d}"
    capacity = (f"({n.r('deployment:llm_replicas_available:max')}{d} * on (deployment) max by (deployment) "
                f"({n.m('llm_capacity_replica_goodput_tokens_per_second')}))")
    th = n.spec.thresholds
    return [
        Panel(1, "Demand vs capacity", "Demand: input + output tokens/s at the gateway. Capacity: available replicas "
              "times the capacity plan's per-replica SLO goodput.", TOKENS_PER_S,
              (Query(demand, "demand {{deployment}}"), Query(capacity, "capacity {{deployment}}"))),
        Panel(2, "Headroom", "1 - demand / capacity: the share of capacity still free. Below 0 the deployment "
              "serves more than it can within the SLO.", "percentunit",
              (Query(f"1 - {demand} / on (deployment) {capacity}", "{{deployment}}"),), threshold=0.0),
        Panel(3, "Autoscaling signal", f"{AUTOSCALE_DESIRED}, the replica count an "
              "autoscaler (KEDA, docs/autoscaling.md) should target: the largest of the demand, KV and queue signals; "
              "against the replicas available.", "short",
              (Query(f"{n.r(AUTOSCALE_DESIRED)}{d}", "desired {{deployment}}"),
               Query(f"{n.r(AUTOSCALE_SIGNAL)}{d}", "{{signal}} signal {{deployment}}"),
               Query(f"{n.r('deployment:llm_replicas_available:max')}{d}", "available {{deployment}}"))),
        Panel(4, "KV usage vs autoscaling target", "Mean KV-cache usage; the kv signal asks for more replicas above "
              f"the target ({th['autoscale_kv_target_ratio']:g}, thresholds.autoscale_kv_target_ratio).", "percentunit",
              (Query(f"{n.r(KV_USAGE_AVG)}{d}", "{{deployment}}"),),
              threshold=float(th["autoscale_kv_target_ratio"]), max=1),
        Panel(5, "Queue wait p95 vs autoscaling target", "Worst tier's p95 queue wait; the queue signal asks for "
              f"more replicas above the target ({th['autoscale_queue_target_seconds']:g} s, "
              "thresholds.autoscale_queue_target_seconds)." + QUANTILE_NOTE, "s",
              (Query(f"max by (deployment) ({n.r(QUEUE_WAIT_P95)}{d})", "{{deployment}}"),),
              threshold=float(th["autoscale_queue_target_seconds"])),
        Panel(ids.CAPACITY_COLD_START, "Cold start vs plan", "Replicas' cold start (process start to the engine "
              "exporter's first answered scrape): the p90 over the last day and each replica's, against the cold start "
              "the capacity plan was sized on. LLMColdStartAbovePlan opens a ticket when the p90 is over the plan's.",
              "s", (Query(f"{n.r('deployment:llm_replica_cold_start_seconds:p90_1d')}{d}", "p90 {{deployment}}"),
                    Query(f"{n.m('llm_replica_cold_start_seconds')}{d}", "{{replica}}"),
                    Query(f"max by (deployment) ({n.m('llm_capacity_cold_start_seconds')}{d})",
                          "plan {{deployment}}"))),
        Panel(ids.CAPACITY_COLD_START_PHASES, "Cold start phases (Kubernetes)", "The mean cold start of $deployment's "
              "replicas created in the last day, by phase, stacked up to their pod's creation to Ready, from "
              "kube-state-metrics (rules/kube.rules.yaml): scheduling, pull_and_create (image pulls, volumes, init "
              "containers), then engine_start and warm_up where the engine exporter measures the process, else "
              "start_to_ready. LLMColdStartAbovePlan compares the p90 of the whole against the plan.", "s",
              (Query(f"avg by (deployment, phase) (max_over_time({n.m('llm_replica_cold_start_phase_seconds')}{d}[1d]))",
                     "{{phase}}"),), stacked=True, repeat="deployment"),
        *_cost(n, d),
    ]


def _cost(n: Names, d: str) -> list[Panel]:
    """The cost rules' series (rules/cost.rules.yaml, docs/cost.md) on the capacity dashboard."""
    return [
        Panel(6, "Cost per hour and idle", "What each deployment's GPUs cost per hour (their count x the prices "
              "file's $/GPU-hour), and the part that served no goodput (idle).", "currencyUSD",
              (Query(f"{n.m('llm_total_hourly_cost')}{d}", "$/hour {{deployment}}"),
               Query(f"{n.m('llm_idle_hourly_cost')}{d}", "idle $/hour {{deployment}}"))),
        Panel(7, "Cost per 1M tokens and per 1M goodput tokens", "Dollars per 1M prompt and generated tokens (a "
              "generated token weighs the cost rules' decode weight in prompt tokens), and per 1M tokens of requests "
              "that met their SLO.", "currencyUSD",
              (Query(f"{n.m('llm_cost_per_million_tokens')}{d}", "{{phase}} {{deployment}}"),
               Query(f"{n.m('llm_cost_per_million_goodput_tokens')}{d}", "goodput {{deployment}}"))),
        Panel(8, "Cost per tenant", "Each tenant's share of its deployment's $/hour, by its cost-weighted tokens.",
              "currencyUSD", (Query(f"sum by (deployment, tier, tenant) ({n.m('llm_tenant_hourly_cost')}{d})",
                                    "{{tenant}} {{tier}} {{deployment}}"),)),
    ]


PANELS: dict[ids.Board, Callable[[Names], list[Panel]]] = {
    ids.FLEET: _fleet, ids.DEPLOYMENT: _deployment, ids.TENANTS: _tenants, ids.GPUS: _gpus, ids.CAPACITY: _capacity}


# ------------------------------------------------------------------ variables, annotations, JSON


def variable_queries(n: Names) -> dict[str, str]:
    """Template variable -> its ``label_values`` query, each chained on the ones before it."""
    gw = n.m("llm_gateway_requests_total")
    # a family every engine dialect has, from the engine exporter or the normalization rules alike (llm_engine_up
    # is the exporter's alone: on Kubernetes, engines scraped directly would leave the variables empty)
    engines = n.m("llm_requests_waiting")
    return {
        "model": f"label_values({engines}, model)",
        "deployment": f'label_values({engines}{{model=~"$model"}}, deployment)',
        "tier": f'label_values({gw}{{deployment=~"$deployment"}}, tier)',
        "tenant": f'label_values({gw}{{deployment=~"$deployment",tier=~"$tier"}}, tenant)',
        "route": f'label_values({gw}{{deployment=~"$deployment",tier=~"$tier"}}, route)',
    }


def annotation_queries(n: Names) -> dict[str, str]:
    return {
        # Grafana takes the value as the event time in milliseconds ("series value as timestamp")
        "Releases": f'{n.r(RELEASE_RULE)}{{deployment=~"$deployment|\\\\*"}} * 1000',
        "Firing alerts": 'ALERTS{alertstate="firing",alertname!="GoodputWatchdog",deployment=~"$deployment"}',
    }


# Prometheus annotation fields Grafana's Prometheus data source reads beside ``expr``: the schema leaves
# annotation queries open for each data source, and the SDK types only the common part.
ANNOTATION_EXTRAS = {
    "Releases": {"titleFormat": "{{kind}} release {{deployment}}", "textFormat": "{{from}} -> {{to}}",
                 "tagKeys": "deployment,kind", "useValueForTime": True, "step": "60s"},
    "Firing alerts": {"titleFormat": "{{alertname}}", "textFormat": "{{severity}} {{deployment}} {{tier}}",
                      "tagKeys": "alertname,severity", "useValueForTime": False, "step": "60s"},
}


WIDTH, HEIGHT = 12, 8  # two panels a row on Grafana's 24-column grid


def _panel(p: Panel, x: int, y: int) -> table.Panel | timeseries.Panel:
    b: table.Panel | timeseries.Panel
    if p.kind == "table":
        b = table.Panel().align(common.FieldTextAlignment.AUTO).inspect(False)
    else:
        lines = (timeseries.Panel().fill_opacity(10).line_width(1)
                 .legend(gc.VizLegendOptions().show_legend(True).display_mode(common.LegendDisplayMode.LIST)
                         .placement(common.LegendPlacement.BOTTOM).calcs([])))
        if p.threshold is not None:
            lines = (lines.thresholds_style(gc.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.DASHED))
                     .thresholds(gd.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(
                         [dm.Threshold(value=None, color="green"), dm.Threshold(value=p.threshold, color="red")])))
        if p.stacked:
            lines = lines.stacking(gc.StackingConfig().mode(common.StackingMode.NORMAL)).fill_opacity(60)
        b = lines
    if p.repeat is not None:
        b = b.repeat(p.repeat).repeat_direction("h")
    b = (b.id(p.id).title(p.title).description(p.description).unit(p.unit).datasource(DATASOURCE)
         .grid_pos(dm.GridPos(h=HEIGHT, w=WIDTH, x=x, y=y)).min(0))
    if p.max is not None:
        b = b.max(p.max)
    for i, q in enumerate(p.queries):
        t = prometheus.Dataquery().expr(q.expr).ref_id(chr(ord("A") + i)).datasource(DATASOURCE)
        if p.kind == "table":  # the builders set in place
            t.instant().format(pm.PromQueryFormat.TABLE)
        else:
            t.range().legend_format(q.legend or "__auto")
        b = b.with_target(t)
    return b


def _variable(name: str, query: str):
    return (gd.QueryVariable(name).label(name).datasource(DATASOURCE).query({"query": query, "refId": f"var-{name}"})
            .multi(True).include_all(True).all_value(".*").refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dm.VariableSort.ALPHABETICAL_ASC).current(dm.VariableOption(selected=True, text="All", value="$__all")))


def dashboard(board: ids.Board, n: Names) -> dict:
    """One dashboard as Grafana JSON (a dict)."""
    b = (gd.Dashboard(mark("dashboardNamePrefix") + board.title).uid(board.uid).tags(TAGS).refresh(mark("refresh"))
         .time("now-3h", "now")
         .timezone("browser").tooltip(dm.DashboardCursorSync.CROSSHAIR)
         .description(f"goodput: {board.title}, generated by `goodput dashboards generate` from the metric catalog "
                      "and the recorded rules. Do not edit in Grafana: regenerate.")
         .link(gd.DashboardLink("goodput").type(dm.DashboardLinkType.DASHBOARDS).tags(TAGS[:1]).as_dropdown(True)
               .include_vars(True).keep_time(True))
         .with_variable(gd.DatasourceVariable("datasource").label("Data source").type("prometheus")))
    queries = variable_queries(n)
    for var in board.variables:
        b = b.with_variable(_variable(var, queries[var]))
    for name, expr in annotation_queries(n).items():
        b = b.annotation(gd.AnnotationQuery().name(name).datasource(DATASOURCE).enable(True)
                         .icon_color("blue" if name == "Releases" else "red").expr(expr))
    for i, p in enumerate(PANELS[board](n)):
        b = b.with_panel(_panel(p, WIDTH * (i % 2), HEIGHT * (i // 2)))
    doc = json.loads(json.dumps(b.build(), cls=JSONEncoder))
    for a in doc["annotations"]["list"]:
        a.update(ANNOTATION_EXTRAS[a["name"]])
    return doc


def templates(spec: Spec) -> dict[str, dict]:
    """File name -> every dashboard, its configurable values placeholders (``KNOBS`` and the rules' ``knobs``)."""
    n = Names(spec)
    return {board.file: dashboard(board, n) for board in ids.BOARDS}


def build(spec: Spec) -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    docs = fill(templates(spec), params(knobs(spec) + KNOBS))
    return {name: json.dumps(doc, indent=2, sort_keys=True) + "\n" for name, doc in docs.items()}


def write(spec: Spec, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in build(spec).items():
        (out / name).write_text(text)
        paths.append(out / name)
    return paths


# ------------------------------------------------------------------ releases as a recorded series


def release_rules(releases: Path) -> str:
    """A Prometheus rule file recording one series per release of a releases file (docs/design.md), valued at its
    Unix time: Grafana's release annotation reads the value as the event's time ("series value as timestamp")."""
    rules = [{"record": RELEASE_RULE, "expr": f"vector({r.time.timestamp():.0f})",
              "labels": {"deployment": r.deployment, "kind": r.kind, "from": r.from_version, "to": r.to_version}}
             for r in load_releases(releases)]
    return ("# Generated by `goodput dashboards releases` from a releases file. Do not edit: regenerate.\n"
            + yaml.safe_dump({"groups": [{"name": "llm.releases", "rules": rules}]}, sort_keys=False, width=120))

