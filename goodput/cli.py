"""The ``goodput`` command: one entry point whose subcommands come from each package's ``cli`` module.

Only the chosen subcommand's module is imported: the table below knows every subcommand's name and
one-line help, which is all ``goodput --help`` shows, so ``goodput --version`` does not load pandas,
DuckDB or the simulator (``tests/test_cli.py`` checks the table against the modules).

Bad input anywhere surfaces as ``ConfigError``; it is printed as one line and the exit code is 2. A simulator
module edited after it was compiled (``StaleBuildError``) stops only the commands that import it: one line, exit 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from dataclasses import dataclass

from goodput import __version__
from goodput.foundation.args import Parser
from goodput.foundation.errors import ConfigError, StaleBuildError

__all__ = ["COMMANDS", "Command", "build_parser", "main"]


@dataclass(frozen=True)
class Command:
    module: str  # its ``register(subparsers)`` adds this command (and maybe its neighbours in the table)
    help: str


COMMANDS: dict[str, Command] = {
    "simulate": Command("goodput.simulator.cli", "run a fleet in virtual time and write its requests, spans and releases"),
    "fleet": Command("goodput.simulator.cli", "the live simulated fleet"),
    "exporter": Command("goodput.exporters.cli", "the GPU, engine and request exporters"),
    "rules": Command("goodput.monitoring.rules_cli", "Prometheus rules and Alertmanager routes"),
    "dashboards": Command("goodput.monitoring.dashboards_cli", "Grafana dashboards generated from the metric catalog"),
    "analyze": Command("goodput.analyzer.cli", "latency decomposition, regressions and triage over request traces"),
    "demo": Command("goodput.demo.cli", "run the stack on the simulated fleet until Ctrl-C"),
    "loadtest": Command("goodput.loadtest.cli", "load tests that measure SLO goodput"),
    "plan": Command("goodput.plan.cli", "capacity plans: memory budget, replicas and autoscaling policies"),
    "review": Command("goodput.review.cli", "the weekly capacity review from Prometheus or a trace store"),
    "week": Command("goodput.review.cli", "a compressed simulated week as OpenMetrics, backfilled into a TSDB"),
    "console": Command("goodput.console.cli", "the triage console (Streamlit) on 127.0.0.1:8501"),
    "deploy": Command("goodput.deploy.cli", "Kubernetes manifests for kube-prometheus-stack"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full parser of ``command`` (its module imported); every other command is only its name and help."""
    parser = Parser(
        prog="goodput",
        description="Observability, alerting and capacity planning for LLM inference fleets.",
    )
    parser.add_argument("--version", action="version", version=f"goodput {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    chosen = COMMANDS.get(command or "")
    for name, cmd in COMMANDS.items():
        if name in sub.choices:
            continue
        if chosen is not None and cmd.module == chosen.module:
            importlib.import_module(cmd.module).register(sub)
        else:
            sub.add_parser(name, help=cmd.help)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # the top level takes no option with a value, so the first word that is not an option names the command
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        args = build_parser(command).parse_args(argv)  # imports the command's module: a stale build fails here
        return int(args.func(args) or 0)
    except ConfigError as e:
        print(f"goodput: error: {e}", file=sys.stderr)
        return 2
    except StaleBuildError as e:  # an edited simulator module with its old build beside it: what simulates stops here
        print(f"goodput: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # stdout's reader went away (`| head`): what it wanted it has; quiet, as `cat` is
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush does not raise again
        return 141  # 128 + SIGPIPE, what a shell tool killed by the signal reports
    except OSError as e:  # a path that passed the checks and still failed (disk full, removed meanwhile): one line
        print(f"goodput: error: {e.filename + ': ' if e.filename else ''}{e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
