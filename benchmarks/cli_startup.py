"""Command-line start-up and whole-process normalization, each beside its baseline in the same run.

1. Start-up, whole process, best and median of ``--runs``: a bare ``python -c pass``, ``goodput --version``,
   ``goodput --help`` and ``goodput exporter engine normalize`` on one replica's dump, for this checkout and
   for ``--before`` (default: the last commit whose command line imported every subcommand up front; its own
   packages, whatever their layout, unpacked with ``git archive`` by ``benchmarks/history.py``), each run from its
   own root so that ``python -m goodput`` imports that version.
   Goal: ``--help`` within 0.25 s of the bare interpreter.
2. One engine dump of ~232k samples (the simulated fleet's vLLM ``/metrics``, one data-parallel ``engine``
   label per replica), whole process: ``goodput exporter engine normalize`` against prometheus_client's parse
   and re-expose of the same file. Goal: 20x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import history
from benchmarks.exporters import PROMETHEUS_CLIENT, data_parallel_dump, fleet_dumps
from benchmarks.report import emit

REPO = Path(__file__).resolve().parents[1]
EAGER_CLI = "89b007fe9f29da19f6ffe5734f4d246698222e0d"  # the last commit before imports per subcommand
# as a user runs it: the warm-up run writes .pyc files and the timed runs load them
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

def _time(commands: dict[str, tuple[list[str], Path]], runs: int) -> dict[str, dict]:
    """Wall time of each whole process (argv, working directory), best and median of ``runs`` after one warm-up
    (which writes .pyc files). The commands take turns, so a neighbour's load spike hits all of them alike."""
    times: dict[str, list[float]] = {label: [] for label in commands}
    for n in range(runs + 1):
        for label, (cmd, cwd) in commands.items():
            t0 = time.perf_counter()
            subprocess.run(cmd, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            if n:
                times[label].append(time.perf_counter() - t0)
    return {label: {"best_s": round(min(t), 3), "median_s": round(statistics.median(t), 3)} for label, t in times.items()}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cli_startup", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=10, help="timed runs per command (default 10)")
    p.add_argument("--big-runs", type=int, default=5, help="timed runs per command on the big dump (default 5)")
    p.add_argument("--samples", type=int, default=232_000, help="samples in the big dump (default 232000)")
    p.add_argument("--before", default=EAGER_CLI, metavar="REF",
                   help="the baseline version of the code (default: the last commit with the eager command line)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv if argv is not None else [])

    py = sys.executable
    dumps = fleet_dumps(replicas=50, seconds=60.0)
    with tempfile.TemporaryDirectory(prefix="goodput-bench-cli-") as tmp:
        tmp_path = Path(tmp)
        small = tmp_path / "replica.txt"
        small.write_text(dumps[0])
        big = tmp_path / "engines.txt"
        text, samples = data_parallel_dump(dumps, args.samples)
        big.write_text(text)
        roots = {"before": history.unpack(args.before, tmp_path / "before"), "after": REPO}
        commands = {"--version": ["--version"], "--help": ["--help"],
                    "exporter engine normalize (one replica)": ["exporter", "engine", "normalize", str(small)]}
        timed = _time({"python -c pass": ([py, "-c", "pass"], REPO)}
                      | {f"goodput {label} | {v}": ([py, "-m", "goodput", *cmd], root)
                         for label, cmd in commands.items() for v, root in roots.items()}, args.runs)
        big_timed = _time({f"normalize | {v}": ([py, "-m", "goodput", "exporter", "engine", "normalize", str(big)], root)
                           for v, root in roots.items()}
                          | {"prometheus_client": ([py, "-c", PROMETHEUS_CLIENT, str(big)], REPO)}, args.big_runs)
    bare = timed.pop("python -c pass")
    startup = {"python -c pass": bare}
    for key, figures in timed.items():
        label, version = key.split(" | ")
        startup.setdefault(label, {})[version] = figures
    help_after = startup["goodput --help"]["after"]
    ours = {v: big_timed[f"normalize | {v}"] for v in ("before", "after")}
    baseline = big_timed["prometheus_client"]
    out = {
        "startup": startup,
        "help_minus_bare_s": {"best": round(help_after["best_s"] - bare["best_s"], 3),
                              "median": round(help_after["median_s"] - bare["median_s"], 3), "goal": 0.25},
        "normalize_whole_process": {
            "samples": samples, "bytes": len(text.encode()),
            "prometheus_client_parse_and_expose": baseline, "goodput_normalize": ours,
            "speedup_x_median": round(baseline["median_s"] / ours["after"]["median_s"], 1),
            "speedup_x_best": round(baseline["best_s"] / ours["after"]["best_s"], 1), "goal_x": 20,
        },
        "before": args.before,
    }
    return emit("command-line start-up (whole process, seconds)", out, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
