"""A real VictoriaMetrics (Debian's ``victoria-metrics``, single node) for the tests that read a long-term store:
basic auth on (so every reader signs in as a user would), the ``/prometheus`` prefix its API also answers on, data
in a temporary directory. A week goes in from the real Prometheus that serves it (``copy_from``: what it answers,
through VictoriaMetrics' import API); live series come in by a real Prometheus' ``remote_write``
(``remote_write_config``)."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from goodput.demo.stack import Process
from goodput.exporters.exposition import escape
from goodput.foundation.promendpoint import Endpoint, Secret
from tests.conftest import free_port_block

__all__ = ["BINARY", "VictoriaMetrics", "copy_from", "remote_write_config", "start"]

BINARY = "victoria-metrics"
USER = "goodput"
PASSWORD = "s3cret-not-on-any-command-line"


@dataclass
class VictoriaMetrics:
    url: str  # the base URL, no prefix
    password_file: Path
    server: Process  # started, waited for and stopped as the demo's stack does its servers

    @property
    def endpoint(self) -> Endpoint:
        """Its Prometheus API as a user points goodput at it: the /prometheus prefix, basic auth from a file."""
        return Endpoint(f"{self.url}/prometheus", user=USER, secret=Secret(self.password_file, flag="test"))

    def get(self, path: str, **params: str) -> httpx.Response:
        return httpx.get(self.url + path, params=params, auth=(USER, PASSWORD), timeout=10)

    def wait_for_samples(self, n: int, at: float, timeout: float = 60.0) -> None:
        """Until every one of ``n`` samples up to ``at`` (unix s) can be read back. An import returns before its
        samples are searchable, and a query in between would answer (and cache) part of them."""
        assert self.get("/internal/force_flush").status_code == 200
        deadline = time.monotonic() + timeout
        while True:
            r = self.get("/api/v1/query", query='sum(count_over_time({__name__!=""}[3650d]))', time=f"{at:.3f}",
                         nocache="1").json()["data"]["result"]
            if r and int(float(r[0]["value"][1])) == n:
                break
            assert time.monotonic() < deadline, f"VictoriaMetrics holds {r} of {n} samples after {timeout:g} s"
            time.sleep(0.2)
        assert self.get("/internal/resetRollupResultCache").status_code == 200

    def stop(self) -> None:
        self.server.stop()


def start(workdir: Path, timeout: float = 30.0) -> VictoriaMetrics:
    """VictoriaMetrics on a free loopback port. ``-search.latencyOffset=1s``: it hides the newest 30 s of samples
    by default (still being written elsewhere), which would hold a live test half a minute for nothing."""
    workdir.mkdir(parents=True, exist_ok=True)
    secret = workdir / "password"
    secret.write_text(PASSWORD + "\n")
    secret.chmod(0o600)
    url = f"http://127.0.0.1:{free_port_block(1)}"
    log = workdir / "victoria-metrics.log"
    # the password is a flag of the server alone (it has no file option); clients read it from the file
    proc = subprocess.Popen([BINARY, f"-httpListenAddr={url.removeprefix('http://')}",
                             f"-storageDataPath={workdir / 'data'}", "-retentionPeriod=100y", "-loggerLevel=WARN",
                             "-search.latencyOffset=1s", f"-httpAuth.username={USER}", f"-httpAuth.password={PASSWORD}"],
                            stdout=subprocess.DEVNULL, stderr=log.open("w"))
    vm = VictoriaMetrics(url, secret, Process(BINARY, url, proc, log))
    try:
        vm.server.ready("/health", timeout=timeout)
    except RuntimeError:
        vm.stop()
        raise
    return vm


def copy_from(vm: VictoriaMetrics, prometheus: str, until: float, span_s: float) -> int:
    """Every sample ``prometheus`` holds in the ``span_s`` before ``until`` (unix s) into ``vm``, one metric name at
    a time (a range vector read back raw), written in the text format to VictoriaMetrics' import API; the samples
    copied. With vmctl 1.79's reader of the Prometheus blocks instead, in about a third of the runs here a series
    could not be found by its name afterwards though every sample had arrived, so the copy goes through both
    servers' APIs."""
    names = httpx.get(f"{prometheus}/api/v1/label/__name__/values", timeout=30).json()["data"]
    n = 0
    for name in names:
        got = httpx.get(f"{prometheus}/api/v1/query", params={"query": f'{{__name__="{name}"}}[{int(span_s)}s]',
                                                              "time": f"{until:.3f}"}, timeout=60).json()
        lines = []
        for series in got["data"]["result"]:
            labels = ",".join(f'{k}="{escape(v)}"' for k, v in series["metric"].items() if k != "__name__")
            lines += [f"{name}{{{labels}}} {v} {round(float(t) * 1000)}\n" for t, v in series["values"]]
        if lines:
            r = httpx.post(f"{vm.url}/api/v1/import/prometheus", content="".join(lines).encode(),
                           auth=(USER, PASSWORD), timeout=60)
            assert r.status_code == 204, r.text
            n += len(lines)
    vm.wait_for_samples(n, until)
    return n


def remote_write_config(vm: VictoriaMetrics) -> dict:
    """The ``remote_write`` entry of a Prometheus that writes to ``vm``: sent within a second (the default waits
    5 s to fill a batch), basic auth from the password file."""
    return {"url": f"{vm.url}/api/v1/write", "basic_auth": {"username": USER, "password_file": str(vm.password_file)},
            "queue_config": {"batch_send_deadline": "1s", "min_backoff": "100ms"}}
