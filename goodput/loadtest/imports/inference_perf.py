"""inference-perf (``kubernetes-sigs/inference-perf``, 0.7) reports: the report directory or any of its lifecycle files.

A directory holds ``summary_lifecycle_metrics.json``, ``stage_N_lifecycle_metrics.json`` (one per stage),
``per_request_lifecycle_metrics.json`` (with ``report.request_lifecycle.per_request``) and the ``config.yaml`` it ran.
With the per-request file each request becomes a record (stages become steps: requests in start order, as many per
stage as its ``load_summary.count``); without it each stage file's aggregates are a step, unjudged. inference-perf's
own goodput and per-SLO attainment (``successes.goodput_metrics``) are kept beside ours as ``tool_goodput``.
Latencies are in seconds; its ``median`` is our p50.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from goodput.foundation.errors import ConfigError
from goodput.foundation.jsonfile import parse_json
from goodput.foundation.yamlfile import parse_yaml
from goodput.loadtest.imports.common import PERCENTILE_KEYS, aggregate_step, error_class, num, read_text
from goodput.loadtest.patterns import Step
from goodput.loadtest.records import RequestRecord
from goodput.loadtest.results import new_summary
from goodput.loadtest.slo import Slo
from goodput.loadtest.stats import summarize

__all__ = ["PER_REQUEST", "SUMMARY", "detect", "import_directory", "import_report", "in_directory"]

SUMMARY = "summary_lifecycle_metrics.json"
PER_REQUEST = "per_request_lifecycle_metrics.json"
CONFIG = "config.yaml"
_STAGE = re.compile(r"^stage_(\d+)_lifecycle_metrics\.json$")
# inference-perf's latency name -> ours
_LATENCIES = {"time_to_first_token": "ttft_s", "time_per_output_token": "tpot_s", "inter_token_latency": "itl_s",
              "request_latency": "e2e_s"}
# its load types -> our arrival patterns (constant spaces arrivals evenly: gamma with cv 0)
_PATTERNS = {"poisson": ("poisson", {}), "constant": ("gamma", {"cv": 0.0})}


def detect(data: object) -> str:
    if isinstance(data, dict) and isinstance(data.get("load_summary"), dict) and "successes" in data:
        return "inference-perf"
    if isinstance(data, list) and data and isinstance(data[0], dict) and {"start_time", "end_time", "info"} <= set(data[0]):
        return "inference-perf"
    return ""


def in_directory(path: Path) -> bool:
    return (path / SUMMARY).is_file() or (path / PER_REQUEST).is_file() or bool(_stage_files(path))


def _stage_files(path: Path) -> list[tuple[int, Path]]:
    return sorted((int(m.group(1)), f) for f in path.iterdir() if (m := _STAGE.match(f.name)) and f.is_file())


def _json(path: Path) -> Any:
    """The file's JSON document, its shape unchecked: a report that is not what it should be fails where it is read,
    and ``import_run`` names the file in that one line."""
    return parse_json(read_text(path), str(path))


def _config(path: Path) -> dict:
    """The ``config.yaml`` inference-perf writes beside its report ({} when absent)."""
    cfg = path / CONFIG
    data = parse_yaml(read_text(cfg), str(cfg)) if cfg.is_file() else {}
    return data if isinstance(data, dict) else {}


def _distribution(block: object) -> dict | None:
    """inference-perf's summary (seconds; ``median`` for p50) as our distribution."""
    if not isinstance(block, dict):
        return None
    get = {"p50": "median", **{p: p for p in PERCENTILE_KEYS if p != "p50"}}
    return {**{p: num(block[k]) if block.get(k) is not None else None for p, k in get.items()},
            "mean": num(block["mean"]) if block.get("mean") is not None else None, "count": None}


def _tool_goodput(report: dict) -> dict | None:
    """inference-perf's own goodput figures, kept as it wrote them — each number checked finite (``num``), so a NaN
    is a malformed report, not a value written on."""
    g = (report.get("successes") or {}).get("goodput_metrics")
    return _finite(g) if isinstance(g, dict) else None


def _finite(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return num(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _maybe(value: object) -> float | None:
    return None if value is None else num(value)


def _aggregate(report: dict, step: Step) -> dict:
    ok, failed = report.get("successes") or {}, report.get("failures") or {}
    thr = ok.get("throughput") or {}
    lat = ok.get("latency") or {}
    tool = _tool_goodput(report)
    out = aggregate_step(
        step, int(ok.get("count") or 0), int(failed.get("count") or 0),
        achieved_rate=_maybe(thr.get("requests_per_sec")), input_tokens_per_s=_maybe(thr.get("input_tokens_per_sec")),
        output_tokens_per_s=_maybe(thr.get("output_tokens_per_sec")),
        latencies={ours: _distribution(lat.get(theirs)) for theirs, ours in _LATENCIES.items()},
        tool_goodput=(tool or {}).get("request_goodput"))
    out["tool_goodput"] = tool
    return out


def _record(entry: dict, index: int, step: int, t0: float, where: str) -> tuple[RequestRecord, bool]:
    """(one request of the per-request file, whether its tokens are the server's)."""
    info = entry.get("info") or {}
    rm = info.get("response_metrics") or {}
    usage = rm.get("server_usage") or {}
    error = entry.get("error")
    err = (error_class(f"{error.get('error_type', '')} {error.get('error_msg', '')}") or "other") if error else ""
    token_times = [num(t) for t in rm.get("output_token_times") or []]
    start, end = num(entry["start_time"]), num(entry["end_time"])
    ok = not err
    # a chunk carrying several tokens gives them one time: the distinct times are the content chunks' arrivals
    chunks = sorted(set(token_times))
    server = usage.get("completion_tokens") is not None
    out = int(usage["completion_tokens"]) if server else int(rm.get("output_tokens") or 0)
    prompt = usage.get("prompt_tokens")
    if prompt is None:
        prompt = ((info.get("request_metrics") or {}).get("text") or {}).get("input_tokens", info.get("input_tokens"))
    try:
        return RequestRecord(
            index=index, step=step, scheduled_s=start - t0, sent_s=start - t0,  # 0.7 writes no schedule: lag 0
            first_token_s=token_times[0] - t0 if ok and token_times else None,
            done_s=end - t0 if ok else None,
            itl_s=[b - a for a, b in zip(chunks, chunks[1:], strict=False)] if ok else [],
            input_tokens=int(prompt or 0), output_tokens=out, status=200 if ok else 0, error=err,
            tenant="", tier="", route="", trace_id="",
        ), server
    except (TypeError, ValueError) as e:
        raise ConfigError(where, f"request {index}", f"bad per-request value: {e}") from None


def _arrival(config: dict, rates: list[float | None]) -> dict:
    kind = str((config.get("load") or {}).get("type") or "")
    pattern, extra = _PATTERNS.get(kind, (kind, {}))
    rate = {"rate": rates[0]} if len(rates) == 1 else {"rates": rates}
    return {"pattern": pattern, **extra, **rate, **({"tool_pattern": kind} if kind else {})}


def _stage_rates(config: dict, stages: list[dict], n: int) -> list[float | None]:
    """The offered rate of each of ``n`` steps: its stage file's ``requested_rate``, else config's stage ``rate``."""
    cfg = (config.get("load") or {}).get("stages") or []
    out = []
    for i in range(n):
        r = ((stages[i] if i < len(stages) else {}).get("load_summary") or {}).get("requested_rate")
        if r is None and i < len(cfg) and isinstance(cfg[i], dict):
            r = cfg[i].get("rate")
        out.append(None if r is None else num(r))
    return out


def _per_request(entries: list, stages: list[dict], rates: list, where: str) -> tuple[list[RequestRecord], list[Step], bool]:
    entries = sorted(entries, key=lambda e: num(e["start_time"]))
    counts = [int((s.get("load_summary") or {}).get("count") or 0) for s in stages]
    if sum(counts) != len(entries):
        counts = [len(entries)]  # no stage files (or they disagree): one step
    t0 = num(entries[0]["start_time"]) if entries else 0.0
    records: list[RequestRecord] = []
    steps: list[Step] = []
    server, first = True, 0
    for i, count in enumerate(counts):
        mine = entries[first:first + count]
        first += count
        for e in mine:
            r, s = _record(e, len(records), i, t0, where)
            records.append(r)
            server = server and s
        if not mine:
            continue
        start = num(mine[0]["start_time"]) - t0
        end = max(num(e["end_time"]) for e in mine) - t0
        rate = rates[i] if i < len(rates) else None
        steps.append(Step(i, f"stage {i}" + (f" rate={rate:g}" if rate is not None else ""), start, max(end, start + 1e-9),
                          0.0, rate, None, None))
    return records, steps, server


def _import(directory: Path, given: Path | None, given_data: object, slo: Slo,
            alone: str = "") -> tuple[dict, list | None]:
    """The report in ``directory``; ``given`` (a file of it the user named, already parsed) stands in for itself, or
    with ``alone`` is the only file read, in that role."""
    def load(path: Path) -> Any:
        return given_data if given is not None and path == given else _json(path)

    config = _config(directory)
    if alone:
        stages, per_request, summary_file = [], given if alone == PER_REQUEST else None, given if alone == SUMMARY else None
    else:
        stages = [load(f) for _, f in _stage_files(directory)]
        per_request, summary_file = directory / PER_REQUEST, directory / SUMMARY
    whole = load(summary_file) if summary_file is not None and summary_file.is_file() else {}
    summary = new_summary("inference-perf")
    if per_request is not None and per_request.is_file():
        entries = load(per_request)
        if not isinstance(entries, list) or not entries:
            raise ConfigError(str(per_request), "requests", "no requests in the per-request file")
        rates = _stage_rates(config, stages, max(1, len(stages)))
        records, steps, server = _per_request(entries, stages, rates, str(per_request))
        summary["steps"] = summarize(records, slo, steps)
        for s, report in zip(summary["steps"], stages or [whole], strict=False):
            s["tool_goodput"] = _tool_goodput(report) if isinstance(report, dict) else None
            s["tool_goodput_requests_per_s"] = (s["tool_goodput"] or {}).get("request_goodput")
    else:
        lifecycle = (config.get("report") or {}).get("request_lifecycle") or {}
        records, server = None, bool(lifecycle.get("use_server_output_tokens"))
        reports = stages or [whole]
        rates = _stage_rates(config, stages, len(reports))
        start, step_dicts = 0.0, []
        for i, report in enumerate(reports):
            duration = num(report.get("benchmark_time_seconds") or (report.get("load_summary") or {}).get("send_duration") or 0)
            rate = rates[i]
            step_dicts.append(_aggregate(report, Step(i, f"stage {i}" + (f" rate={rate:g}" if rate is not None else ""),
                                                      start, start + duration, 0.0, rate, None, None)))
            start += duration
        summary["steps"] = step_dicts
        summary["invalid_reasons"].append(f"no per-request data (no {PER_REQUEST}: run inference-perf with "
                                          "report.request_lifecycle.per_request): SLO goodput not computed")
    comp = summary["comparability"]
    comp.update({"model": str((config.get("server") or {}).get("model_name") or ""), "slo": str(slo),
                 "arrival": _arrival(config, [s["offered_rate"] for s in summary["steps"]])})
    summary["slo"] = slo.to_dict()
    summary["tool_goodput"] = _tool_goodput(whole) if isinstance(whole, dict) else None
    summary["source"] = {"token_counts": "server" if server else "client"}
    return summary, records


def import_directory(path: Path, slo: Slo) -> tuple[dict, list | None]:
    return _import(path, None, None, slo)


def import_report(path: Path, data: object, slo: Slo) -> tuple[dict, list | None]:
    """One lifecycle file the user named: the whole report in its directory when it has its usual name (the
    per-request file then wins, whichever file was named), else this file alone (a per-request list, or the
    summary of one stage)."""
    if path.name in (SUMMARY, PER_REQUEST) or _STAGE.match(path.name):
        return _import(path.parent, path, data, slo)
    return _import(path.parent, path, data, slo, alone=PER_REQUEST if isinstance(data, list) else SUMMARY)
