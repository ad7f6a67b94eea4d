"""Import other tools' load-test results into a goodput run directory, converted to goodput's definitions.

Read: a GuideLLM JSON report (``GenerativeBenchmarksReport``, report schema version 2, GuideLLM 0.8.x), a
vLLM ``bench serve --save-result`` JSON (``vllm/benchmarks/serve.py``), and AIPerf's exports: its per-request
``profile_export.jsonl`` and its aggregate ``profile_export_aiperf.json`` / ``.csv``. Where the file carries per-request data
(GuideLLM's request samples; vLLM's ``--save-detailed`` arrays; AIPerf's JSONL) each request becomes a ``RequestRecord`` and the
steps are summarized by ``stats.summarize`` exactly like a goodput run, so SLO goodput is computed for the
``--slo`` given here. Without per-request data only the tool's own aggregates are carried over and the SLO
figures are None. ``docs/loadtest.md`` ("Importing other tools' runs") lists each conversion.
"""

from __future__ import annotations

import math
import re
from http import HTTPStatus
from pathlib import Path

from capacity.loadtest.patterns import Step
from capacity.loadtest.records import RequestRecord
from capacity.loadtest.report import write_report
from capacity.loadtest.results import new_summary, records_table, write_run
from capacity.loadtest.slo import Slo
from capacity.loadtest.stats import knee, length_stats, summarize
from goodput.foundation.errors import ConfigError
from goodput.foundation.jsonfile import parse_json
from goodput.foundation.yamlfile import decode, read_bytes

__all__ = ["MAX_IMPORT_BYTES", "detect", "error_class", "import_run"]

MAX_IMPORT_BYTES = 512 * 1024 * 1024  # checked before reading: a larger "report" is not one
_RATE_KEYS = ("achieved_rate", "input_tokens_per_s", "output_tokens_per_s", "goodput_requests_per_s", "goodput_tokens_per_s")


_REASONS = {s.phrase.lower(): s.value for s in HTTPStatus}


def _http_class(code: int) -> str:
    return "http_429" if code == 429 else ("http_5xx" if code >= 500 else "http_4xx")


def error_class(text: str | None) -> str:
    """goodput's error class for another tool's free-text error ("" when there is none; "other" when unrecognised).

    vLLM bench stores the HTTP reason phrase (``Too Many Requests``) or a Python traceback; GuideLLM an
    exception message that usually names the status code.
    """
    if not text:
        return ""
    low = text.strip().lower()
    code = _REASONS.get(low)
    if code is not None and code >= 400:
        return _http_class(code)
    m = re.search(r"\b([45]\d\d)\b", low)
    if m:
        return _http_class(int(m.group(1)))
    if "timeout" in low or "timed out" in low:
        return "timeout"
    if "disconnect" in low or "reset by peer" in low or "payload" in low or "closed" in low:
        return "disconnect"
    if "connect" in low or "refused" in low:
        return "connect"
    if "cancel" in low:
        return "aborted"
    return "other"


def detect(data: object) -> str:
    """``guidellm``, ``vllm-bench`` or ``aiperf`` from the document's shape; ``""`` when it is none of them."""
    if isinstance(data, dict) and isinstance(data.get("metadata"), dict) and "metrics" in data:
        return "aiperf"  # one line of profile_export.jsonl
    if isinstance(data, dict) and isinstance(data.get("request_throughput"), dict):
        return "aiperf"  # profile_export_aiperf.json: every metric a {unit, avg, ...} block
    if isinstance(data, dict):
        if isinstance(data.get("benchmarks"), list) and isinstance(data.get("metadata"), dict):
            return "guidellm"
        if "duration" in data and "completed" in data and "request_throughput" in data:
            return "vllm-bench"
    return ""


def _num(value: object) -> float:
    """A number the tools wrote (int, float or numeric string); NaN, an infinity or anything else is a ValueError,
    which the importer reports as a malformed file instead of writing it on."""
    x = float(value)  # type: ignore[arg-type]
    if not math.isfinite(x):
        raise ValueError(f"{value!r} is not a finite number")
    return x


def _load(path: Path) -> object:
    """The file's JSON (a list for JSON lines), or for AIPerf's CSV export the ``(metric, row)`` pairs of its
    sections (rows as ``{column: text}``)."""
    if not path.is_file():
        raise ConfigError(str(path), "path", "file not found")
    text = decode(read_bytes(path, MAX_IMPORT_BYTES), str(path))
    if text.startswith("Metric,"):
        return _aiperf_csv(text)
    try:
        return parse_json(text, str(path), MAX_IMPORT_BYTES)
    except ConfigError as e:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) < 2 or not e.problem.startswith("not valid JSON"):
            raise
    out = []  # vLLM's --append-result: one JSON result per line
    for n, line in enumerate(lines, start=1):
        try:
            out.append(parse_json(line, str(path), MAX_IMPORT_BYTES))
        except ConfigError as e:
            raise ConfigError(str(path), f"line {n}", e.problem) from None
    return out


def _stats_ms(stats: dict, metric: str) -> dict:
    """vLLM's ``mean_/median_/pNN_{metric}_ms`` aggregates as our distribution dict in seconds (None where absent)."""
    def s(key: str) -> float | None:
        v = stats.get(key)
        return None if v is None else _num(v) / 1000.0
    return {
        "p50": s(f"median_{metric}_ms"), "p90": s(f"p90_{metric}_ms"), "p95": s(f"p95_{metric}_ms"),
        "p99": s(f"p99_{metric}_ms"), "mean": s(f"mean_{metric}_ms"), "count": None,
    }


# ---- vLLM bench serve ----

def _vllm_records(data: dict, where: str, step: int, offset_s: float, first_index: int) -> list[RequestRecord] | None:
    """Per-request records from ``--save-detailed`` arrays, on a clock starting at ``offset_s``; None without them."""
    keys = ("start_times", "ttfts", "itls", "latencies", "input_lens", "output_lens", "errors")
    if not all(isinstance(data.get(k), list) for k in keys):
        return None
    n = len(data["start_times"])
    bad = [k for k in keys if len(data[k]) != n]
    if bad:
        raise ConfigError(where, bad[0], f"has {len(data[bad[0]])} entries, start_times has {n}")
    queue = data.get("queue_times")
    if not isinstance(queue, list) or len(queue) != n:
        queue = [0.0] * n
    t0 = min(data["start_times"], default=0.0)
    out = []
    for i in range(n):
        try:
            sent = _num(data["start_times"][i]) - t0 + offset_s
            err = error_class(data["errors"][i])
            ok = not err
            out.append(RequestRecord(
                index=first_index + i, step=step, scheduled_s=sent - _num(queue[i] or 0.0), sent_s=sent,
                first_token_s=sent + _num(data["ttfts"][i]) if ok else None,
                done_s=sent + _num(data["latencies"][i]) if ok else None,
                itl_s=[_num(g) for g in (data["itls"][i] or [])] if ok else [],
                input_tokens=int(data["input_lens"][i]), output_tokens=int(data["output_lens"][i]),
                status=200 if ok else 0, error=err, tenant="", tier="", route="", trace_id="",
            ))
        except (TypeError, ValueError) as e:
            raise ConfigError(where, f"request {i}", f"bad per-request value: {e}") from None
    return out


def _vllm_aggregate_step(data: dict, step: Step) -> dict:
    """A step from vLLM's own aggregates only (no per-request data): latencies and rates, SLO figures None."""
    completed = int(data.get("completed") or 0)
    failed = int(data.get("failed") or 0)
    duration = step.end_s - step.start_s
    return {
        "index": step.index, "label": step.label, "offered_rate": step.offered_rate, "concurrency": step.concurrency,
        "start_s": step.start_s, "end_s": step.end_s, "settle_s": 0.0, "measured_s": duration,
        "requests": completed + failed, "completed": completed,
        "achieved_rate": _num(data.get("request_throughput") or 0.0),
        "input_tokens_per_s": _num(data.get("total_input_tokens") or 0) / duration if duration > 0 else 0.0,
        "output_tokens_per_s": _num(data.get("output_throughput") or 0.0),
        "ttft_s": _stats_ms(data, "ttft"), "tpot_s": _stats_ms(data, "tpot"),
        "itl_s": _stats_ms(data, "itl"), "e2e_s": _stats_ms(data, "e2el"),
        "errors": {"other": failed} if failed else {},
        "error_rate": failed / (completed + failed) if completed + failed else 0.0,
        "slo_attainment": None, "slo_terms": [], "slo_met": None,
        "goodput_requests_per_s": None, "goodput_tokens_per_s": None,
        "tool_goodput_requests_per_s": data.get("request_goodput"),
        "per_tier": {}, "server": {},
    }


def _import_vllm(results: list[dict], where: str, slo: Slo) -> tuple[dict, list[RequestRecord] | None]:
    """One step per result (``--append-result`` puts one per line), laid end to end on one clock."""
    summary = new_summary("vllm-bench")
    steps, records, offset, rates, cvs, concs = [], [], 0.0, [], set(), []
    detailed = True
    for i, data in enumerate(results):
        here = f"{where}: result {i + 1}" if len(results) > 1 else where
        try:
            duration = _num(data["duration"])
            rate = data.get("request_rate")
            rate = None if rate in (None, "inf") or rate == math.inf else _num(rate)
            burstiness = _num(data.get("burstiness") or 1.0)
            if burstiness <= 0:
                raise ValueError(f"burstiness {burstiness:g} is not positive")
        except (TypeError, ValueError) as e:
            raise ConfigError(here, "duration|request_rate|burstiness", f"not a number: {e}") from None
        conc = data.get("max_concurrency")
        rates.append(rate)
        concs.append(conc)
        cvs.add(burstiness ** -0.5)
        label = f"rate={rate:g}" if rate is not None else (f"concurrency={conc}" if conc else "rate=inf")
        step = Step(i, label, offset, offset + duration, 0.0, rate, conc, None)
        mine = _vllm_records(data, here, i, offset, len(records))
        if mine is None:
            detailed = False
            steps.append(_vllm_aggregate_step(data, step))
        else:
            records.extend(mine)
            steps.append(summarize(mine, slo, [step])[0])
        offset += duration
        if not summary["comparability"]["model"]:
            summary["comparability"]["model"] = str(data.get("model_id") or "")
    comp = summary["comparability"]
    cv = cvs.pop() if len(cvs) == 1 else None  # vLLM's burstiness γ: Gamma gaps with cv 1/√γ (γ = 1: Poisson)
    comp["arrival"] = {"pattern": "poisson" if cv == 1.0 else "gamma", "cv": cv,
                       **({"rate": rates[0]} if len(rates) == 1 else {"rates": rates})}
    comp["concurrency_steps"] = [c for c in concs if c]
    comp["slo"] = str(slo)
    summary["slo"] = slo.to_dict()
    summary["steps"] = steps
    if not detailed:
        summary["invalid_reasons"].append("no per-request data (saved without --save-detailed): SLO goodput not computed")
    return summary, records or None


# ---- AIPerf ----

_AIPERF_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}
# AIPerf's aggregate metric (tag, CSV label) -> our distribution; its inter_token_latency is our TPOT
_AIPERF_DISTRIBUTIONS = {"time_to_first_token": ("Time to First Token", "ttft_s"),
                         "inter_token_latency": ("Inter Token Latency", "tpot_s"),
                         "inter_chunk_latency": ("Inter Chunk Latency", "itl_s"),
                         "request_latency": ("Request Latency", "e2e_s")}
_AIPERF_SCALARS = {"benchmark_duration": "Benchmark Duration", "request_throughput": "Request Throughput",
                   "request_count": "Request Count", "error_request_count": "Error Request Count",
                   "output_token_throughput": "Output Token Throughput", "goodput": "Goodput"}


class _AiperfCsv(list):
    """The rows of AIPerf's ``profile_export_aiperf.csv``, a list of ``{column: text}`` with ``Metric`` in each."""


def _aiperf_csv(text: str) -> _AiperfCsv:
    """AIPerf's CSV sections (blank-line separated, each with its own header row) as one list of rows."""
    import csv
    import io

    rows, header = _AiperfCsv(), None
    for line in csv.reader(io.StringIO(text)):
        if not line:
            header = None
        elif header is None:
            header = line
        else:
            rows.append(dict(zip(header, line, strict=False)))
    return rows


def _seconds(block: object, where: str, name: str) -> float | None:
    """A ``{"value": V, "unit": U}`` (or an aggregate's ``avg``) in seconds; None when absent."""
    if not isinstance(block, dict):
        return None
    unit = block.get("unit", "ms")
    if unit not in _AIPERF_UNITS:
        raise ConfigError(where, name, f"unit {unit!r} is not a time unit ({', '.join(_AIPERF_UNITS)})")
    return _num(block["value"]) * _AIPERF_UNITS[unit]


def _aiperf_record(line: dict, index: int, t0: int, where: str) -> RequestRecord:
    meta, metrics, error = line["metadata"], line.get("metrics") or {}, line.get("error")
    start, end = int(meta["request_start_ns"]), meta.get("request_end_ns")
    sent = (start - t0) / 1e9
    if meta.get("was_cancelled"):
        err = "aborted"  # --request-cancellation-rate: the client dropped it, as our abort_rate does
    elif error:
        code = error.get("code")
        err = _http_class(int(code)) if isinstance(code, int) and code >= 400 else (
            error_class(f"{error.get('type', '')} {error.get('message', '')}") or "other")
    else:
        err = ""
    ttft = _seconds(metrics.get("time_to_first_token"), where, "time_to_first_token")
    ok = not err and end is not None
    gaps = (metrics.get("inter_chunk_latency") or {})
    scale = _AIPERF_UNITS.get(gaps.get("unit", "ms"), 1e-3)
    tokens = metrics.get("output_sequence_length") or metrics.get("output_token_count") or {}
    isl = metrics.get("input_sequence_length") or metrics.get("error_isl") or {}
    return RequestRecord(
        index=index, step=0, scheduled_s=sent, sent_s=sent,  # AIPerf records no schedule: lag unknown, taken as 0
        first_token_s=sent + ttft if ok and ttft is not None else None,
        done_s=(int(end) - t0) / 1e9 if ok else None,
        itl_s=[_num(g) * scale for g in gaps.get("value") or []] if ok else [],
        input_tokens=int(isl.get("value") or 0), output_tokens=int(tokens.get("value") or 0),
        status=200 if ok else (int(error["code"]) if error and isinstance(error.get("code"), int) else 0),
        error=err, tenant="", tier="", route="", trace_id="",
    )


def _import_aiperf_records(lines: list[dict], where: str, slo: Slo) -> tuple[dict, list[RequestRecord]]:
    """profile_export.jsonl: one step over AIPerf's benchmark duration (first request start to last response)."""
    lines = [x for x in lines if (x.get("metadata") or {}).get("benchmark_phase", "profiling") == "profiling"]
    if not lines:
        raise ConfigError(where, "metadata.benchmark_phase", "no profiling-phase records")
    t0 = min(int(x["metadata"]["request_start_ns"]) for x in lines)
    records = [_aiperf_record(x, i, t0, f"{where}: line {i + 1}") for i, x in enumerate(lines)]
    end = max((int(x["metadata"].get("request_end_ns") or 0) - t0) / 1e9 for x in lines)
    summary = new_summary("aiperf")
    summary["comparability"].update({"arrival": {"pattern": "aiperf"}, "slo": str(slo)})
    summary["slo"] = slo.to_dict()
    summary["steps"] = summarize(records, slo, [Step(0, "aiperf", 0.0, max(end, 1e-9), 0.0, None, None, None)])
    return summary, records


def _aiperf_aggregates(data: object, where: str) -> tuple[dict, dict]:
    """(our distribution dicts by key, AIPerf's scalars by tag) from profile_export_aiperf.json or its CSV."""
    dists, scalars = {}, {}
    if isinstance(data, _AiperfCsv):
        by_label = {}
        for row in data:
            label, _, unit = row.get("Metric", "").partition(" (")
            by_label[label] = (row, unit.rstrip(")"))
        for label, key in _AIPERF_DISTRIBUTIONS.values():
            if label in by_label:
                row, unit = by_label[label]
                dists[key] = {"unit": unit, **{k: _num(v) for k, v in row.items() if k != "Metric" and v}}
        for tag, label in _AIPERF_SCALARS.items():
            if label in by_label and by_label[label][0].get("Value"):
                scalars[tag] = _num(by_label[label][0]["Value"])
    else:
        for tag, (_, key) in _AIPERF_DISTRIBUTIONS.items():
            if isinstance(data.get(tag), dict):
                dists[key] = data[tag]
        scalars = {tag: _num(data[tag]["avg"]) for tag in _AIPERF_SCALARS if isinstance(data.get(tag), dict)}
    out = {}
    for key, block in dists.items():
        unit = block.get("unit", "ms")
        if unit not in _AIPERF_UNITS:
            raise ConfigError(where, key, f"unit {unit!r} is not a time unit")
        scale = _AIPERF_UNITS[unit]
        out[key] = {**{f"p{p}": (_num(block[f"p{p}"]) * scale if block.get(f"p{p}") is not None else None)
                       for p in (50, 90, 95, 99)},
                    "mean": _num(block["avg"]) * scale if block.get("avg") is not None else None,
                    "count": int(block["count"]) if block.get("count") is not None else None}
    return out, scalars


def _import_aiperf_aggregate(data: object, where: str, slo: Slo) -> dict:
    """profile_export_aiperf.json or .csv: AIPerf's own aggregates, one step; SLO figures None (no requests)."""
    dists, sc = _aiperf_aggregates(data, where)
    if "benchmark_duration" not in sc:
        raise ConfigError(where, "benchmark_duration", "missing: not an AIPerf profile export")
    duration = sc["benchmark_duration"]
    loadgen = ((data.get("input_config") or {}).get("loadgen") or {}) if isinstance(data, dict) else {}
    rate, conc = loadgen.get("request_rate"), loadgen.get("concurrency")
    completed, failed = int(sc.get("request_count", 0)), int(sc.get("error_request_count", 0))
    empty = {**{f"p{p}": None for p in (50, 90, 95, 99)}, "mean": None, "count": None}
    label = f"rate={rate:g}" if rate is not None else (f"concurrency={conc}" if conc else "aiperf")
    step = {
        "index": 0, "label": label, "offered_rate": rate, "concurrency": conc, "start_s": 0.0, "end_s": duration,
        "settle_s": 0.0, "measured_s": duration, "requests": completed + failed, "completed": completed,
        "achieved_rate": sc.get("request_throughput", completed / duration if duration > 0 else 0.0),
        "input_tokens_per_s": None, "output_tokens_per_s": sc.get("output_token_throughput"),
        **{k: dists.get(k, empty) for k in ("ttft_s", "tpot_s", "itl_s", "e2e_s")},
        "errors": {"other": failed} if failed else {},
        "error_rate": failed / (completed + failed) if completed + failed else 0.0,
        "slo_attainment": None, "slo_terms": [], "slo_met": None,
        "goodput_requests_per_s": None, "goodput_tokens_per_s": None,
        "tool_goodput_requests_per_s": sc.get("goodput"), "per_tier": {}, "server": {},
    }
    summary = new_summary("aiperf")
    comp = summary["comparability"]
    models = ((data.get("input_config") or {}).get("endpoint") or {}).get("model_names") if isinstance(data, dict) else None
    comp.update({"model": str(models[0]) if models else "", "slo": str(slo),
                 "arrival": {"pattern": loadgen.get("request_rate_mode", "aiperf"),
                             **({"rate": rate} if rate is not None else {})},
                 "concurrency_steps": [conc] if conc else [],
                 "tool_version": str(data.get("aiperf_version", "")) if isinstance(data, dict) else ""})
    summary["slo"] = slo.to_dict()
    summary["steps"] = [step]
    summary["invalid_reasons"].append("no per-request data (AIPerf's aggregate export; import its profile_export.jsonl "
                                      "for SLO goodput)")
    return summary


# ---- GuideLLM ----

_OFF_CLOCK_S = 86400.0  # a GuideLLM time more than a day before the report's first window is not a unix time

def _guidellm_record(req: dict, index: int, step: int, t0: float, where: str) -> RequestRecord:
    info = req.get("info") or {}
    t = info.get("timings") or {}
    start = t.get("request_start") if t.get("request_start") is not None else t.get("resolve_start")
    if start is None:
        raise ConfigError(where, f"request {req.get('request_id', index)}", "has no request_start timing")
    first = t.get("first_output_token_iteration")
    if first is None:
        first = t.get("first_token_iteration")
    end = t.get("request_end") if t.get("request_end") is not None else t.get("resolve_end")
    err = error_class(info.get("error")) if info.get("status") == "errored" or info.get("error") else ""
    if info.get("status") == "errored" and not err:
        err = "other"
    out_tokens = int(req.get("output_tokens") or 0)
    ok = not err and end is not None
    # GuideLLM keeps no per-gap times: the request's gaps are taken as equal, (last token - first token) / (n - 1).
    last = t.get("last_token_iteration")
    gaps = []
    if ok and first is not None and last is not None and out_tokens > 1:
        gaps = [(_num(last) - _num(first)) / (out_tokens - 1)] * (out_tokens - 1)
    targeted = t.get("targeted_start")
    if targeted is not None and _num(targeted) < t0 - _OFF_CLOCK_S:
        targeted = None  # GuideLLM 0.8.1 writes a relative time for some Poisson requests: not on the report's clock
    return RequestRecord(
        index=index, step=step, scheduled_s=_num(targeted if targeted is not None else start) - t0, sent_s=_num(start) - t0,
        first_token_s=_num(first) - t0 if ok and first is not None else None,
        done_s=_num(end) - t0 if ok else None, itl_s=gaps,
        input_tokens=int(req.get("prompt_tokens") or 0), output_tokens=out_tokens,
        status=200 if ok else 0, error=err, tenant="", tier="", route="", trace_id="",
    )


# GuideLLM's strategy -> our arrival pattern: "constant" spaces arrivals evenly (gamma gaps with cv 0, as vLLM's
# burstiness → ∞); "concurrent" and "synchronous" (one stream) keep N requests in flight, our closed loop
_GUIDELLM_PATTERNS = {"constant": ("gamma", {"cv": 0.0}), "poisson": ("poisson", {}),
                      "concurrent": ("concurrency", {}), "synchronous": ("concurrency", {})}


def _guidellm_arrival(kinds: set[str], rates: list[float | None]) -> dict:
    """The comparability ``arrival`` in our pattern names (GuideLLM's own kept as ``tool_pattern``), so that
    ``compare`` finds a goodput run of the same arrivals comparable; a mix of strategies (a sweep) keeps its names."""
    named = "/".join(sorted(k for k in kinds if k))
    if len(kinds) != 1 or named not in _GUIDELLM_PATTERNS:
        return {"pattern": named, "rates": rates}
    pattern, extra = _GUIDELLM_PATTERNS[named]
    if pattern == "concurrency":
        return {"pattern": pattern, "tool_pattern": named}
    return {"pattern": pattern, **extra, "rates": rates, "tool_pattern": named}


def _import_guidellm(data: dict, where: str, slo: Slo) -> tuple[dict, list[RequestRecord]]:
    summary = new_summary("guidellm")
    benches = data["benchmarks"]
    if not benches:
        raise ConfigError(where, "benchmarks", "the report holds no benchmarks")
    try:
        t0 = min(_num(b["scheduler_metrics"]["measure_start_time"]) for b in benches)
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(where, "benchmarks[].scheduler_metrics.measure_start_time", f"missing or not a number: {e}") from None
    version = (data.get("metadata") or {}).get("guidellm_version", "")
    steps, records, sampled = [], [], {}
    kinds, rates, concs = set(), [], []
    for i, b in enumerate(benches):
        cfg = b.get("config") or {}
        strat = cfg.get("strategy") or {}
        kind = strat.get("type_", "")
        kinds.add(kind)
        rate = _num(strat["rate"]) if strat.get("rate") is not None else None
        conc = strat.get("streams") if kind == "concurrent" else (1 if kind == "synchronous" else None)
        rates.append(rate)
        concs.append(conc)
        sm = b["scheduler_metrics"]
        start, end = _num(sm["measure_start_time"]) - t0, _num(sm["measure_end_time"]) - t0
        label = f"{kind} rate={rate:g}" if rate is not None else (f"{kind} concurrency={conc}" if conc else kind)
        steps.append(Step(i, label, start, end, 0.0, rate, conc, None))
        reqs = b.get("requests") or {}
        mine = [*(reqs.get("successful") or []), *(reqs.get("errored") or [])]
        # "incomplete" requests were cancelled when the benchmark window closed; GuideLLM leaves them out, so do we.
        for r in mine:
            records.append(_guidellm_record(r, len(records), i, t0, f"{where}: benchmarks[{i}]"))
        totals = ((b.get("metrics") or {}).get("request_totals") or {})
        total = int(totals.get("successful") or 0) + int(totals.get("errored") or 0)
        if total > len(mine):
            sampled[i] = (len(mine), total)
        if not summary["comparability"]["model"] and isinstance(cfg.get("backend"), dict):
            summary["comparability"]["model"] = str(cfg["backend"].get("model") or "")
    comp = summary["comparability"]
    comp["arrival"] = _guidellm_arrival(kinds, rates)
    comp["concurrency_steps"] = [c for c in concs if c]
    comp["slo"] = str(slo)
    comp["tool_version"] = version
    summary["slo"] = slo.to_dict()
    summary["steps"] = summarize(records, slo, steps)
    for i, (kept, total) in sampled.items():
        s = summary["steps"][i]
        scale = total / kept if kept else 0.0
        for key in _RATE_KEYS:
            s[key] *= scale
        s["sampled"] = {"kept": kept, "total": total}
    return summary, records


def import_run(path: str | Path, out_dir: str | Path, slo: Slo) -> dict:
    """Convert ``path`` (GuideLLM report or vLLM bench result) into ``out_dir``; returns the summary written."""
    p = Path(path)
    data = _load(p)
    if isinstance(data, _AiperfCsv):
        tool = "aiperf-csv"
    elif isinstance(data, list):
        tools = {detect(d) for d in data}
        tool = tools.pop() if len(tools) == 1 and tools <= {"vllm-bench", "aiperf"} else ""
    else:
        tool = detect(data)
    if not tool:
        raise ConfigError(str(p), "format", "not a GuideLLM JSON report, a vLLM bench serve --save-result JSON or an "
                                            "AIPerf profile export (profile_export.jsonl, profile_export_aiperf.json/.csv)")
    try:
        if tool == "guidellm":
            summary, records = _import_guidellm(data, str(p), slo)
        elif tool == "aiperf" and (isinstance(data, list) or "metadata" in data):  # per-request JSON lines
            summary, records = _import_aiperf_records(data if isinstance(data, list) else [data], str(p), slo)
        elif tool.startswith("aiperf"):
            summary, records = _import_aiperf_aggregate(data, str(p), slo), None
            tool = "aiperf"
        else:
            summary, records = _import_vllm(data if isinstance(data, list) else [data], str(p), slo)
    except ConfigError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ConfigError(str(p), "content", f"not the {tool} structure expected: {type(e).__name__}: {e}") from None
    summary["knee"] = knee(summary["steps"])
    summary["source"] = {"tool": tool, "file": p.name}
    if records:
        done = [r for r in records if not r.error]
        summary["comparability"]["input_tokens"] = length_stats([r.input_tokens for r in done])
        summary["comparability"]["output_tokens"] = length_stats([r.output_tokens for r in done])
    write_run(out_dir, records, summary)
    write_report(Path(out_dir), summary, records_table(records or [], slo))
    return summary
