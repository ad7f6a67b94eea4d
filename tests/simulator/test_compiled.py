"""The compiled simulator is the same program as its Python source: the same requests, bit for bit.

The source is copied without its builds and run in a child process, so the comparison is between
the two ways this checkout can run, on the example fleet (releases, a lost and an added replica,
three routers' worth of deployments) and on a small pool that preempts, times out and hits the
prefix cache, with and without a gateway in front of it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pandas as pd
import pytest
import yaml

from goodput.simulator.compiled import COMPILED_MODULES, build_status, source_copy
from tests.conftest import fleet_data, stress_pool

ROOT = Path(__file__).resolve().parents[2]

RUN = """
import sys
from goodput.cli import main
import goodput.simulator.compiled
print(goodput.simulator.__file__, sorted(set(goodput.simulator.compiled.build_status().values())))
sys.exit(main(["simulate", sys.argv[1], "--duration", sys.argv[2], "--out", sys.argv[3], "--format", "json"]))
"""


def _simulate(fleet: Path, duration: float, out: Path, pythonpath: Path | None = None) -> tuple[pd.DataFrame, str, dict]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = f"{pythonpath}{os.pathsep}{env.get('PYTHONPATH', '')}"
    proc = subprocess.run([sys.executable, "-c", RUN, str(fleet), str(duration), str(out)], env=env, cwd=out.parent,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    where, summary = proc.stdout.split("\n", 1)
    return pd.read_parquet(out / "requests.parquet"), where, json.loads(summary)


# the stress pool behind a gateway: tenant TPM quotas, few slots, a short P0 wait, a P2 batch deferred behind P0
GATEWAY = {"max_in_flight_per_replica": 8, "tiers": {"P0": {"max_wait_s": 1}, "P2": {"max_share": 0.25}},
           "default_tenant": {"tpm": 600_000, "burst_s": 10}, "tenants": {"acme": {"weight": 2}}}


def _gateway_pool() -> dict:
    pool = stress_pool(router="kv-aware")
    batch = dict(pool["workloads"][0], name="batch", tier="P2", shared_prefix_tokens=0,
                 arrival={"process": "batch", "batches": [{"at": 20, "count": 300}]})
    return dict(pool, workloads=[*pool["workloads"], batch], gateway=GATEWAY)


@pytest.mark.parametrize("fleet, duration", [("example", 1800), ("stress", 200), ("gateway", 120)])
def test_compiled_and_pure_python_runs_are_identical(tmp_path, fleet, duration):
    if set(build_status().values()) != {"compiled"}:
        # make installs a C toolchain, so in CI a missing build is a broken install, not a choice
        assert not os.environ.get("CI"), f"CI runs the compiled simulator, but: {build_status()}"
        pytest.skip(f"the simulator is not compiled in this checkout: {build_status()}")
    if fleet == "example":
        path = ROOT / "examples" / "fleet.yaml"
    else:
        path = tmp_path / f"{fleet}.yaml"
        path.write_text(yaml.safe_dump(fleet_data(**(stress_pool(router="kv-aware") if fleet == "stress"
                                                     else _gateway_pool()))))
    source = source_copy(tmp_path / "source")

    compiled, where_c, summary_c = _simulate(path, duration, tmp_path / "compiled")
    pure, where_p, summary_p = _simulate(path, duration, tmp_path / "pure", pythonpath=source)

    assert where_c.startswith(str(ROOT)) and where_c.endswith("['compiled']") and summary_c["engine"] == "compiled"
    assert where_p.startswith(str(source)) and where_p.endswith("['python']") and summary_p["engine"] == "python"
    assert len(compiled) > 1000
    if fleet == "stress":  # the paths that matter most are exercised
        assert compiled["preemptions"].sum() > 0 and (compiled["cached_tokens"] > 0).any()
        assert (compiled["finish_reason"] == "timeout").any()
    if fleet == "gateway":
        assert {"tpm_limit", "queue_timeout"} <= set(compiled["reject_reason"].dropna())
    pd.testing.assert_frame_equal(compiled, pure, check_exact=True)


def _goodput(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    """``goodput ARGS`` run from the package copied into ``checkout``."""
    code = "import sys; from goodput.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], env={**os.environ, "PYTHONPATH": str(checkout)},
                          cwd=checkout, capture_output=True, text=True, timeout=180)


def test_an_edited_module_refuses_its_old_build_and_only_what_simulates_stops(tmp_path):
    """Python prefers a build to its source: a stale one would run yesterday's code without a word. So the import of
    that module fails, in one line saying how to rebuild; a command that never simulates (the analyzer's) answers."""
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "goodput", checkout / "goodput", ignore=shutil.ignore_patterns("__pycache__"))
    fleet = checkout / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(fleet_data(**stress_pool())))
    assert _goodput(checkout, "simulate", str(fleet), "--duration", "120", "--out", "run").returncode == 0
    assert _goodput(checkout, "analyze", "ingest", "run", "--db", "run.duckdb").returncode == 0

    sim = checkout / "goodput" / "simulator"
    module = "fleet"  # every simulation runs it
    assert f"goodput.simulator.{module}" in COMPILED_MODULES
    if not list(sim.glob(f"{module}.*.so")):  # no compiler here: an empty file stands for the build
        (sim / f"{module}{EXTENSION_SUFFIXES[0]}").write_bytes(b"")  # never loaded: the check comes first
    later = time.time() + 60
    os.utime(sim / f"{module}.py", (later, later))

    stale = _goodput(checkout, "simulate", str(fleet), "--duration", "120", "--out", "again")
    assert stale.returncode == 1, stale.stderr
    assert stale.stderr.strip().splitlines() == [
        f"goodput: error: goodput.simulator.{module}: source changed after it was compiled; rebuild with `make build` "
        "(or `pip install -e .`), or delete the stale .so"], stale.stderr
    answers = _goodput(checkout, "analyze", "regressions", "--db", "run.duckdb", "--releases", "run/releases.yaml")
    assert answers.returncode == 0 and "Traceback" not in answers.stderr, answers.stderr
    memory = _goodput(checkout, "plan", "memory", "--model", "Llama-3.1-8B", "--gpu", "H100-80GB-SXM")
    assert memory.returncode == 0, memory.stderr  # the memory budget is the simulator's, and never compiled
