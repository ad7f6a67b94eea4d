"""``goodput rules generate``: rules/*.rules.yaml and rules/alertmanager.yaml from rules/slos.yaml."""

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
                        description="Generate rules/*.rules.yaml and rules/alertmanager.yaml from rules/slos.yaml. "
                                    "--check exits 1 (listing the files) when the committed files are stale.")
    g.add_argument("--spec", type=Path, default=Path("rules/slos.yaml"), help="spec file (default rules/slos.yaml)")
    g.add_argument("--out", type=Path, default=None, help="output directory (default: the spec's directory)")
    g.add_argument("--check", action="store_true", help="only compare; exit 1 when a file differs")
    g.add_argument("--scale-durations", type=positive_number, default=1.0, metavar="FACTOR",
                   help="multiply every range and `for` (test-only variants; keep 1 for real files)")
    g.set_defaults(func=_generate)


def _generate(args: argparse.Namespace) -> int:
    from goodput import dcgmrules
    from goodput.rulegen import build, load_spec

    spec = load_spec(args.spec)
    out = args.out or args.spec.parent
    files = {**build(spec, args.scale_durations), **dcgmrules.build(spec, args.scale_durations)}
    if args.check:
        return report_stale(files, out, "goodput rules generate")
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out / name).write_text(text)
        print(f"wrote {out / name}")
    return 0
