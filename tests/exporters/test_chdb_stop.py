"""A request exporter storing into chDB stops clean: exit 0 and nothing on stderr. Before: chDB's shutdown, left to
the interpreter's teardown, raced its background threads after a busy flush: 'Exception in global_context->shutdown():
The ShutdownTablesThreadPool is not initialized', at times with a SIGSEGV (4 of 17 stops here; 0 of 19 after)."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx
import pytest

from tests.conftest import REPO, free_port_block, wait_answering
from tests.exporters.test_clickhouse_store import _doc, _spans

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("run", range(3))
def test_a_chdb_exporter_stops_without_a_clickhouse_exception(tmp_path, run):
    port, otlp = free_port_block(1), free_port_block(1)
    p = subprocess.Popen([sys.executable, "-m", "goodput", "exporter", "requests", "--store", f"chdb:{tmp_path / 'ch'}",
                          "--wal", str(tmp_path / "wal"), "--port", str(port), "--otlp-port", str(otlp),
                          "--flush-interval", "0.2"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_answering(f"http://127.0.0.1:{otlp}/healthz", 60)
        for seed in range(40):  # parts for chDB's background merges to be busy with at the stop
            assert httpx.post(f"http://127.0.0.1:{otlp}/v1/traces", content=_doc(_spans("acme", 200, seed)),
                              timeout=30).status_code == 200
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert (p.returncode, err) == (0, ""), err
    assert "8000 spans in the store" in out
