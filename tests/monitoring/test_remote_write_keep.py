"""docs/cardinality.md's remote_write keep-list against what goodput reads from a long-term store: every series
name in `goodput review`'s queries (its paging alerts' expressions included) and the console's Prometheus queries
is kept, the bulk the list exists to drop is not, and `promtool check config` accepts the documented config."""

from __future__ import annotations

import re
import subprocess

import yaml

from goodput.console import promql
from goodput.console.filters import Filters
from goodput.contracts.catalog import CATALOG
from goodput.review.queries import alert_rules, build_queries
from tests.conftest import REPO, needs

DOC = REPO / "docs" / "cardinality.md"
KEYWORDS = {"by", "on", "without", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
            "inf", "nan"}


def _config() -> dict:
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S) if "remote_write" in b)
    return yaml.safe_load(block)


def _keep() -> re.Pattern:
    (rule,) = [r for r in _config()["remote_write"][0]["write_relabel_configs"] if r["action"] == "keep"]
    return re.compile(rule["regex"])  # Prometheus anchors a relabel regex: fullmatch below


def series_names(expr: str) -> set[str]:
    """The series an expression reads: its names, less functions, keywords, labels, strings and durations."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^{}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|on|without|ignoring|group_left|group_right)\s*\([^()]*\)", " ", e)
    return {t for t in re.findall(r"(?<![\w:.])([A-Za-z_:][\w:]*)(?![\w:]|\s*\()", e) if t.lower() not in KEYWORDS}


def _read() -> set[str]:
    rules = alert_rules(sorted((REPO / "rules").glob("*.rules.yaml")))
    exprs = [q.expr for q in build_queries(0.0, 4, rules, now=0.0)]
    f = Filters()
    exprs += [q for fn in (promql.overview, promql.kv, promql.routing) for q in fn(f).values()]
    exprs += [q for fn in (promql.gateway, promql.overload) for q in fn(f, 3600).values()]
    return set().union(*(series_names(e) for e in exprs))


def test_the_keep_list_keeps_every_series_the_review_and_the_console_read():
    read = _read()
    assert {"llm_gateway_requests_total", "deployment_tier:llm_gateway_requests:rate5m", "ALERTS", "up"} <= read, read
    keep = _keep()
    assert sorted(n for n in read if not keep.fullmatch(n)) == []


def test_the_keep_list_drops_the_bulk():
    keep = _keep()
    histograms = [f"{m.name}_bucket" for m in CATALOG if m.type == "histogram"]
    dropped = [*histograms, "vllm:num_requests_running", "vllm:time_to_first_token_seconds_bucket",
               "sglang:num_running_reqs", "process_cpu_seconds_total", "llm_gpu_utilization_ratio"]
    assert [n for n in dropped if keep.fullmatch(n)] == []


def test_series_names_reads_what_an_expression_reads():
    expr = ('sum by (deployment) (rate(llm_gateway_requests_total{outcome="ok", reason=~"a|b"}[5m] offset 1h))\n'
            '/ on (deployment) group_left (tier) max_over_time(deployment:llm_replicas_available:max[7d]) > bool 1')
    assert series_names(expr) == {"llm_gateway_requests_total", "deployment:llm_replicas_available:max"}


@needs("promtool")
def test_promtool_accepts_the_documented_config(tmp_path):
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(_config()))
    got = subprocess.run(["promtool", "check", "config", "--syntax-only", str(path)], capture_output=True, text=True,
                         timeout=60)
    assert got.returncode == 0, got.stdout + got.stderr

