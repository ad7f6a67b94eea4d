"""The ``goodput`` command: one entry point whose subcommands come from each package's ``cli`` module.

Bad input anywhere surfaces as ``ConfigError``; it is printed as one line and the exit code is 2.
"""

from __future__ import annotations

import argparse
import sys

from analyzer import cli as analyzer_cli
from exporters import cli as exporters_cli
from goodput import __version__, demo, rules_cli
from goodput.foundation.args import Parser
from goodput.foundation.errors import ConfigError
from simulator import cli as simulator_cli

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="goodput",
        description="Observability, alerting and capacity planning for LLM inference fleets.",
    )
    parser.add_argument("--version", action="version", version=f"goodput {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    simulator_cli.register(sub)
    exporters_cli.register(sub)
    rules_cli.register(sub)
    analyzer_cli.register(sub)
    demo.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as e:
        print(f"goodput: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
