"""Backfill a week into a Prometheus data directory with the real promtool, and serve it.

``promtool tsdb create-blocks-from openmetrics`` writes the raw series. The recording rules are then
evaluated over the range by a real Prometheus serving those blocks (one range query per rule, see
``backfill``) and written back the same way. A rule that reads another recorded series sees nothing
until that series is backfilled, so the rules run in dependency levels: each level against a
Prometheus serving the blocks of the levels before it. Alerting rules are not backfilled (``ALERTS`` has
no history, as with promtool's rule backfill): the review evaluates the alert expressions over the week
instead (``goodput.review.queries``).
"""

from __future__ import annotations

import re
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx

from goodput.foundation.errors import ConfigError
from goodput.foundation.yamlfile import load_yaml

__all__ = ["Served", "backfill", "port_free", "recording_levels", "rule_names", "serve_tsdb"]

RETENTION = "3650d"  # history is old by definition: keep whatever is backfilled


@dataclass
class Served:
    url: str
    proc: subprocess.Popen
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def port_free(host: str, port: int, flag: str = "--prometheus-port") -> None:
    """A ConfigError naming ``host:port`` and ``flag`` when something already listens there: a Prometheus started
    on it would exit, and what answers there is not the week's."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError as e:
            raise ConfigError(f"{host}:{port}", flag, f"in use ({e.strerror or e}); stop what listens there or pick "
                                                      "another port") from None


def _is_ours(url: str, data_dir: Path) -> bool:
    """Whether the Prometheus answering at ``url`` serves ``data_dir``: its ``storage.tsdb.path`` flag, which only the
    one ``serve_tsdb`` started has (any other Prometheus, the live demo's included, answers /-/ready too)."""
    try:
        flags = httpx.get(url + "/api/v1/status/flags", timeout=2).json().get("data") or {}
    except (httpx.HTTPError, ValueError, AttributeError):
        return False
    return isinstance(flags, dict) and flags.get("storage.tsdb.path") == str(data_dir)


def serve_tsdb(data_dir: Path, port: int, host: str = "127.0.0.1", timeout: float = 60.0) -> Served:
    """A Prometheus that only serves ``data_dir`` (no scrapes, no rules) until ``stop()``; ready once it answers
    as the one serving ``data_dir``. A port in use is a ConfigError naming it."""
    port_free(host, port)
    work = data_dir.parent
    cfg = work / f"{data_dir.name}.prometheus.yml"
    cfg.write_text("global: {scrape_interval: 1m}\n")
    log = work / f"{data_dir.name}.prometheus.log"
    proc = subprocess.Popen(["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={data_dir}",
                             f"--storage.tsdb.retention.time={RETENTION}", f"--web.listen-address={host}:{port}"],
                            stdout=subprocess.DEVNULL, stderr=log.open("w"))
    served = Served(f"http://{host}:{port}", proc, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = log.read_text()
            if "address already in use" in text:  # taken between the check and the start
                raise ConfigError(f"{host}:{port}", "--prometheus-port", "in use; pick another port")
            raise RuntimeError(f"prometheus exited with {proc.returncode}: {text[-1500:]}")
        try:
            if httpx.get(served.url + "/-/ready", timeout=2).status_code == 200 and _is_ours(served.url, data_dir):
                return served
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    served.stop()
    raise RuntimeError(f"prometheus did not become ready at {served.url}")


def rule_names(expr: str) -> set[str]:
    return set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))


def recording_levels(rule_files: list[Path], wanted: set[str] | None = None) -> list[list[dict]]:
    """The recording rules of ``rule_files`` grouped so each level reads only raw series and earlier levels.
    ``wanted``: series or expressions' names to keep, with every recorded series they read (default: all)."""
    rules = [r for f in rule_files for g in (load_yaml(f) or {}).get("groups", [])
             for r in g.get("rules", []) if "record" in r]
    names = {r["record"] for r in rules}
    # a rule that reads its own name reads the scraped series of that name (dcgm.rules.yaml's
    # llm_gpu_deployment_info{job!=""}: goodput's own exporter's), not itself: no dependency
    deps = {id(r): (rule_names(r["expr"]) & names) - {r["record"]} for r in rules}
    if wanted is not None:
        keep, todo = set(), set(wanted) & names
        while todo:
            n = todo.pop()
            keep.add(n)
            todo |= {d for r in rules if r["record"] == n for d in deps[id(r)]} - keep
        rules, names = [r for r in rules if r["record"] in keep], keep
    level: dict[str, int] = {}
    while len(level) < len(names):
        progressed = False
        for r in rules:
            if r["record"] in level or any(d not in level for d in deps[id(r)]):
                continue
            peers = [q for q in rules if q["record"] == r["record"]]
            if all(all(d in level for d in deps[id(q)]) for q in peers):
                level[r["record"]] = 1 + max((level[d] for q in peers for d in deps[id(q)]), default=-1)
                progressed = True
        if not progressed:
            raise ValueError(f"recording rules depend on each other in a cycle: {sorted(names - set(level))}")
    out: list[list[dict]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for r in rules:
        out[level[r["record"]]].append(r)
    return out


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed ({done.returncode}): {(done.stderr or done.stdout)[-1500:]}")


def _rules_openmetrics(url: str, rules: list[dict], start: float, end: float, step: float, path: Path) -> int:
    """Evaluate each recording rule over [start, end] with one range query; write the answers as OpenMetrics."""
    from goodput.review.prom import Query, run_queries  # the review's concurrent client

    got = run_queries(url, [Query(str(i), r["expr"], start, end, step) for i, r in enumerate(rules)])
    families: dict[str, list[str]] = {}
    for i, r in enumerate(rules):
        lines = families.setdefault(r["record"], [])
        for s in got[str(i)]:
            labels = {k: v for k, v in s.labels.items() if k != "__name__"} | dict(r.get("labels") or {})
            lab = "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(labels.items())) + "}"
            lines.extend(f"{r['record']}{lab} {v!r} {t:.0f}\n" for t, v in zip(s.times.tolist(), s.values.tolist(),
                                                                            strict=True))
    n = 0
    with open(path, "w") as fh:
        for name, lines in families.items():
            fh.write(f"# TYPE {name} gauge\n")
            fh.write("".join(lines))
            n += len(lines)
        fh.write("# EOF\n")
    return n


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def backfill(openmetrics: Path, data_dir: Path, rule_files: list[Path], start: datetime, end: datetime, port: int,
             wanted: set[str] | None = None, step_s: float = 300.0, progress=print) -> None:
    """Raw series from ``openmetrics``, then the recording rules over [start, end], into ``data_dir``: those
    ``wanted`` reads (``recording_levels``), every ``step_s`` (the review reads 5-minute steps).

    ``promtool tsdb create-blocks-from rules`` would write one block per rule and 2-hour window (thousands
    for a week, and over ten minutes here), so each rule is evaluated by the same Prometheus with one range
    query over the whole range, and its answers backfilled like the raw series."""
    data_dir.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    _blocks(openmetrics, data_dir)
    progress(f"backfilled {openmetrics.name} into {data_dir} ({time.monotonic() - t:.1f} s)")
    for i, rules in enumerate(recording_levels(rule_files, wanted)):
        t = time.monotonic()
        served = serve_tsdb(data_dir, port)
        try:
            with tempfile.TemporaryDirectory(dir=data_dir.parent) as tmp:
                om = Path(tmp) / f"rules-{i}.om"
                n = _rules_openmetrics(served.url, rules, start.timestamp() + step_s, end.timestamp(), step_s, om)
                served.stop()
                if n:
                    _blocks(om, data_dir)
        finally:
            served.stop()
        progress(f"backfilled {len(rules)} recording rules, level {i}: {n:,} samples ({time.monotonic() - t:.1f} s)")


def _blocks(openmetrics: Path, data_dir: Path) -> None:
    # one pass over the file per block: large blocks (a flag 2.42 accepts but does not list) keep it to two or three
    _run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=486h", "--quiet",
          str(openmetrics), str(data_dir)])
