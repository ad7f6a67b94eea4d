"""One weekly review: ask the source, summarize, recommend. The CLI, the demo and the benchmark call this."""

from __future__ import annotations

import time
from pathlib import Path

from goodput.analyzer.releases import load_releases
from goodput.exporters.config import load_plan
from goodput.foundation.promapi import Endpoint, endpoint
from goodput.review.prom import run_queries
from goodput.review.queries import WEEK_S, alert_rules, build_queries
from goodput.review.recommend import recommend
from goodput.review.summarize import _iso, summarize
from goodput.simulator.week import parse_week

__all__ = ["DEFAULT_RULES", "prometheus_review", "releases_in_week"]

DEFAULT_RULES = Path(__file__).resolve().parents[2] / "rules"


def releases_in_week(path: Path | None, start: float) -> list[dict]:
    if path is None:
        return []
    return [{"time": _iso(r.time.timestamp()), "deployment": r.deployment, "kind": r.kind, "from": r.from_version,
             "to": r.to_version, "note": r.note}
            for r in load_releases(path) if start <= r.time.timestamp() < start + WEEK_S]


def prometheus_review(server: Endpoint | str, week: str, *, plan: Path | None = None, releases: Path | None = None,
                      rules_dir: Path = DEFAULT_RULES, history_weeks: int = 3, redundancy: float = 1.2,
                      gpu_hour_cost: float | None = None, concurrency: int = 16, now: float | None = None) -> dict:
    """``now`` (default: the clock) ends a week still in progress: the objectives are read then, and the report
    says the week is partial."""
    start = parse_week(week).timestamp()
    now = time.time() if now is None else now
    the_plan = load_plan(plan) if plan is not None else None
    rel = releases_in_week(releases, start)
    rules = alert_rules(sorted(rules_dir.glob("*.rules.yaml"))) if rules_dir.is_dir() else []
    server = endpoint(server)
    raw = run_queries(server, build_queries(start, history_weeks, rules, now), concurrency=concurrency)
    review = summarize(raw, week, start, the_plan, rules, redundancy, gpu_hour_cost, now=now)
    review["source"] = f"Prometheus {server.url}"
    review["releases"] = rel
    review["recommendations"] = recommend(review)
    return review
