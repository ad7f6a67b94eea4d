"""The review's names are the rules' and the catalog's; pages from alert series; the trace-store review."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from goodput.analyzer.store import connect
from goodput.contracts.catalog import names
from goodput.review.prom import Series
from goodput.review.queries import RAW, RECORDED, alert_rules, build_queries, pages_from_series
from goodput.review.review import DEFAULT_RULES
from goodput.review.traces import db_review
from tests.conftest import REPO

RULE_FILES = sorted((REPO / "rules").glob("*.rules.yaml"))


def test_every_name_the_review_reads_is_recorded_by_the_rules_or_in_the_catalog():
    recorded = {r["record"] for f in RULE_FILES for g in yaml.safe_load(f.read_text())["groups"]
                for r in g["rules"] if "record" in r}
    assert set(RECORDED.values()) <= recorded, set(RECORDED.values()) - recorded
    assert set(RAW.values()) <= names(), set(RAW.values()) - names()
    for q in build_queries(1_795_392_000.0, 3, alert_rules(RULE_FILES)):
        for n in re.findall(r"\b(llm_[a-z_]+)\b", q.expr):
            # a catalog name (normalize/dcgm rules record catalog names too) or a level:metric:op's metric
            assert n in names() or n in {v.split(":")[1] for v in recorded if ":" in v}, (q.key, n)
    assert DEFAULT_RULES == REPO / "rules"


def test_page_alerts_come_from_the_rule_files_with_their_for():
    rules = {a.name: a for a in alert_rules(RULE_FILES)}
    assert rules["LLMEngineDown"].for_s == 120 and rules["LLMKVCacheAllocationFailures"].for_s == 600
    assert "GoodputWatchdog" not in rules and "LLMExporterDown" not in rules  # info and ticket, not pages


def test_a_page_fires_once_its_condition_held_for_its_for_and_ends_with_the_condition():
    t0 = 1_795_392_000.0
    held = np.concatenate([t0 + 60 * np.arange(10), t0 + 3600 + 60 * np.arange(2)])  # 10 min, then 2 min
    s = Series({"__name__": "llm_engine_up", "deployment": "d", "replica": "r"}, held, np.zeros(len(held)))
    pages = pages_from_series("LLMEngineDown", [s], for_s=120)
    assert len(pages) == 1  # the 2-minute run reaches 'for: 2m' only at its last point + 60 s: not held long enough
    assert pages[0].start == t0 + 120 and pages[0].end == t0 + 600 and pages[0].labels == {"deployment": "d",
                                                                                          "replica": "r"}



def _store(path: Path) -> None:
    con = connect(path)
    # two weeks of one request a minute: P0 chat meets its TTFT 0.5 s except on Wednesday of the reviewed week
    con.execute("""
        INSERT INTO requests (trace_id, ts, start_ns, end_ns, deployment, tenant, tier, route, input_tokens,
                              output_tokens, outcome, e2e_s, ttft_s, tpot_s, preemptions)
        SELECT printf('%032x', i), to_timestamp(1795392000 - 604800 + i * 60), 0, 0, 'chat', 'acme', 'P0', 'chat',
               1000, 100, 'ok', 2.0,
               CASE WHEN i >= 10080 + 2 * 1440 AND i < 10080 + 3 * 1440 THEN 1.5 ELSE 0.2 END, 0.02, 0
        FROM range(2 * 10080) t(i)""")
    con.close()


def test_the_review_from_a_trace_store(tmp_path):
    _store(tmp_path / "t.duckdb")
    review = db_review(tmp_path / "t.duckdb", "2026-W48")
    tier = review["deployments"]["chat"]["tiers"]["P0"]
    assert tier["requests"] == 10080 and tier["requests_previous_week"] == 10080
    assert tier["requests_week_over_week_pct"] == 0.0
    (slo,) = tier["slo"]
    assert slo["ttft_attainment"] == round(6 / 7, 5) and not slo["met"]  # one day in seven missed
    assert review["deployments"]["chat"]["capacity"] == {"plan": None, "note": "no plan"}
    assert review["page_source"].startswith("none")


def test_commands_have_help_and_a_bad_week_is_one_line():
    for cmd in (["review", "--help"], ["week", "--help"]):
        done = subprocess.run([sys.executable, "-m", "goodput", *cmd], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and "--week" in done.stdout
    done = subprocess.run([sys.executable, "-m", "goodput", "review", "--db", "nope.duckdb", "--week", "2026-48",
                           "--out", "x"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "2026-48" in done.stderr and "Traceback" not in done.stderr
