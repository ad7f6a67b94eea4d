"""``goodput exporter engine normalize DUMP`` on a dump over the per-target series cap: one line naming the dump and
the cap, exit 2 (before: a ``TooManySeries`` traceback)."""

from __future__ import annotations

import subprocess
import sys

from goodput.exporters.normalize import MAX_SERIES_PER_TARGET
from tests.conftest import REPO


def test_a_dump_over_the_series_cap_is_one_line_exit_2(tmp_path):
    dump = tmp_path / "metrics.txt"
    dump.write_text("# TYPE vllm:num_requests_running gauge\n" + "".join(
        f'vllm:num_requests_running{{model_name="m{i}"}} 1\n' for i in range(MAX_SERIES_PER_TARGET + 1)))
    done = subprocess.run([sys.executable, "-m", "goodput", "exporter", "engine", "normalize", str(dump)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"goodput: error: {dump}: more than {MAX_SERIES_PER_TARGET} series"), line


def test_a_dump_at_the_cap_is_normalized(tmp_path):
    dump = tmp_path / "metrics.txt"
    dump.write_text("# TYPE vllm:num_requests_running gauge\n" + "".join(
        f'vllm:num_requests_running{{model_name="m{i}"}} 1\n' for i in range(MAX_SERIES_PER_TARGET // 2)))
    done = subprocess.run([sys.executable, "-m", "goodput", "exporter", "engine", "normalize", str(dump)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("llm_requests_running{") == MAX_SERIES_PER_TARGET // 2
