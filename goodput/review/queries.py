"""What the review asks Prometheus: recorded rule series where the rules record them, raw catalog series
where they do not, and the page-severity alert expressions of the rule files evaluated over the week.

Names are the rules' and the catalog's (``tests/review/test_review_queries.py`` checks each against
``rules/*.rules.yaml`` and ``goodput.contracts.catalog``). ``ALERTS`` has no history after a backfill, so pages
come from ``ALERTS`` when Prometheus has them and otherwise from the alert expressions, their ``for``
applied to the evaluated series (``pages_from_series``).

Every query reads the same from Prometheus and from a store that answers its API in MetricsQL (VictoriaMetrics):
``left_open`` writes the windows of the alert expressions the way both read them (docs/metrics-stores.md lists
what differs and why the rest already agrees).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from goodput.contracts.recorded import GPU_PRICE_PAID
from goodput.foundation.durations import seconds
from goodput.foundation.yamlfile import load_yaml
from goodput.review.prom import Query, Series

__all__ = ["RECORDED", "AlertRule", "Page", "alert_rules", "build_queries", "left_open", "pages_from_series"]

WEEK_S = 7 * 86400
STEP_S = 300.0
ALERT_STEP_S = 60.0

RECORDED = {  # key -> recorded series (rules/*.rules.yaml)
    "requests": "deployment_tier:llm_gateway_requests:rate5m",
    "input": "deployment_tier:llm_gateway_input_tokens:rate5m",
    "output": "deployment_tier:llm_gateway_output_tokens:rate5m",
    "tokens": "deployment:llm_gateway_tokens:rate5m",
    "ttft_errors": "deployment_tier_route:llm_slo_ttft_errors:ratio_rate5m",
    "tpot_errors": "deployment_tier_route:llm_slo_tpot_errors:ratio_rate5m",
    "objective": "tier_route:llm_slo_objective:config",
    "queue_p95": "deployment_tier:llm_gateway_queue_wait_seconds:p95_5m",
    "ttft_p95": "deployment_tier:llm_gateway_time_to_first_token_seconds:p95_5m",
    "tpot_p95": "deployment_tier:llm_gateway_time_per_output_token_seconds:p95_5m",
    "kv_max": "deployment:llm_kv_cache_usage_ratio:max",
    "preemptions": "deployment:llm_preemptions:rate5m",
    "kv_rejections": "deployment:llm_gateway_kv_capacity_rejections:rate5m",
    "available": "deployment:llm_replicas_available:max",
    # rules/cost.rules.yaml (docs/cost.md)
    "cost": "llm_total_hourly_cost",
    "idle_cost": "llm_idle_hourly_cost",
    "goodput_tokens": "llm_goodput_tokens_per_second",
    "tenant_cost": "llm_tenant_hourly_cost",
    "gpus_by_type": "llm_deployment_gpus",
    "prices": GPU_PRICE_PAID,  # each deployment's price per GPU-hour, at its own pricing
}
RAW = {  # catalog families the review reads directly
    "requests": "llm_gateway_requests_total",
    "rejections": "llm_gateway_rejections_total",
    "input": "llm_gateway_input_tokens_total",
    "output": "llm_gateway_output_tokens_total",
    "replicas": "llm_deployment_replicas",
    "gpus": "llm_gpu_deployment_info",
    "running": "llm_requests_running",
    "cold_start": "llm_replica_cold_start_seconds",
    "pod_cold_start": "llm_replica_pod_cold_start_seconds",
    "cold_start_plan": "llm_capacity_cold_start_seconds",
}


# A function of the samples inside its window alone, then a selector (a label value may hold braces or quotes)
# and its window. rate, increase, delta and changes are not here: MetricsQL also reads the last sample before the
# window, which on the backfilled grid is the sample Prometheus 2's closed window reads at its left edge.
_WINDOW_ONLY = re.compile(r'(\b(?:deriv|predict_linear|holt_winters|[a-z]+_over_time)\s*\(\s*(?:[0-9.]+\s*,\s*)?'
                          r'[a-zA-Z_:][\w:]*\s*(?:\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\})?\s*)\[([0-9a-z]+)\]')


def left_open(expr: str) -> str:
    """``expr`` with the window of each function of ``_WINDOW_ONLY`` 1 ms shorter. Prometheus 2 reads
    ``[t - d, t]``, MetricsQL (and Prometheus 3) ``(t - d, t]``: where a sample sits exactly on ``t - d`` (a
    backfill's grid, rules evaluated on the minute) ``deriv(x[10m])`` fits three points in one and two in the other,
    and an alert holds in one only. ``[d - 1ms]`` is ``(t - d, t]`` in both."""
    return _WINDOW_ONLY.sub(lambda m: f"{m[1]}[{round(seconds(m[2]) * 1000) - 1}ms]", expr)


@dataclass(frozen=True)
class AlertRule:
    name: str
    expr: str
    for_s: float
    severity: str


@dataclass(frozen=True)
class Page:
    alert: str
    labels: dict[str, str]
    start: float
    end: float

    @property
    def duration_s(self) -> float:
        return self.end - self.start


def alert_rules(rule_files: list[Path], severities: tuple[str, ...] = ("page",)) -> list[AlertRule]:
    out = []
    for f in rule_files:
        for g in (load_yaml(f) or {}).get("groups", []):
            for r in g.get("rules", []):
                if "alert" in r and r.get("labels", {}).get("severity") in severities:
                    out.append(AlertRule(r["alert"], r["expr"], seconds(r.get("for") or "0"), r["labels"]["severity"]))
    return out


def build_queries(start: float, history_weeks: int, rules: list[AlertRule],
                  now: float | None = None) -> list[Query]:
    """The week [start, start + 7 d] at a 5-minute step, totals at its end, hourly demand history before it.
    The SLO objectives are read at ``min(week end, now)``: a recorded gauge has no sample in the future, so the
    week in progress would otherwise have no objective and no SLO section (``now`` default: the clock)."""
    end = start + WEEK_S
    at = min(end, time.time() if now is None else now)
    r, raw = RECORDED, RAW
    qs = [Query(k, r[k], start, end, STEP_S) for k in ("requests", "input", "output", "tokens", "ttft_errors",
                                                         "tpot_errors", "queue_p95", "ttft_p95", "tpot_p95", "kv_max",
                                                         "preemptions", "kv_rejections", "available")]
    qs += [
        Query("by_route", f"sum by (deployment, tier, route) (rate({raw['requests']}[5m]))", start, end, STEP_S),
        Query("desired", f'max by (deployment) ({raw["replicas"]}{{state="desired"}})', start, end, STEP_S),
        Query("running", f"max by (deployment) ({raw['running']})", start, end, STEP_S),
        Query("objective", r["objective"], at, at),
        Query("tenant_requests", f"sum by (deployment, tier, tenant) (increase({raw['requests']}[7d]))", end, end),
        Query("tenant_tokens", f"sum by (deployment, tier, tenant) (increase({raw['input']}[7d])) + "
                               f"sum by (deployment, tier, tenant) (increase({raw['output']}[7d]))", end, end),
        Query("requests_week", f"sum by (deployment, tier) (increase({raw['requests']}[7d]))", end, end),
        Query("requests_prev", f"sum by (deployment, tier) (increase({raw['requests']}[7d] offset 7d))", end, end),
        Query("tokens_week", f"sum by (deployment, tier) (increase({raw['input']}[7d])) + "
                             f"sum by (deployment, tier) (increase({raw['output']}[7d]))", end, end),
        Query("tokens_prev", f"sum by (deployment, tier) (increase({raw['input']}[7d] offset 7d)) + "
                             f"sum by (deployment, tier) (increase({raw['output']}[7d] offset 7d))", end, end),
        Query("rejections_week", f"sum by (deployment, tier, reason) (increase({raw['rejections']}[7d]))", end, end),
        Query("timeouts_week", f'sum by (deployment, tier) (increase({raw["requests"]}{{outcome="timeout"}}[7d]))',
              end, end),
        Query("gpus", f"count by (deployment, replica) ({raw['gpus']})", start, end, STEP_S),
        Query("history", f"sum by (deployment) (rate({raw['input']}[1h])) + sum by (deployment) (rate({raw['output']}[1h]))",
              start - history_weeks * WEEK_S + 3600, end, 3600.0),
        Query("alerts", 'ALERTS{alertstate="firing",severity="page"}', start, end, ALERT_STEP_S),
        *(Query(k, f"sum by (deployment) ({r[k]})", start, end, STEP_S) for k in ("cost", "idle_cost", "goodput_tokens")),
        Query("tenant_cost", f"sum by (deployment, tier, tenant) ({r['tenant_cost']})", start, end, STEP_S),
        Query("gpus_by_type", f"sum by (deployment, gpu_type) ({r['gpus_by_type']})", start, end, STEP_S),
        Query("prices", f"max by (deployment, gpu_type) ({r['prices']})", at, at),
        # each replica's cold start (its longest in the week), as its pod and as its engine process, and what the plan assumed
        Query("cold_starts", f"max_over_time({raw['cold_start']}[7d])", end, end),
        Query("pod_cold_starts", f"max_over_time({raw['pod_cold_start']}[7d])", end, end),
        Query("cold_start_plan", f"max by (deployment) (max_over_time({raw['cold_start_plan']}[7d]))", end, end),
    ]
    qs += [Query(f"alert:{i}", left_open(a.expr), start, end, ALERT_STEP_S) for i, a in enumerate(rules)]
    return qs


def pages_from_series(name: str, series: list[Series], for_s: float, step: float = ALERT_STEP_S) -> list[Page]:
    """Firing intervals: runs of consecutive points where the expression held, once they lasted ``for_s``."""
    pages = []
    for s in series:
        if not len(s.times):
            continue
        breaks = np.flatnonzero(np.diff(s.times) > step * 1.5)
        for run in np.split(s.times, breaks + 1):
            fire = run[0] + for_s
            if run[-1] >= fire:
                labels = {k: v for k, v in s.labels.items() if k not in ("__name__", "alertstate")}
                pages.append(Page(name, labels, float(fire), float(run[-1] + step)))
    return pages
