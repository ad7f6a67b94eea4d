"""The real Prometheus and Alertmanager (Debian's packages) and the triage console as child processes.

Used by ``goodput demo`` and by the live alerting and console tests. Each gets a loopback port, a temporary data
directory and our rule files; ``rules_dir`` may hold a test-only variant with scaled durations.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from goodput.console.cli import REPO, streamlit_command
from goodput.monitoring.costrules import FILE as COST_FILE
from goodput.monitoring.rulegen import RULE_FILES

__all__ = ["Process", "alertmanager_available", "prometheus_available", "start_alertmanager", "start_console",
           "start_prometheus"]

PROMETHEUS = "prometheus"
ALERTMANAGER = "prometheus-alertmanager"  # Debian's name; upstream tarballs call it alertmanager


def prometheus_available() -> bool:
    return shutil.which(PROMETHEUS) is not None


def alertmanager_available() -> bool:
    return shutil.which(ALERTMANAGER) is not None or shutil.which("alertmanager") is not None


@dataclass
class Process:
    name: str
    url: str
    proc: subprocess.Popen
    log: Path
    stopping: bool = field(default=False, compare=False)

    def died(self) -> int | None:
        """Its exit code when it has exited without being stopped (the demo says so), else None."""
        return None if self.stopping else self.proc.poll()

    def ready(self, path: str, timeout: float = 30.0) -> Process:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + path, timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} did not become ready at {self.url}{path}")

    def stop(self) -> None:
        self.stopping = True
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def start_prometheus(workdir: Path, port: int, jobs: dict[str, list[str]], rules_dir: Path,
                     alertmanager: str | None, interval: str = "15s", host: str = "127.0.0.1",
                     resend_delay: str = "1m", remote_write: list[dict] | None = None) -> Process:
    """``jobs``: job name -> host:port targets. Rule files are read from ``rules_dir``. Alerts that fired
    before Alertmanager was discovered reach it at the next resend, ``resend_delay`` later. ``remote_write``:
    Prometheus' own ``remote_write`` entries, for a long-term store that is sent every sample (docs/metrics-stores.md)."""
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        # the cost rules where they were written beside the others (the demo writes them; docs/cost.md)
        "rule_files": [str((rules_dir / f).resolve()) for f in (*RULE_FILES, COST_FILE)
                       if f in RULE_FILES or (rules_dir / f).exists()],
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]} for job, targets in jobs.items()],
    }
    if remote_write:
        cfg["remote_write"] = remote_write
    if alertmanager:
        cfg["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    log = workdir / "prometheus.log"
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'tsdb'}",
         f"--web.listen-address={host}:{port}", "--web.enable-lifecycle", f"--rules.alert.resend-delay={resend_delay}"],
        stdout=subprocess.DEVNULL, stderr=log.open("w"))
    return Process("prometheus", f"http://{host}:{port}", proc, log)


def start_alertmanager(workdir: Path, port: int, config: Path, host: str = "127.0.0.1") -> Process:
    workdir.mkdir(parents=True, exist_ok=True)
    binary = shutil.which(ALERTMANAGER) or shutil.which("alertmanager") or ALERTMANAGER
    log = workdir / "alertmanager.log"
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.path={workdir / 'data'}",
         f"--web.listen-address={host}:{port}", "--cluster.listen-address=", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=log.open("w"))
    return Process("alertmanager", f"http://{host}:{port}", proc, log)


def start_console(workdir: Path, port: int, env: dict[str, str], host: str = "127.0.0.1") -> Process:
    """``streamlit run goodput/console/app.py`` with ``env`` (GOODPUT_* variables) added to this process' environment."""
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "console.log"
    proc = subprocess.Popen(streamlit_command(host, port), env={**os.environ, **env}, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=log.open("w"))
    return Process("console", f"http://{host}:{port}", proc, log)
