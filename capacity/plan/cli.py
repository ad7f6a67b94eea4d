"""``goodput plan``: capacity plans; each subcommand's module adds its own parser."""

from __future__ import annotations

import argparse

from capacity.plan import memory_cli

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    plan = sub.add_parser("plan", help="capacity plans: memory budget, replicas and autoscaling policies",
                          description="Capacity plans for LLM deployments.")
    psub = plan.add_subparsers(dest="plan_command", metavar="COMMAND")
    psub.required = True
    memory_cli.add_parser(psub)
