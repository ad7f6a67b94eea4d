"""Run benchmarks: ``python -m benchmarks [NAME ...]`` (all of them by default).

Each takes its own options when run alone: ``python -m benchmarks.NAME --help``.
"""

import argparse

from benchmarks import (
    analyzer,
    analyzer_scale,
    cli_startup,
    console,
    exporters,
    fleet_server,
    ingest_otlp,
    loadtest_client,
    loadtest_sweep,
    plan,
    review,
    rules_scale,
    sim_speed,
)

BENCHMARKS = {"sim_speed": sim_speed.main, "exporters": exporters.main, "analyzer": analyzer.main,
              "analyzer_scale": analyzer_scale.main,
              "fleet_server": fleet_server.main, "cli_startup": cli_startup.main, "loadtest_client": loadtest_client.main,
              "loadtest_sweep": loadtest_sweep.main, "plan": plan.main, "review": review.main, "console": console.main,
              "rules_scale": rules_scale.main, "ingest_otlp": ingest_otlp.main}

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"any of {', '.join(BENCHMARKS)}")
    names = parser.parse_args().names or list(BENCHMARKS)
    if unknown := [n for n in names if n not in BENCHMARKS]:
        parser.error(f"unknown benchmark {', '.join(unknown)} (choose from {', '.join(BENCHMARKS)})")
    for name in names:
        BENCHMARKS[name]()
