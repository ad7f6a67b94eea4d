"""``goodput rules generate``: rules/*.rules.yaml and rules/alertmanager.yaml from rules/slos.yaml, and
rules/normalize.rules.yaml from the engine exporter's dialect tables."""

from __future__ import annotations

import argparse
from pathlib import Path

from goodput.foundation.args import positive_number
from goodput.foundation.generated import report_stale

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rules", help="Prometheus rules and Alertmanager routes",
                       description="Prometheus rules and the Alertmanager configuration, generated from one spec.")
    rsub = p.add_subparsers(dest="rules_command", metavar="COMMAND")
    rsub.required = True
    g = rsub.add_parser("generate", help="write the rule files and alertmanager.yaml from the SLO spec",
                        description="Generate rules/*.rules.yaml and rules/alertmanager.yaml from rules/slos.yaml, "
                                    "and rules/normalize.rules.yaml (the engine normalization as recording rules) "
                                    "from the exporter's dialect tables. --check exits 1 (listing the files) when "
                                    "the committed files are stale.")
    g.add_argument("--spec", type=Path, default=Path("rules/slos.yaml"), help="spec file (default rules/slos.yaml)")
    g.add_argument("--out", type=Path, default=None, help="output directory (default: the spec's directory)")
    g.add_argument("--check", action="store_true", help="only compare; exit 1 when a file differs")
    g.add_argument("--scale-durations", type=positive_number, default=1.0, metavar="FACTOR",
                   help="multiply every range and `for` (test-only variants; keep 1 for real files)")
    g.set_defaults(func=_generate)


def _generate(args: argparse.Namespace) -> int:
    from goodput import normrules
    from goodput.rulegen import build, load_spec, write

    spec = load_spec(args.spec)
    out = args.out or args.spec.parent
    if args.check:
        return report_stale({**build(spec, args.scale_durations), **normrules.build()}, out, "goodput rules generate")
    for path in [*write(spec, out, args.scale_durations), *normrules.write(out)]:
        print(f"wrote {path}")
    return 0
