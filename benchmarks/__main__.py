"""Run every benchmark: ``python -m benchmarks [NAME ...]``."""

import sys

from benchmarks import analyzer, exporters, sim_speed

BENCHMARKS = {"sim_speed": sim_speed.main, "exporters": exporters.main, "analyzer": analyzer.main}

if __name__ == "__main__":
    names = sys.argv[1:] or list(BENCHMARKS)
    for name in names:
        BENCHMARKS[name]()
