"""``goodput console`` after ``goodput demo``: without --plan it reads the plan the demo wrote beside its database
(the demo's RAG pool has its own row there), not examples/plan.yaml. Before: the console after ``make demo`` read
examples/plan.yaml, whose RAG row is the fleet file's, not the incident's."""

from __future__ import annotations

import argparse
import subprocess
import sys

from goodput.console.cli import FLAGS, demo_plan, environment
from goodput.console.settings import ENV, Settings
from goodput.demo.cli import Demo
from goodput.demo.incident import RAG_REPLICA_GOODPUT
from goodput.exporters.config import load_plan
from tests.conftest import REPO, free_port_block


def _args(**given) -> argparse.Namespace:
    return argparse.Namespace(**{**{k: None for k in FLAGS}, **given})


def _demo_args(out) -> argparse.Namespace:
    base = free_port_block(8)
    return argparse.Namespace(
        fleet=REPO / "examples" / "fleet.yaml", out=out, host="127.0.0.1", base_port=base, gpu_port=base + 1,
        engine_port=base + 2, requests_port=base + 3, otlp_port=base + 4, prometheus_port=base + 5,
        alertmanager_port=base + 6, webhook_port=base + 7, plan=REPO / "examples" / "plan.yaml", no_prometheus=True,
        speed=1.0, duration=None, console_port=8501, no_console=True, no_incident=False, headless=False, week=None)


def test_the_console_reads_the_plan_the_demo_wrote_beside_its_database(tmp_path):
    demo = Demo(_demo_args(tmp_path / "demo-out"))  # writes its fleet and plan; starts nothing
    env = environment(_args(db=str(demo.db)), base={})
    plan = Settings.from_env(env).plan
    assert plan == demo.plan_path.resolve() == demo_plan(str(demo.db))
    rag = demo.incident_deployment()
    assert load_plan(plan).goodput[rag] == RAG_REPLICA_GOODPUT != load_plan(REPO / "examples" / "plan.yaml").goodput[rag]


def test_a_plan_given_wins_and_without_one_beside_the_database_the_default_holds(tmp_path):
    (tmp_path / "plan.yaml").write_text("plan_version: 1\ndeployments: {}\n")
    db = str(tmp_path / "analyzer.duckdb")
    assert environment(_args(db=db, plan=str(tmp_path / "mine.yaml")), base={})[ENV["plan"]] == str(tmp_path / "mine.yaml")
    assert environment(_args(db=db), base={ENV["plan"]: str(tmp_path / "env.yaml")})[ENV["plan"]] == str(
        tmp_path / "env.yaml")
    assert ENV["plan"] not in environment(_args(db=str(tmp_path / "elsewhere" / "a.duckdb")), base={})
    assert demo_plan("clickhouse://127.0.0.1:8123/otel") is None


def test_goodput_console_says_which_plan_it_reads(tmp_path):
    """The printed line, from the command itself (it then becomes Streamlit: stopped at once by a bad setting)."""
    (tmp_path / "plan.yaml").write_text("plan_version: 1\ndeployments: {}\n")
    done = subprocess.run([sys.executable, "-m", "goodput", "console", "--db", str(tmp_path / "analyzer.duckdb"),
                           "--prometheus-url", "http://127.0.0.1:1", "--prometheus-header", "no-colon"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"plan: {tmp_path.resolve() / 'plan.yaml'} (the one beside the database" in done.stdout
