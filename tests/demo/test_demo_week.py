"""``goodput demo --week``: on a port in use it refuses in one line before simulating anything (before: it backfilled,
then reviewed whatever Prometheus answered there, the live demo's, wrote "No data" and exited 0); on a free port it
reviews its own Prometheus and leaves no week.om behind."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from goodput.foundation.errors import ConfigError
from goodput.review.backfill import _is_ours, serve_tsdb
from goodput.review.week import demo_week
from goodput.simulator.week import WeekSpec
from tests.conftest import REPO, free_port_block, needs
from tests.review.conftest import FLEET

pytestmark = [needs("prometheus", "promtool"), pytest.mark.timeout(600)]


@pytest.fixture
def other(tmp_path):
    """A real Prometheus of someone else's on a port: the live demo's, say."""
    served = serve_tsdb(tmp_path / "other-tsdb", free_port_block(1))
    try:
        yield served
    finally:
        served.stop()


def test_a_port_in_use_is_one_line_exit_2_before_anything_is_simulated(other, tmp_path):
    port = int(other.url.rsplit(":", 1)[1])
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "goodput", "demo", "--week", "2026-W48", "--prometheus-port",
                           str(port), "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120,
                          cwd=REPO)
    assert done.returncode == 2, (done.stdout, done.stderr)
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"goodput: error: 127.0.0.1:{port}: --prometheus-port: in use"), line
    assert not (tmp_path / "out" / "week" / "week.om").exists() and time.monotonic() - t0 < 60


def test_serving_a_week_never_takes_another_prometheus_for_its_own(other, tmp_path):
    port = int(other.url.rsplit(":", 1)[1])
    assert not _is_ours(other.url, tmp_path / "tsdb") and _is_ours(other.url, tmp_path / "other-tsdb")
    with pytest.raises(ConfigError) as e:
        serve_tsdb(tmp_path / "tsdb", port)
    assert e.value.source == f"127.0.0.1:{port}" and e.value.key == "--prometheus-port"


def test_the_week_is_reviewed_from_its_own_prometheus_and_week_om_is_deleted(tmp_path, capsys):
    (tmp_path / "fleet.yaml").write_text(FLEET)
    out = tmp_path / "week"
    spec = WeekSpec("2026-W48", step_s=300, tenants=2, weeks_before=1)
    assert demo_week(tmp_path / "fleet.yaml", "2026-W48", out, free_port_block(1), duration=0.1, spec=spec) == 0
    printed = capsys.readouterr().out
    assert f"deleted {out / 'week.om'}" in printed and not (out / "week.om").exists()
    review = json.loads((out / "review" / "review.json").read_text())
    assert review["has_data"] and sorted(review["deployments"]) == ["batch-32b-a100", "chat-8b-h100"]
    assert (out / "truth.json").is_file() and (out / "tsdb").is_dir()
