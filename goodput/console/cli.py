"""``goodput console``: the triage console (``streamlit run goodput/console/app.py``) on 127.0.0.1:8501.

The flags set the environment the app reads (goodput/console/settings.py), so both ways of starting it agree.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from goodput.console.settings import DEFAULTS, ENV, Settings
from goodput.foundation import promendpoint
from goodput.foundation.args import port
from goodput.foundation.clickhouse import is_clickhouse

__all__ = ["APP", "REPO", "environment", "register", "streamlit_command"]

APP = Path(__file__).resolve().parent / "app.py"
REPO = APP.parents[2]  # the app runs from the checkout: its default sources (examples/, rules/) are relative to it
FLAGS = {"db": "--db", "prometheus_url": "--prometheus-url", "alertmanager_url": "--alertmanager-url",
         "plan": "--plan", "runs": "--runs", "releases": "--releases", "slos": "--slos", "reviews": "--reviews",
         "fleet": "--fleet"}

HELP = {"db": ": the analyzer's DuckDB file, or the Collector's otel_traces read in place in ClickHouse "
              "(clickhouse://HOST:PORT/DATABASE[?table=otel_traces]) or chDB (chdb:DIR)"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("console", help="the triage console (Streamlit) on 127.0.0.1:8501",
                       description="Start the triage console: `streamlit run goodput/console/app.py` with its "
                                   "sources set from these flags (each also read from its environment variable).")
    for key, flag in FLAGS.items():
        p.add_argument(flag, default=None, help=f"{ENV[key]} (default {DEFAULTS[key]}){HELP.get(key, '')}")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=port, default=8501, help="port (default 8501)")
    promendpoint.add_arguments(p, "--prometheus-url")
    p.set_defaults(func=_console)


def streamlit_command(host: str, port_: int) -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", str(APP), "--server.address", host, "--server.port", str(port_),
            "--server.headless", "true", "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]


PATHS = ("db", "plan", "runs", "releases", "slos", "reviews", "fleet")  # the settings that name files, not servers


def environment(args: argparse.Namespace, base: dict[str, str] | None = None) -> dict[str, str]:
    """The app's environment: ``base`` with the flags given. A relative path, from a flag or the environment, is made
    absolute against the working directory here, because the app runs from the repository (``_console`` changes
    there); the defaults stay relative to the repository, where they point."""
    env = dict(os.environ if base is None else base)
    for key in FLAGS:
        value = getattr(args, key)
        if value is not None:
            env[ENV[key]] = str(value)
        if key in PATHS and env.get(ENV[key]):
            env[ENV[key]] = _absolute(env[ENV[key]])
    env.update(promendpoint.arguments_env(args))
    if not env.get(ENV["plan"]) and (plan := demo_plan(env.get(ENV["db"]) or str(REPO / DEFAULTS["db"]))):
        env[ENV["plan"]] = str(plan)
    return env


def demo_plan(db: str) -> Path | None:
    """The ``plan.yaml`` beside a database file, as ``goodput demo --out DIR`` writes them (DIR/analyzer.duckdb,
    DIR/plan.yaml: its RAG pool's own row): the plan of the run whose traces the console reads, when no plan is
    given. A ClickHouse store has no directory of its own to look in."""
    if is_clickhouse(db):
        return None
    plan = Path(db).parent / "plan.yaml"
    return plan.resolve() if plan.is_file() else None


def _absolute(value: str) -> str:
    """A path made absolute; a ``chdb:DIR`` its directory; a ``clickhouse://`` URL as it is."""
    if value.startswith("chdb:"):
        rest, sep, query = value[len("chdb:"):].partition("?")
        return f"chdb:{os.path.abspath(rest) if rest else rest}{sep}{query}"
    return value if is_clickhouse(value) else os.path.abspath(value)


def _console(args: argparse.Namespace) -> int:
    print(f"goodput console: http://{args.host}:{args.port}/", flush=True)
    # become Streamlit rather than wait on it: a SIGTERM to this process (a service manager, a container stop)
    # must reach the server, not leave it serving behind a dead parent
    os.chdir(REPO)
    env = environment(args)
    print(f"  plan: {env.get(ENV['plan']) or DEFAULTS['plan']}" + ("" if args.plan or os.environ.get(ENV["plan"]) else
          " (the one beside the database, else the default; --plan to choose)"), flush=True)
    Settings.from_env(env)  # a --db that does not parse, a Prometheus tenant, header or credential: one line, exit 2
    cmd = streamlit_command(args.host, args.port)
    os.execve(cmd[0], cmd, env)
