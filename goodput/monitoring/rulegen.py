"""Prometheus rules and the Alertmanager configuration, generated from one config file (rules/slos.yaml).

Like the kubernetes-mixin, expressions only interpolate configuration, every alert has one shape
(``severity``, a static ``summary``, a templated ``description``, a ``runbook_url`` built from one
pattern, a ``dashboard`` link), and recording rules are named ``level:metric:operation``. The generated
files are committed; a test regenerates them and fails when they are stale.

``scale`` shrinks every range and ``for`` duration (a test-only variant for live tests with 1 s scrapes);
the committed files use production durations.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from goodput.contracts.catalog import GATEWAY_BUCKETS, by_name
from goodput.contracts.dashboard_ids import alert_link
from goodput.contracts.recorded import (
    ARRIVALS_RATE,
    AUTOSCALE_DESIRED,
    AUTOSCALE_SIGNAL,
    KV_USAGE_AVG,
    QUEUE_WAIT_NOW,
    QUEUE_WAIT_P95,
    TOKENS_RATE,
    WAITING,
    tier_quantile,
)
from goodput.contracts.vocabulary import COLD_START_MEASURES, QUOTA_REASONS, TIERS
from goodput.foundation.durations import seconds
from goodput.foundation.errors import ConfigError
from goodput.foundation.yamlfile import load_mapping
from goodput.monitoring.placeholders import Knob, fill, mark, params, re2_problem
from goodput.plan.prices import ON_DEMAND, PRICINGS

__all__ = ["ALERTS", "COLD_START_WINDOW", "ENGINE_TARGETS", "RULE_FILES", "WATCHDOG", "Pricing", "Spec", "build", "dump",
           "knobs", "label_name", "load_spec", "scaled_duration", "templates", "write"]

# always firing, to prove the pipeline works: named apart from kube-prometheus' own `Watchdog` (which its chart routes
# to a null receiver), and of severity `none` as that one is, since its InfoInhibitor silences every `info` alert
WATCHDOG = "GoodputWatchdog"
ALERTS = ("LLMQueueWaitRisingReplicasShort", "LLMKVCacheAllocationFailures", "LLMTTFTSLOBreachWithRejects",
          "LLMSLOBurnRateFast", "LLMSLOBurnRateSlow", "LLMEngineDown", "LLMExporterDown", "LLMGPULost",
          "LLMGPUXidErrors", "LLMTenantAtQuota", "LLMOverloadProtectionNotHoldingP0", "LLMOverloadProtectionEngaged",
          "LLMCircuitOpen", "LLMColdStartAbovePlan", WATCHDOG)
# alerts about a deployment's queue and latency, silenced while its engine or GPU is down
SYMPTOMS = ("LLMQueueWaitRisingReplicasShort", "LLMTTFTSLOBreachWithRejects", "LLMKVCacheAllocationFailures",
            "LLMSLOBurnRateFast", "LLMSLOBurnRateSlow")
# the engines Prometheus scrapes itself (goodput deploy kubernetes' PodMonitors, or any scrape config that sets the
# target labels the normalization rules need): liveness and replica counts where no engine exporter is in the path
ENGINE_TARGETS = 'up{deployment!="", replica!=""}'
RULE_FILES = ("llm.rules.yaml", "slo.rules.yaml", "gpu.rules.yaml", "alerts.rules.yaml")
# SRE workbook multi-window, multi-burn-rate table (30-day budget): alert, severity, long and short window, burn
# factor, `for`. A page also needs the burn over PAGE_RESET: it is for a burn that is happening now, and lets go five
# minutes after requests are served in time again (docs/alerting.md "Letting go after a fix").
BURN_WINDOWS = (
    ("LLMSLOBurnRateFast", "page", "1h", "5m", 14.4, "2m"),
    ("LLMSLOBurnRateFast", "page", "6h", "30m", 6.0, "2m"),
    ("LLMSLOBurnRateSlow", "ticket", "1d", "2h", 3.0, "1h"),
    ("LLMSLOBurnRateSlow", "ticket", "3d", "6h", 1.0, "3h"),
)
PAGE_RESET = "5m"
COLD_START = "llm_replica_cold_start_seconds"
COLD_START_WINDOW = "1d"
COLD_START_P90 = "deployment:llm_replica_cold_start_seconds:p90_1d"
# on Kubernetes with kube-state-metrics: pod creation to Ready (rules/kube.rules.yaml), scheduling and image pulls in
POD_COLD_START = by_name("llm_replica_pod_cold_start_seconds").name
POD_COLD_START_P90 = f"deployment:{POD_COLD_START}:p90_1d"
SLIS = {"ttft": "llm_gateway_time_to_first_token_seconds", "tpot": "llm_gateway_time_per_output_token_seconds"}
# the gateway's refusals for a tenant's own limits (goodput/contracts/vocabulary.py QUOTA_REASONS, as the spans carry them)
QUOTA_REJECTIONS = "deployment_tenant:llm_gateway_quota_rejections:ratio_rate5m"
MISSED, ARRIVED = by_name("llm_gateway_ttft_missed_total").name, by_name("llm_gateway_requests_arrived_total").name
# the share of a deployment's requests the overload ladder degraded (action="degraded") or that fell back to or away
# from it (action="fallback"); and per primary (deployment) and backup, the requests its open circuit sends on
OVERLOAD_ACTIONS = "deployment_action:llm_gateway_overload_actions:ratio_rate5m"
CIRCUIT_OPEN = "deployment_backup:llm_gateway_circuit_open_fallbacks:rate5m"
OLDEST_QUEUED = "deployment_tier:llm_gateway_oldest_queued_age_seconds:max"
DEGRADATIONS, FALLBACKS = by_name("llm_gateway_degradations_total").name, by_name("llm_gateway_fallbacks_total").name
# P0 burning its TTFT budget as fast as the second page window says (6x over 30 minutes), and still in the last 5:
# the ladder and the fallbacks engaged and P0 still hurt is a page; engaged while P0 holds is their job done
_, _, _, PROTECTION_WINDOW, PROTECTION_BURN, _ = BURN_WINDOWS[1]


@dataclass(frozen=True)
class Slo:
    tier: str
    route: str
    ttft_seconds: float
    tpot_seconds: float
    objective: float


# a deployment name the pricing section may list: a Kubernetes-style name (it becomes a PromQL regex alternative)
DEPLOYMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")


@dataclass(frozen=True)
class Pricing:
    """Which pricing (goodput/plan/prices.py PRICINGS) each deployment's GPUs are paid at: ``deployments``' own,
    ``default`` for every other deployment."""

    default: str = ON_DEMAND
    deployments: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Spec:
    slos: tuple[Slo, ...]
    thresholds: dict[str, Any]
    alertmanager: dict[str, Any]
    links: dict[str, str]
    prices: Path | None = None  # the GPU prices file the cost rules price from (goodput/plan/prices.py), else the defaults
    pricing: Pricing = field(default_factory=Pricing)  # which pricing each deployment pays (the cost rules)


def _number(v: Any, src: str, key: str) -> float:
    """A finite number > 0 (a threshold, a bucket bound)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
        raise ConfigError(src, key, f"expected a finite number > 0, got {v!r}")
    return float(v)


def _section(data: dict, key: str, src: str, parent: str = "") -> dict:
    """``data[key]`` as a mapping ({} when absent); ``parent`` is the dotted path of ``data`` for the error."""
    v = data.get(key) or {}
    if not isinstance(v, dict):
        raise ConfigError(src, f"{parent}.{key}" if parent else key, f"expected a mapping, got {v!r}")
    return v


def _bucket(v: Any, src: str, key: str) -> float:
    v = _number(v, src, key)
    if not any(math.isclose(v, b) for b in GATEWAY_BUCKETS):
        raise ConfigError(src, key, f"{v:g} s is not a bucket boundary of the request exporter "
                                    f"({', '.join(f'{b:g}' for b in GATEWAY_BUCKETS)})")
    return float(v)


def load_spec(path: str | Path) -> Spec:
    """The spec file, each section checked in turn; the first problem is a ConfigError naming its key."""
    src = str(path)
    data = load_mapping(path, "a mapping with slos, thresholds, alertmanager, links")
    prices = data.get("prices")
    if prices is not None and (not isinstance(prices, str) or not prices):
        raise ConfigError(src, "prices", f"expected the path of a GPU prices file, got {prices!r}")
    return Spec(_slos(data, src), _thresholds(data, src), _alertmanager_section(data, src), _links(data, src),
                None if prices is None else Path(path).parent / prices, _pricing(data, src))


def _pricing(data: dict, src: str) -> Pricing:
    """The ``pricing`` section: a known default pricing, and deployments by name each with a known pricing. The spec
    names no deployments of its own, so any well-formed name may be listed (one that never reports costs nothing)."""
    sec = _section(data, "pricing", src)
    extra = sorted(set(sec) - {"default", "deployments"})
    if extra:
        raise ConfigError(src, f"pricing.{extra[0]}", "unknown key; allowed: default, deployments")
    known = f"one of {', '.join(PRICINGS)}"
    default = sec.get("default", ON_DEMAND)
    if default not in PRICINGS:
        raise ConfigError(src, "pricing.default", f"expected {known}, got {default!r}")
    deployments = _section(sec, "deployments", src, "pricing")
    for name, p in deployments.items():
        if not isinstance(name, str) or not DEPLOYMENT_NAME.fullmatch(name):
            raise ConfigError(src, f"pricing.deployments.{name}", f"expected a deployment name ({DEPLOYMENT_NAME.pattern})")
        if p not in PRICINGS:
            raise ConfigError(src, f"pricing.deployments.{name}", f"expected {known}, got {p!r}")
    return Pricing(default, dict(deployments))


def _slos(data: dict, src: str) -> tuple[Slo, ...]:
    """The ``slos`` list: at least one, one per tier and route."""
    if not isinstance(data.get("slos") or [], list):
        raise ConfigError(src, "slos", "expected a list of SLOs")
    slos: list[Slo] = []
    for i, s in enumerate(data.get("slos") or []):
        slos.append(_slo(s, src, f"slos[{i}]", slos))
    if not slos:
        raise ConfigError(src, "slos", "at least one SLO is required")
    return tuple(slos)


def _slo(s: Any, src: str, key: str, earlier: list[Slo]) -> Slo:
    """One SLO: a known tier, a route name no ``earlier`` SLO has for that tier, an objective in (0, 1), and
    thresholds on the histogram's buckets (the rules select ``le`` exactly)."""
    if not isinstance(s, dict):
        raise ConfigError(src, key, "expected a mapping")
    if s.get("tier") not in TIERS:
        raise ConfigError(src, f"{key}.tier", f"must be one of {', '.join(TIERS)}")
    if not isinstance(s.get("route"), str) or not re.fullmatch(r"[a-z0-9_-]+", s["route"]):
        raise ConfigError(src, f"{key}.route", "expected a route name ([a-z0-9_-]+)")
    obj = s.get("objective")
    if not isinstance(obj, (int, float)) or isinstance(obj, bool) or not 0 < obj < 1:
        raise ConfigError(src, f"{key}.objective", "expected a number between 0 and 1 (exclusive)")
    if any((o.tier, o.route) == (s["tier"], s["route"]) for o in earlier):
        raise ConfigError(src, key, f"duplicate SLO for tier {s['tier']} route {s['route']}")
    return Slo(s["tier"], s["route"], _bucket(s.get("ttft_seconds", -1), src, f"{key}.ttft_seconds"),
               _bucket(s.get("tpot_seconds", -1), src, f"{key}.tpot_seconds"), float(obj))


def _thresholds(data: dict, src: str) -> dict[str, Any]:
    """The ``thresholds`` section, every key required: numbers > 0, a queue-wait p95 per tier, the critical XIDs
    and the exporter jobs' regex."""
    th = _section(data, "thresholds", src)
    for k in ("queue_wait_p95_seconds", "rejection_ratio_min", "preemptions_per_second", "capacity_redundancy",
              "autoscale_kv_target_ratio", "autoscale_queue_target_seconds", "critical_xids", "exporter_jobs"):
        if k not in th:
            raise ConfigError(src, f"thresholds.{k}", "is required")
        if k not in ("queue_wait_p95_seconds", "critical_xids", "exporter_jobs"):
            _number(th[k], src, f"thresholds.{k}")
    queue = _section(th, "queue_wait_p95_seconds", src, "thresholds")
    missing = set(TIERS) - set(queue)
    if missing:
        raise ConfigError(src, "thresholds.queue_wait_p95_seconds", f"missing tiers {sorted(missing)}")
    for tier, secs in queue.items():
        _number(secs, src, f"thresholds.queue_wait_p95_seconds.{tier}")
    _xids(th["critical_xids"], src, "thresholds.critical_xids")
    _regex(th["exporter_jobs"], src, "thresholds.exporter_jobs")
    return th


def _alertmanager_section(data: dict, src: str) -> dict[str, Any]:
    """The ``alertmanager`` section: a webhook URL per receiver, and Alertmanager durations where given."""
    am = _section(data, "alertmanager", src)
    receivers = _section(am, "receivers", src, "alertmanager")
    for r in ("pager", "ticket", "log"):
        url = receivers.get(r)
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(src, f"alertmanager.receivers.{r}", "expected an http(s) webhook URL")
    for k in ("group_wait", "group_interval", "repeat_interval"):
        if k in am and not (isinstance(am[k], str) and re.fullmatch(r"[1-9][0-9]*[smhd]", am[k])):
            raise ConfigError(src, f"alertmanager.{k}", f"expected a duration like 30s, 5m, 4h; got {am[k]!r}")
    return am


def _links(data: dict, src: str) -> dict[str, str]:
    """The ``links`` section: the runbook, dashboard and console bases every alert links through, with defaults."""
    links = _section(data, "links", src)
    return {k: _link(links.get(k, default), src, f"links.{k}")
            for k, default in (("runbook_base", "docs/runbooks/"), ("dashboard_base", ""), ("console_base", ""))}


def _xids(v: Any, src: str, key: str) -> list[int]:
    if not isinstance(v, list) or not v or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise ConfigError(src, key, f"expected a list of XID codes (integers), got {v!r}")
    return v


def label_name(v: Any, src: str, key: str) -> str:
    if not isinstance(v, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
        raise ConfigError(src, key, f"expected a Prometheus label name, got {v!r}")
    return v


def _regex(v: Any, src: str, key: str) -> str:
    """A regular expression copied into a PromQL string: it compiles (Python's re, a fair first check of RE2: what
    RE2 lacks, lookaround and backreferences, is refused too) and holds no quote or backslash that would end or
    escape the PromQL string around it."""
    if not isinstance(v, str) or not v:
        raise ConfigError(src, key, "expected a job-name regular expression (a string)")
    if '"' in v or "\\" in v or "\n" in v:
        raise ConfigError(src, key, f"must not hold a quote, backslash or newline (it is copied into PromQL): {v!r}")
    if problem := re2_problem(v):
        raise ConfigError(src, key, f"{problem}: {v!r}")
    return v


def _link(v: Any, src: str, key: str) -> str:
    """A link base copied into every alert's annotations: empty, a relative path, or an http(s) URL; never another
    scheme (``javascript:``), whitespace, or a ``{{`` that Alertmanager's templates would run."""
    if not isinstance(v, str):
        raise ConfigError(src, key, f"expected a URL or a relative path (a string), got {v!r}")
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", v)
    if scheme and scheme.group(1).lower() not in ("http", "https"):
        raise ConfigError(src, key, f"only http(s) links are allowed, got a {scheme.group(1)}: URL")
    if scheme and not re.match(r"https?://[^/?#\s]", v, re.IGNORECASE):
        raise ConfigError(src, key, f"expected http(s)://HOST..., got {v!r}")
    if v.startswith("//") or re.search(r"\s|\{\{|\}\}|[\"<>]", v):
        raise ConfigError(src, key, f"must not hold whitespace, quotes, <, >, '{{{{' or '}}}}', or start with //: {v!r}")
    return v


def _link_pattern(v: str, src: str, key: str) -> str:
    """A link with ``%s`` where the alert's name goes (kubernetes-mixin's ``runbookURLPattern``), a link otherwise."""
    _link(v.replace("%s", "ALERT"), src, key)
    return v


# ---------------------------------------------------------------------- helpers

def scaled_duration(d: str, scale: float) -> str:
    """A duration, scaled for the test variant (never under 1 s); every rule generator scales through this."""
    if scale == 1.0:
        return d
    return f"{max(1, round(seconds(d) * scale))}s"


_dur = scaled_duration


class _Builder:
    def __init__(self, spec: Spec, scale: float) -> None:
        self.spec, self.scale = spec, scale

    def d(self, text: str) -> str:
        """Scale every ``[5m]``-style range in an expression."""
        return re.sub(r"\[(\d+[smhd])\]", lambda m: f"[{_dur(m.group(1), self.scale)}]", text)

    def alert(self, name: str, expr: str, for_: str, severity: str, summary: str, description: str,
              labels: dict[str, str] | None = None) -> dict:
        annotations = {"summary": summary, "description": description,
                       "runbook_url": f"{mark('runbookURLPattern_pre')}{name}{mark('runbookURLPattern_post')}",
                       "dashboard": alert_link(mark("dashboardUrlBase"), name)}
        if self.spec.links["console_base"]:  # the triage console's Overview, the alert's deployment and tier its filters
            annotations["console"] = mark("consoleUrlBase") + "/?range=1h" + (
                "{{ with $labels.deployment }}&deployment={{ . | urlquery }}{{ end }}"
                "{{ with $labels.tier }}&tier={{ . | urlquery }}{{ end }}")
        return {"alert": name, "expr": self.d(expr), "for": _dur(for_, self.scale),
                "labels": {"severity": severity, **(labels or {})}, "annotations": annotations}

    def record(self, name: str, expr: str, labels: dict[str, str] | None = None) -> dict:
        rule: dict[str, str | dict[str, str]] = {"record": name, "expr": self.d(expr)}
        if labels:
            rule["labels"] = labels
        return rule


QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
LATENCY = ("llm_gateway_queue_wait_seconds", "llm_gateway_time_to_first_token_seconds",
           "llm_gateway_time_per_output_token_seconds", "llm_gateway_e2e_latency_seconds")


def _llm_rules(b: _Builder) -> dict:
    rec = []
    for metric in LATENCY:
        for short, q in QUANTILES:
            rec.append(b.record(tier_quantile(metric, short),
                                f"histogram_quantile({q}, sum by (le, deployment, tier) (rate({metric}_bucket[5m])))"))
    rec.append(b.record("deployment_tier_route:llm_gateway_time_to_first_token_seconds:p99_5m",
                        "histogram_quantile(0.99, sum by (le, deployment, tier, route) "
                        "(rate(llm_gateway_time_to_first_token_seconds_bucket[5m])))"))
    rec += [
        b.record("deployment_tier:llm_gateway_input_tokens:rate5m",
                 "sum by (deployment, tier) (rate(llm_gateway_input_tokens_total[5m]))"),
        b.record("deployment_tier:llm_gateway_output_tokens:rate5m",
                 "sum by (deployment, tier) (rate(llm_gateway_output_tokens_total[5m]))"),
        b.record("deployment_tier:llm_gateway_requests:rate5m",
                 "sum by (deployment, tier) (rate(llm_gateway_requests_total[5m]))"),
        b.record(ARRIVALS_RATE, "sum by (deployment) (rate(llm_gateway_requests_arrived_total[5m]))"),
        # the demand is what arrives, in tokens: requests finish in a burst while a backlog drains, and their
        # token rate would read as demand the fleet never had; the tokens of a finished request are still the mix
        b.record(TOKENS_RATE,
                 f"{ARRIVALS_RATE}\n* on (deployment)\n(\n"
                 "  sum by (deployment) (deployment_tier:llm_gateway_input_tokens:rate5m)\n"
                 "  + on (deployment)\n  sum by (deployment) (deployment_tier:llm_gateway_output_tokens:rate5m)\n"
                 ")\n/ on (deployment)\nsum by (deployment) (deployment_tier:llm_gateway_requests:rate5m)\n"
                 # a request exporter from before the arrivals counter: the finished requests' tokens
                 "or\nsum by (deployment) (deployment_tier:llm_gateway_input_tokens:rate5m)\n"
                 "+ on (deployment)\nsum by (deployment) (deployment_tier:llm_gateway_output_tokens:rate5m)"),
        b.record("deployment_tier_reason:llm_gateway_rejections:ratio_rate5m",
                 "sum by (deployment, tier, reason) (rate(llm_gateway_rejections_total[5m]))\n"
                 "/ on (deployment, tier) group_left\ndeployment_tier:llm_gateway_requests:rate5m"),
        b.record("deployment_tier:llm_gateway_rejections:ratio_rate5m",
                 "sum by (deployment, tier) (rate(llm_gateway_rejections_total[5m]))\n"
                 "/ on (deployment, tier)\ndeployment_tier:llm_gateway_requests:rate5m"),
        # a tenant's requests its own quotas refused: at its quota, whatever the fleet's load
        b.record(QUOTA_REJECTIONS,
                 "sum by (deployment, tenant) (rate(llm_gateway_rejections_total"
                 f'{{reason=~"{"|".join(QUOTA_REASONS)}"}}[5m]))\n'
                 "/ on (deployment, tenant)\nsum by (deployment, tenant) (rate(llm_gateway_requests_total[5m]))"),
        b.record(OVERLOAD_ACTIONS, f"sum by (deployment) (rate({DEGRADATIONS}[5m]))\n/ on (deployment)\n{ARRIVALS_RATE}",
                 {"action": "degraded"}),
        # fallbacks into the deployment (it is the backup) and away from it (the primary), over its arrivals and
        # what went away: at most 1, and defined while a primary's whole traffic goes elsewhere
        b.record(OVERLOAD_ACTIONS,
                 f"sum by (deployment) (\n  sum by (deployment) (rate({FALLBACKS}[5m]))\n  or\n  {_fallbacks_out()}\n)\n"
                 f"/ on (deployment)\nsum by (deployment) (\n  {ARRIVALS_RATE}\n  or\n  {_fallbacks_out()}\n)",
                 {"action": "fallback"}),
        b.record(CIRCUIT_OPEN,
                 'sum without (fallback_from) (label_replace(label_replace(\n  sum by (fallback_from, deployment) '
                 f'(rate({FALLBACKS}{{reason="circuit_open"}}[5m])),\n'
                 '  "backup", "$1", "deployment", "(.*)"), "deployment", "$1", "fallback_from", "(.*)"))'),
        b.record("deployment_tier:llm_gateway_timeouts:ratio_rate5m",
                 'sum by (deployment, tier) (rate(llm_gateway_requests_total{outcome="timeout"}[5m]))\n'
                 "/ on (deployment, tier)\ndeployment_tier:llm_gateway_requests:rate5m"),
        b.record("deployment:llm_kv_cache_usage_ratio:max", "max by (deployment) (llm_kv_cache_usage_ratio)"),
        b.record(KV_USAGE_AVG, "avg by (deployment) (llm_kv_cache_usage_ratio)"),
        b.record(WAITING, "sum by (deployment) (llm_requests_waiting)"),
        b.record(OLDEST_QUEUED, "max by (deployment, tier) (llm_gateway_oldest_queued_age_seconds)"),
        b.record(QUEUE_WAIT_NOW,
                 "max by (deployment, tier) (\n"
                 f'  label_replace({OLDEST_QUEUED}, "signal", "oldest", "", "")'
                 f'\n  or\n  label_replace({QUEUE_WAIT_P95}, "signal", "p95", "", "")\n)'),
        b.record("deployment:llm_preemptions:rate5m", "sum by (deployment) (rate(llm_preemptions_total[5m]))"),
        b.record("deployment:llm_gateway_kv_capacity_rejections:rate5m",
                 'sum by (deployment) (rate(llm_gateway_rejections_total{reason="kv_capacity"}[5m]))'),
        # the engine exporter's count where it is in the scrape path, else the engines Prometheus scrapes directly
        # (a PodMonitor's targets carry deployment and replica) that answer: a pod still loading is not available
        b.record("deployment:llm_replicas_available:max",
                 'max by (deployment) (llm_deployment_replicas{state="available"})\nor\n'
                 f"sum by (deployment) ({ENGINE_TARGETS})"),
        b.record("deployment:llm_replicas_required:ceil",
                 f"ceil(\n  {TOKENS_RATE}\n  / on (deployment)\n"
                 f"  max by (deployment) (llm_capacity_replica_goodput_tokens_per_second)\n"
                 f"  * {mark('capacityRedundancy')}\n)"),
        b.record(AUTOSCALE_SIGNAL, "deployment:llm_replicas_required:ceil", {"signal": "demand"}),
        b.record(AUTOSCALE_SIGNAL, f"ceil(deployment:llm_replicas_available:max * on (deployment) {KV_USAGE_AVG}"
                 f" / {mark('autoscaleKvTargetRatio')})", {"signal": "kv"}),
        b.record(AUTOSCALE_SIGNAL,
                 # votes only while the queue is over its target: a vote of "as many as now" would hold the
                 # maximum at the available count and the deployment could never scale down. It reads what waits
                 # now (the oldest still queued), as the simulator's autoscaler does: the p95 of those scheduled in
                 # the window stays high for a window after a backlog drained and kept scaling up; the p95 only
                 # where no request exporter publishes the age
                 "ceil(\n  deployment:llm_replicas_available:max\n  * on (deployment)\n  (\n    (\n"
                 f"      max by (deployment) ({OLDEST_QUEUED})\n      or\n"
                 f"      max by (deployment) ({QUEUE_WAIT_P95})\n    )\n"
                 f"    / {mark('autoscaleQueueTargetSeconds')} > 1\n  )\n)",
                 {"signal": "queue"}),
        b.record(AUTOSCALE_DESIRED, f"clamp_min(max by (deployment) ({AUTOSCALE_SIGNAL}), 1)"),
    ]
    return {"groups": [{"name": "llm.recording", "rules": rec}]}


def _fallbacks_out() -> str:
    """Requests per second that fell back away from each primary, the primary as ``deployment``."""
    return (f'label_replace(sum by (fallback_from) (rate({FALLBACKS}[5m])), "deployment", "$1", "fallback_from", '
            '"(.+)")')


def _p0_ttft_burn(window: str) -> str:
    """P0's TTFT error ratio over ``window`` as a burn rate (1: spending the budget exactly as the objective allows)."""
    return (f'deployment_tier_route:llm_slo_ttft_errors:ratio_rate{window}{{tier="P0"}}\n    / on (tier, route) '
            "group_left ()\n  (1 - tier_route:llm_slo_objective:config)")


def _slo_rules(b: _Builder) -> dict:
    spec = b.spec
    config, sli, alerts = [], [], []
    for tier in sorted(spec.thresholds["queue_wait_p95_seconds"]):
        config.append(b.record("tier:llm_queue_wait_threshold_seconds:config",
                               f"vector({mark(f'queueWaitThresholdSeconds_{tier}')})", {"tier": tier}))
    windows = sorted({w for _, _, long, short, _, _ in BURN_WINDOWS for w in (long, short)}, key=seconds)
    for slo in spec.slos:
        lab = {"tier": slo.tier, "route": slo.route}
        sel = f'tier="{slo.tier}",route="{slo.route}"'
        config.append(b.record("tier_route:llm_slo_ttft_threshold_seconds:config", f"vector({slo.ttft_seconds})", lab))
        config.append(b.record("tier_route:llm_slo_tpot_threshold_seconds:config", f"vector({slo.tpot_seconds})", lab))
        config.append(b.record("tier_route:llm_slo_objective:config", f"vector({slo.objective})", lab))
        for name, metric in SLIS.items():
            le = repr(slo.ttft_seconds if name == "ttft" else slo.tpot_seconds)
            for w in windows:
                # finished requests' histogram: TPOT is known only when a request finishes
                expr = (f"1 - (\n  sum by (deployment, tier, route) (rate({metric}_bucket{{{sel},le=\"{le}\"}}[{w}]))"
                        f"\n  /\n  sum by (deployment, tier, route) (rate({metric}_count{{{sel}}}[{w}]))\n)")
                if name == "ttft":  # each miss counted once when known (still queued past it, at the latest done);
                    # the histogram only for a request exporter from before the misses counter
                    expr = (f"clamp_max(\n  sum by (deployment, tier, route) (rate({MISSED}{{{sel},le=\"{le}\"}}[{w}]))"
                            f"\n  /\n  sum by (deployment, tier, route) (rate({ARRIVED}{{{sel}}}[{w}]))\n, 1)\nor\n{expr}")
                sli.append(b.record(f"deployment_tier_route:llm_slo_{name}_errors:ratio_rate{w}", expr, lab))
            sli.append(b.record(
                f"deployment_tier_route:llm_slo_{name}:attainment_5m",
                f"1 - deployment_tier_route:llm_slo_{name}_errors:ratio_rate5m{{{sel}}}", lab))
    for name in SLIS:
        for alert, severity, long, short, factor, for_ in BURN_WINDOWS:
            burning = []  # per SLO: burning over every window
            for slo in spec.slos:
                budget = round(factor * (1 - slo.objective), 6)
                sel = f'tier="{slo.tier}",route="{slo.route}"'
                over = [f"deployment_tier_route:llm_slo_{name}_errors:ratio_rate{w}{{{sel}}} > {budget}"
                        for w in (long, short, *((PAGE_RESET,) if severity == "page" and short != PAGE_RESET else ()))]
                burning.append("(\n  " + "\n  and\n  ".join(over) + "\n)")
            alerts.append(b.alert(
                alert, "\nor\n".join(burning), for_, severity,
                f"{name.upper()} SLO error budget is burning {factor:g}x too fast.",
                f"{{{{ $labels.deployment }}}} tier {{{{ $labels.tier }}}} route {{{{ $labels.route }}}}: "
                f"{{{{ $value | humanizePercentage }}}} of requests missed the {name.upper()} threshold over the last "
                f"{_dur(long, b.scale)}, {factor:g}x the rate the objective allows (also over {_dur(short, b.scale)}"
                + (f" and the last {_dur(PAGE_RESET, b.scale)}" if severity == "page" and short != PAGE_RESET else "")
                + ").",
                {"sli": name, "long_window": _dur(long, b.scale), "short_window": _dur(short, b.scale)}))
    return {"groups": [{"name": "llm.slo.config", "rules": config}, {"name": "llm.slo.sli", "rules": sli},
                       {"name": "llm.slo.burnrate", "rules": alerts}]}


GPU_KEY = "gpu, uuid, instance"


def _gpu_rules(b: _Builder) -> dict:
    uuid = 'label_replace({m}, "uuid", "$1", "' + mark("dcgmUuidLabel") + '", "(.+)")'
    rec = [
        b.record("gpu:llm_gpu_utilization:ratio",
                 f"max by ({GPU_KEY}) (llm_gpu_utilization_ratio)\nor\n"
                 f"max by ({GPU_KEY}) ({uuid.format(m='DCGM_FI_DEV_GPU_UTIL')}) / 100"),
        b.record("gpu:llm_gpu_memory_used:bytes",
                 f"max by ({GPU_KEY}) (llm_gpu_memory_used_bytes)\nor\n"
                 f"max by ({GPU_KEY}) ({uuid.format(m='DCGM_FI_DEV_FB_USED')}) * 1048576"),
        b.record("gpu:llm_gpu_lost:bool",
                 f"max by ({GPU_KEY}) (llm_gpu_up == bool 0)\nor\n"
                 f"max by ({GPU_KEY}) ({uuid.format(m='DCGM_FI_DEV_XID_ERRORS')} == bool 79)"),
        b.record("gpu_xid:llm_gpu_xid_errors:increase5m",
                 f"sum by ({GPU_KEY}, xid) (llm_gpu_xid_errors_total - (llm_gpu_xid_errors_total offset 5m or "
                 f"llm_gpu_xid_errors_total * 0))\nor\nsum by ({GPU_KEY}, xid) (label_replace("
                 f"{uuid.format(m='changes(DCGM_FI_DEV_XID_ERRORS[5m]) and DCGM_FI_DEV_XID_ERRORS > 0')}, "
                 f'"xid", "$1", "{mark("dcgmXidLabel")}", "(.+)"))'),
    ]
    owner = (f"* on ({GPU_KEY}) group_left (deployment, replica)\n"
             f"max by ({GPU_KEY}, deployment, replica) (llm_gpu_deployment_info)")
    critical = mark("criticalXids")
    lost = "gpu:llm_gpu_lost:bool == 1"
    alerts = [
        b.alert("LLMGPULost", f"({lost})\n{owner}\nor\n(({lost}) unless on ({GPU_KEY}) llm_gpu_deployment_info)",
                "1m", "page", "A GPU is lost (fallen off the bus or unreadable).",
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} cannot be read"
                "{{ with $labels.deployment }}; deployment {{ . }} replica {{ $labels.replica }} runs on it{{ end }}."),
        b.alert("LLMGPUXidErrors", f'(gpu_xid:llm_gpu_xid_errors:increase5m{{xid=~"{critical}"}} > 0)\n{owner}\nor\n'
                f'(gpu_xid:llm_gpu_xid_errors:increase5m{{xid=~"{critical}"}} > 0 unless on ({GPU_KEY}) '
                "llm_gpu_deployment_info)", "0m", "page", "A GPU reported a critical XID error.",
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) reported XID {{ $labels.xid }} {{ $value }} time(s) in "
                "5 minutes{{ with $labels.deployment }}; deployment {{ . }}{{ end }}."),
        b.alert("LLMGPUXidErrors", f'(gpu_xid:llm_gpu_xid_errors:increase5m{{xid!~"{critical}"}} > 0)\n{owner}\nor\n'
                f'(gpu_xid:llm_gpu_xid_errors:increase5m{{xid!~"{critical}"}} > 0 unless on ({GPU_KEY}) '
                "llm_gpu_deployment_info)", "0m", "ticket", "A GPU reported an XID error.",
                "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) reported XID {{ $labels.xid }} {{ $value }} time(s) in "
                "5 minutes{{ with $labels.deployment }}; deployment {{ . }}{{ end }}."),
    ]
    return {"groups": [{"name": "llm.gpu.recording", "rules": rec}, {"name": "llm.gpu.alerts", "rules": alerts}]}


def _alert_rules(b: _Builder) -> dict:
    alerts = [
        b.alert(
            "LLMQueueWaitRisingReplicasShort",
            # what waits now, not what finished: a backlog that drains after a fix still finishes with long waits
            f"(\n  {QUEUE_WAIT_NOW}\n    > on (tier) group_left\n"
            "  tier:llm_queue_wait_threshold_seconds:config\n  and on (deployment)\n"
            f"  deriv({WAITING}[10m]) > 0\n)\nand on (deployment)\n(\n"
            "  deployment:llm_replicas_available:max\n    < on (deployment)\n  deployment:llm_replicas_required:ceil\n)",
            "5m", "page", "Requests wait past the tier's threshold, the queue grows, and replicas are short.",
            "{{ $labels.deployment }} tier {{ $labels.tier }}: requests wait {{ $value | humanizeDuration }} now "
            "(the oldest still queued, or the p95 of those scheduled in 5 minutes), over the tier's threshold; the "
            "engines' queue is growing, with fewer available replicas than the arrivals require."),
        b.alert(
            "LLMKVCacheAllocationFailures",
            f"deployment:llm_preemptions:rate5m > {mark('preemptionsPerSecond')}\nor\n"
            "deployment:llm_gateway_kv_capacity_rejections:rate5m > 0",
            "10m", "page", "KV-cache blocks cannot be allocated: sequences are preempted or rejected.",
            "{{ $labels.deployment }}: {{ $value | humanize }}/s preemptions or KV-capacity rejections, sustained "
            "for 10 minutes."),
        b.alert(
            "LLMTTFTSLOBreachWithRejects",
            "(\n  deployment_tier_route:llm_gateway_time_to_first_token_seconds:p99_5m\n    > on (tier, route) group_left\n"
            "  tier_route:llm_slo_ttft_threshold_seconds:config\n)\nand on (deployment, tier)\n(\n"
            "  deriv(deployment_tier:llm_gateway_rejections:ratio_rate5m[10m]) > 0\n  and\n"
            f"  deployment_tier:llm_gateway_rejections:ratio_rate5m > {mark('rejectionRatioMin')}\n)",
            "5m", "page", "P99 TTFT is over the SLO while the rejection rate grows.",
            "{{ $labels.deployment }} tier {{ $labels.tier }} route {{ $labels.route }}: P99 TTFT "
            "{{ $value | humanizeDuration }} is over the SLO threshold and rejections are rising."),
        b.alert(
            "LLMTenantAtQuota",
            # P0 missing its SLO is a page of its own (LLMSLOBurnRateFast, LLMTTFTSLOBreachWithRejects); while P0
            # meets it, a tenant refused by its own quota is a conversation about the quota, not an outage
            f"{QUOTA_REJECTIONS} > {mark('rejectionRatioMin')}\nunless on (deployment)\n(\n"
            '  deployment_tier_route:llm_slo_ttft:attainment_5m{tier="P0"}\n    < on (tier, route) group_left\n'
            "  tier_route:llm_slo_objective:config\n  or\n"
            '  deployment_tier_route:llm_slo_tpot:attainment_5m{tier="P0"}\n    < on (tier, route) group_left\n'
            "  tier_route:llm_slo_objective:config\n)",
            "15m", "ticket", "A tenant is held at its quota while P0 meets its SLO.",
            "Tenant {{ $labels.tenant }} on {{ $labels.deployment }}: {{ $value | humanizePercentage }} of its "
            "requests are refused by its own quota (rate, tokens per minute, concurrency or token budget) over 5 "
            "minutes, for 15 minutes, while P0 meets its SLO: review the tenant's quota or its traffic."),
        b.alert(
            "LLMOverloadProtectionNotHoldingP0",
            f"(\n  {_p0_ttft_burn(PROTECTION_WINDOW)} > {PROTECTION_BURN:g}\n  and\n  {_p0_ttft_burn(PAGE_RESET)} > "
            f"{PROTECTION_BURN:g}\n)\nand on (deployment)\n(\n  {OVERLOAD_ACTIONS} > {mark('rejectionRatioMin')}\n"
            f"  and\n  deriv({OVERLOAD_ACTIONS}[10m]) > 0\n)",
            "5m", "page", "The overload ladder degrades or falls back more and more, and P0 still burns its TTFT budget.",
            "{{ $labels.deployment }} route {{ $labels.route }}: P0 burns its TTFT error budget {{ $value | humanize }}x "
            f"too fast (over {_dur(PROTECTION_WINDOW, b.scale)} and the last {_dur(PAGE_RESET, b.scale)}) while a "
            "growing share of the deployment's requests is degraded or sent to a backup: the protection is not "
            "holding P0."),
        b.alert(
            "LLMOverloadProtectionEngaged",
            # the ladder and the fallbacks doing their job, P0 meeting its objective: capacity is short, not an outage
            f"{OVERLOAD_ACTIONS} > {mark('rejectionRatioMin')}\nunless on (deployment)\n(\n  "
            f"{_p0_ttft_burn(PROTECTION_WINDOW)} > {PROTECTION_BURN:g}\n  and\n  {_p0_ttft_burn(PAGE_RESET)} > "
            f"{PROTECTION_BURN:g}\n)",
            "30m", "ticket", "The overload ladder or a fallback route has been engaged for 30 minutes while P0 holds.",
            "{{ $labels.deployment }}: {{ $value | humanizePercentage }} of its requests are {{ if eq $labels.action "
            '"fallback" }}served by a fallback route (to or from it){{ else }}degraded by the overload ladder{{ end }} '
            "over 5 minutes, for 30 minutes, while P0 meets its TTFT objective: the fleet is short of capacity for "
            "this traffic."),
        b.alert(
            "LLMCircuitOpen",
            f"{CIRCUIT_OPEN} > 0\nor\n"
            '(\n  sum by (deployment) (rate(llm_gateway_rejections_total{reason="circuit_open"}[5m])) > 0\n)\n'
            f"unless on (deployment)\n{CIRCUIT_OPEN}",
            "2m", "page", "A primary deployment's circuit breaker is open: its traffic goes to a backup or is refused.",
            # the backup's headroom, read when the alert fires: its free KV cache and its replicas over what it needs
            "Circuit open on {{ $labels.deployment }}: {{ $b := $labels.backup }}{{ if $b }}{{ $value | humanize }} "
            "requests/s go to its backup {{ $b }}, which has "
            '{{ with printf "1 - ' + KV_USAGE_AVG + '{deployment=%q}" $b | query }}'
            "{{ . | first | value | humanizePercentage }}{{ else }}an unknown share{{ end }} of its KV cache free and "
            '{{ with printf "deployment:llm_replicas_available:max{deployment=%q} - on (deployment) '
            'deployment:llm_replicas_required:ceil{deployment=%q}" $b $b | query }}{{ . | first | value }}'
            "{{ else }}unknown{{ end }} replicas over what its arrivals require{{ else }}no backup takes its traffic: "
            "{{ $value | humanize }} requests/s are refused (circuit_open){{ end }}."),
        b.alert("LLMEngineDown", f"llm_engine_up == 0\nor\n(\n  {ENGINE_TARGETS} == 0\n  unless on (deployment, replica)\n"
                "  llm_engine_up\n)", "2m", "page", "An inference engine does not answer its scrape.",
                "Replica {{ $labels.replica }} of {{ $labels.deployment }}{{ with $labels.model }} ({{ . }}){{ end }} "
                "has not answered its scrape (the engine exporter's, or Prometheus' own) for 2 minutes."),
        b.alert("LLMExporterDown", f"up{{{mark('exporterSelector')}}} == 0", "5m", "ticket",
                "A goodput exporter is down: its part of the fleet is invisible.",
                "Prometheus cannot scrape {{ $labels.job }} at {{ $labels.instance }}."),
        b.alert(WATCHDOG, "vector(1)", "0m", "none", "Always firing: proves the alerting pipeline works.",
                "This alert fires all the time. If it stops arriving, Prometheus or Alertmanager is broken."),
    ]
    return {"groups": [{"name": "llm.alerts", "rules": alerts}, {"name": "llm.cold_start", "rules": _cold_start(b)}]}


def _cold_start(b: _Builder) -> list[dict]:
    """Replicas starting slower than the capacity plan assumed: its cold-start buffer and the autoscaling policy's
    warm pool were sized on that figure, so scale-outs now arrive after the burst they were for. Where
    kube-state-metrics gives a deployment's pods' creation to Ready, that is the start compared (what a scale-out
    waits); else the engine exporter's process start to first answered scrape. The alert's ``measured`` says which."""
    plan = "max by (deployment) (llm_capacity_cold_start_seconds)"
    p90 = lambda m: f"quantile by (deployment) (0.9, max_over_time({m}[{COLD_START_WINDOW}]))"  # noqa: E731
    measured = lambda r, how: f'label_replace({r}, "measured", "{how}", "", "")'  # noqa: E731
    pod, process = COLD_START_MEASURES
    return [
        # every replica started in the window counts once (its longest start), gone ones included
        b.record(COLD_START_P90, p90(COLD_START)),
        b.record(POD_COLD_START_P90, p90(POD_COLD_START)),
        b.alert(
            "LLMColdStartAbovePlan", f"(\n  {measured(POD_COLD_START_P90, pod)}\n  or on (deployment)\n"
            f"  {measured(COLD_START_P90, process)}\n)\n  > on (deployment) group_left ()\n{plan}",
            "15m", "ticket", "Replicas start slower than the capacity plan assumes.",
            "{{ $labels.deployment }}: the p90 cold start of its replicas over the last "
            f"{_dur(COLD_START_WINDOW, b.scale)} is {{{{ $value | humanizeDuration }}}} "
            f'({{{{ if eq $labels.measured "{pod}" }}}}pod creation to Ready, from kube-state-metrics'
            "{{ else }}process start to first answered scrape{{ end }}), above the plan's "
            '{{ with printf "max(llm_capacity_cold_start_seconds{deployment=%q})" $labels.deployment | query }}'
            "{{ . | first | value | humanizeDuration }}{{ end }} that its cold-start buffer and autoscaling policy "
            "were sized on: scale-outs arrive late. Re-plan with `goodput plan replicas --cold-start-from` or make "
            "starts faster (cached weights, pre-pulled images, a warm pool)."),
    ]


def _alertmanager(spec: Spec) -> dict:
    am = spec.alertmanager
    hook = lambda name: {"name": name, "webhook_configs": [  # noqa: E731
        {"url": am["receivers"][name], "send_resolved": True, "max_alerts": 0}]}
    return {
        "global": {"resolve_timeout": "5m"},
        "route": {
            "receiver": "log", "group_by": ["alertname", "deployment"],
            "group_wait": am.get("group_wait", "30s"), "group_interval": am.get("group_interval", "5m"),
            "repeat_interval": am.get("repeat_interval", "4h"),
            "routes": [
                # one notification per primary and backup: which backup carries the traffic is the page's question
                {"matchers": ['alertname="LLMCircuitOpen"'], "receiver": "pager",
                 "group_by": ["alertname", "deployment", "backup"]},
                {"matchers": ['severity="page"', 'tier="P2"'], "receiver": "ticket"},  # offline work does not wake anyone
                {"matchers": ['severity="page"'], "receiver": "pager"},
                {"matchers": ['severity="ticket"'], "receiver": "ticket"},
                {"matchers": [f'alertname="{WATCHDOG}"'], "receiver": "log"},
                {"matchers": ['severity="info"'], "receiver": "log"},
            ],
        },
        "inhibit_rules": [{
            "source_matchers": ['alertname=~"LLMEngineDown|LLMGPULost"'],
            "target_matchers": [f'alertname=~"{"|".join(SYMPTOMS)}"'],
            "equal": ["deployment"],
        }],
        "receivers": [hook("pager"), hook("ticket"), hook("log")],
    }


HEADER = "# Generated by `goodput rules generate` from rules/slos.yaml. Do not edit: edit the spec and regenerate.\n"


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper, data: str):
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


_Dumper.add_representer(str, _str)


def dump(doc: dict, width: int = 120) -> str:
    """A rule document as YAML in the rule files' one style: keys in order, multi-line expressions as block
    scalars (every generator in rules_cli.GENERATORS writes through this)."""
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=width)


def knobs(spec: Spec) -> tuple[Knob, ...]:
    """The rules' configurable values (the mixin's ``_config``), each defaulting to the spec's."""
    th, links = spec.thresholds, spec.links
    number = lambda param, key, help_: Knob(param, (param,), "number", th[key], help_, _number)  # noqa: E731
    return (
        *(Knob(f"queueWaitThresholdSeconds_{t}", ("queueWaitThresholdSeconds", t), "float", float(s),
               f"LLMQueueWaitRisingReplicasShort: tier {t}'s queue wait threshold (s)", _number)
          for t, s in sorted(th["queue_wait_p95_seconds"].items())),
        number("rejectionRatioMin", "rejection_ratio_min",
               "LLMTTFTSLOBreachWithRejects, LLMTenantAtQuota: the least rejection share; LLMOverloadProtection*: "
               "the least share degraded or fallen back"),
        number("preemptionsPerSecond", "preemptions_per_second", "LLMKVCacheAllocationFailures: preemptions/s over"),
        number("capacityRedundancy", "capacity_redundancy", "required replicas = ceil(demand / per-replica goodput x this)"),
        number("autoscaleKvTargetRatio", "autoscale_kv_target_ratio", "the autoscaling kv signal's mean KV usage target"),
        number("autoscaleQueueTargetSeconds", "autoscale_queue_target_seconds", "the autoscaling queue signal's target"),
        Knob("criticalXids", ("criticalXids",), "alternation", list(th["critical_xids"]),
             "XID codes that page (any other XID opens a ticket)", _xids),
        Knob("exporterSelector", ("exporterSelector",), "selector", f'job=~"{th["exporter_jobs"]}"',
             "LLMExporterDown: the scrape targets of goodput's exporters"),
        Knob("dcgmUuidLabel", ("dcgmUuidLabel",), "text", "UUID", "dcgm-exporter's label holding the GPU UUID",
             label_name),
        Knob("dcgmXidLabel", ("dcgmXidLabel",), "text", "err_code", "dcgm-exporter's label holding the XID code",
             label_name),
        Knob("runbookURLPattern", ("runbookURLPattern",), "pattern", links["runbook_base"] + "%s.md",
             "runbook_url: this with %s replaced by the alert name", _link_pattern),
        Knob("dashboardUrlBase", ("dashboardUrlBase",), "url", links["dashboard_base"],
             "Grafana's root URL for the dashboard links (empty: relative)", _link),
        Knob("consoleUrlBase", ("consoleUrlBase",), "url", links["console_base"],
             "the triage console's URL (the console link exists when rules/slos.yaml names one)", _link),
    )


def templates(spec: Spec, scale: float = 1.0) -> dict[str, dict]:
    """File name -> document of every generated file, its configurable values placeholders (``knobs``)."""
    b = _Builder(spec, scale)
    return {"llm.rules.yaml": _llm_rules(b), "slo.rules.yaml": _slo_rules(b), "gpu.rules.yaml": _gpu_rules(b),
            "alerts.rules.yaml": _alert_rules(b), "alertmanager.yaml": _alertmanager(spec)}


def build(spec: Spec, scale: float = 1.0) -> dict[str, str]:
    """File name -> YAML text of every generated file."""
    docs = fill(templates(spec, scale), params(knobs(spec)))
    return {name: HEADER + dump(doc) for name, doc in docs.items()}


def write(spec: Spec, out: Path, scale: float = 1.0) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in build(spec, scale).items():
        (out / name).write_text(text)
        paths.append(out / name)
    return paths
