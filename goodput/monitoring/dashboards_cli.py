"""``goodput dashboards``: Grafana dashboards/*.json from the catalog and rules, and the releases rule file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from goodput.foundation.generated import report_stale

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dashboards", help="Grafana dashboards generated from the metric catalog",
                       description="Grafana dashboards as code: generated from goodput/contracts/catalog.py and the rules "
                                   "generated from rules/slos.yaml (docs/dashboards.md).")
    dsub = p.add_subparsers(dest="dashboards_command", metavar="COMMAND")
    dsub.required = True
    g = dsub.add_parser("generate", help="write dashboards/*.json",
                        description="Generate dashboards/*.json. --check exits 1 (listing the files) when the committed "
                                    "files are stale.")
    g.add_argument("--spec", type=Path, default=Path("rules/slos.yaml"), help="rules spec (default rules/slos.yaml)")
    g.add_argument("--out", type=Path, default=Path("dashboards"), help="output directory (default dashboards/)")
    g.add_argument("--check", action="store_true", help="only compare; exit 1 when a file differs")
    g.set_defaults(func=_generate)
    r = dsub.add_parser("releases", help="a Prometheus rule file recording each release, for the release annotations",
                        description="Turn a releases file (YAML or CSV, docs/design.md) into a Prometheus rule file "
                                    "recording deployment:llm_release:timestamp_seconds, one series per release; "
                                    "the dashboards' Releases annotation reads it.")
    r.add_argument("releases", type=Path, help="releases file")
    r.add_argument("--out", type=Path, default=None, help="rule file to write (default: stdout)")
    r.set_defaults(func=_releases)


def _generate(args: argparse.Namespace) -> int:
    from goodput.monitoring.dashgen import build, write
    from goodput.monitoring.rulegen import load_spec

    spec = load_spec(args.spec)
    if args.check:
        return report_stale(build(spec), args.out, "goodput dashboards generate")
    for path in write(spec, args.out):
        print(f"wrote {path}")
    return 0


def _releases(args: argparse.Namespace) -> int:
    from goodput.monitoring.dashgen import release_rules

    text = release_rules(args.releases)
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    return 0
