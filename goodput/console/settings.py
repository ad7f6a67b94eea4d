"""Where the console reads from: the environment ``goodput console`` sets and ``streamlit run goodput/console/app.py`` reads.

Every source has the demo's default, so ``make demo`` and a bare ``streamlit run goodput/console/app.py`` agree.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from goodput.foundation import promendpoint
from goodput.foundation.clickhouse import is_clickhouse, parse_target
from goodput.foundation.promendpoint import Endpoint

__all__ = ["DEFAULTS", "ENV", "Settings"]

# field -> environment variable
ENV = {"db": "GOODPUT_DB", "prometheus_url": "GOODPUT_PROMETHEUS_URL", "alertmanager_url": "GOODPUT_ALERTMANAGER_URL",
       "plan": "GOODPUT_PLAN", "runs": "GOODPUT_RUNS", "releases": "GOODPUT_RELEASES", "slos": "GOODPUT_SLOS",
       "reviews": "GOODPUT_REVIEWS", "fleet": "GOODPUT_FLEET"}
DEFAULTS = {"db": "demo-out/analyzer.duckdb", "prometheus_url": "http://127.0.0.1:9090",
            "alertmanager_url": "http://127.0.0.1:9093", "plan": "examples/plan.yaml", "runs": "loadtest-runs",
            "releases": "demo-out/releases.yaml", "slos": "rules/slos.yaml", "reviews": "demo-out/week",
            "fleet": "examples/fleet.yaml"}


@dataclass(frozen=True)
class Settings:
    db: Path | str  # the analyzer's DuckDB file, or a ClickHouse target read in place (clickhouse://..., chdb:DIR)
    prometheus_url: str
    alertmanager_url: str
    plan: Path
    runs: Path
    releases: Path
    slos: Path
    reviews: Path  # searched for the newest review.json (`goodput review --out`, `goodput demo --week`)
    fleet: Path  # the deployments' model, GPU, TP and dtypes, where the Capacity what-if starts
    prometheus: Endpoint  # prometheus_url with the tenant, headers and credentials of promendpoint.ENV

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings of ``env``; a ClickHouse target that does not parse, or a Prometheus tenant, header or
        credential that is unusable, is a ConfigError."""
        env = os.environ if env is None else env
        v = {k: env.get(var) or DEFAULTS[k] for k, var in ENV.items()}
        if is_clickhouse(v["db"]):
            parse_target(v["db"], ENV["db"])
        return cls(db=v["db"] if is_clickhouse(v["db"]) else Path(v["db"]), prometheus_url=v["prometheus_url"].rstrip("/"),
                   alertmanager_url=v["alertmanager_url"].rstrip("/"), plan=Path(v["plan"]), runs=Path(v["runs"]),
                   releases=Path(v["releases"]), slos=Path(v["slos"]), reviews=Path(v["reviews"]),
                   fleet=Path(v["fleet"]), prometheus=promendpoint.from_env(v["prometheus_url"], env))

    def environment(self) -> dict[str, str]:
        """The variables that make ``streamlit run goodput/console/app.py`` read these settings."""
        return {var: str(getattr(self, k)) for k, var in ENV.items()}
