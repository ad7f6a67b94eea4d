"""``goodput week``: a simulated week's files, and its backfill into a Prometheus data directory.

DIR/week.om (OpenMetrics), DIR/releases.yaml (the releases file format), DIR/plan.yaml (the plan the
simulated fleet is sized by: its replicas and the modelled per-replica goodput), DIR/truth.json (what
the week contained), and with a backfill port DIR/tsdb with the raw series and the recording rules the
review and the page alerts read.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import yaml

from goodput.foundation.errors import ConfigError
from goodput.review.backfill import backfill, rule_names
from goodput.review.openmetrics import GOODPUT_SHARE, write_openmetrics
from goodput.review.queries import RECORDED, alert_rules
from goodput.simulator.config import FleetConfig
from goodput.simulator.week import WeekModel, WeekSpec, simulate_week

__all__ = ["demo_week", "plan_of", "write_week"]


def plan_of(model: WeekModel) -> dict:
    return {"plan_version": 1, "deployments": {
        name: {"replica_goodput_tokens_per_second": round(d.replica_capacity_tokens * GOODPUT_SHARE),
               "desired_replicas": d.config.replicas} for name, d in model.deployments.items()}}


def write_week(fleet: FleetConfig, spec: WeekSpec, out: Path, backfill_port: int | None = None,
               rules_dir: Path | None = None, progress=print) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    model = simulate_week(fleet, spec)
    paths = {"openmetrics": out / "week.om", "releases": out / "releases.yaml", "plan": out / "plan.yaml",
             "truth": out / "truth.json"}
    samples = write_openmetrics(model, paths["openmetrics"])
    progress(f"wrote {samples:,} samples to {paths['openmetrics']}")
    paths["releases"].write_text(yaml.safe_dump(model.releases, sort_keys=False))
    paths["plan"].write_text(yaml.safe_dump(plan_of(model), sort_keys=False))
    paths["truth"].write_text(json.dumps(model.truth(), indent=1))
    if backfill_port is not None:
        from goodput.review.review import DEFAULT_RULES  # the default rules directory
        files = sorted((rules_dir or DEFAULT_RULES).glob("*.rules.yaml"))
        wanted = set(RECORDED.values()) | {n for a in alert_rules(files) for n in rule_names(a.expr)}
        paths["tsdb"] = out / "tsdb"
        backfill(paths["openmetrics"], paths["tsdb"], files, model.week_start, model.week_start + timedelta(weeks=1),
                 backfill_port, wanted, progress=progress)
    return paths


def demo_week(fleet_path: Path, week: str, out: Path, port: int, plan: Path | None = None,
              duration: float | None = None, spec: WeekSpec | None = None) -> int:
    """``goodput demo --week``: simulate the week, backfill it, serve it with Prometheus on ``port``, write the
    review against it, and keep Prometheus up until Ctrl-C (or ``duration`` seconds) for a look around.

    A ``port`` in use is refused before anything is simulated (the review must read this week's Prometheus, not
    whatever answers there). ``week.om`` (4.5 GB at the defaults) is deleted once it is in the TSDB: the review
    reads Prometheus, and ``goodput week`` writes the file again for whoever wants it."""
    from goodput.foundation.http import serve_until_signal
    from goodput.review.backfill import port_free, serve_tsdb
    from goodput.review.report import write_review
    from goodput.review.review import prometheus_review
    from goodput.simulator.config import load_fleet

    if (out / "tsdb").exists():
        raise ConfigError(str(out / "tsdb"), "--out", "holds a backfilled week already; remove it or pick another --out")
    port_free("127.0.0.1", port)
    spec = spec or WeekSpec(week, tenants=50)
    paths = write_week(load_fleet(fleet_path), spec, out, backfill_port=port)
    om = paths.pop("openmetrics")
    size = om.stat().st_size
    om.unlink()
    print(f"deleted {om} ({size / 1e9:.1f} GB) now that it is in {paths['tsdb']}", flush=True)
    served = serve_tsdb(paths["tsdb"], port)
    try:
        review = prometheus_review(served.url, week, plan=plan or paths["plan"], releases=paths["releases"])
        files = write_review(review, out / "review")
        print(f"Prometheus serving the week: {served.url}/graph (data {paths['tsdb']})")
        for k, v in files.items():
            print(f"  review.{k:5s} {v}")
        for r in review["recommendations"]:
            print(f"  {r['deployment']}: {r['action']}")
        print(f"Again: goodput review --prometheus {served.url} --week {week} --plan {plan or paths['plan']} "
              f"--releases {paths['releases']} --out DIR.  Ctrl-C to stop.", flush=True)
        serve_until_signal(lambda: None, duration)
    finally:
        served.stop()
    return 0
