"""AIPerf (``ai-dynamo/aiperf``) exports: the per-request ``profile_export.jsonl`` (each record a request) and the
aggregate ``profile_export_aiperf.json`` / ``.csv`` (AIPerf's own figures; no SLO judgement without requests).

The offered rate, arrival pattern and model come from the aggregate's ``input_config`` (AIPerf 0.13's layout and the
earlier one); a JSONL import reads them from the ``profile_export_aiperf.json`` beside it. Output tokens are the
server's ``usage_completion_tokens`` where a record carries them (``--use-server-token-count`` or not), else AIPerf's
own tokenizer count; ``source.token_counts`` says which.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from goodput.foundation.errors import ConfigError
from goodput.foundation.jsonfile import parse_json
from goodput.loadtest.imports.common import aggregate_step, error_class, http_class, num, read_text
from goodput.loadtest.patterns import Step
from goodput.loadtest.records import RequestRecord
from goodput.loadtest.results import new_summary
from goodput.loadtest.slo import Slo
from goodput.loadtest.stats import summarize

__all__ = ["AGGREGATE_FILE", "AiperfCsv", "import_aiperf_aggregate", "import_aiperf_records", "parse_csv"]

AGGREGATE_FILE = "profile_export_aiperf.json"
_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}
# AIPerf's aggregate metric (tag, CSV label) -> our distribution; its inter_token_latency is our TPOT
_DISTRIBUTIONS = {"time_to_first_token": ("Time to First Token", "ttft_s"),
                  "inter_token_latency": ("Inter Token Latency", "tpot_s"),
                  "inter_chunk_latency": ("Inter Chunk Latency", "itl_s"),
                  "request_latency": ("Request Latency", "e2e_s")}
_SCALARS = {"benchmark_duration": "Benchmark Duration", "request_throughput": "Request Throughput",
            "request_count": "Request Count", "error_request_count": "Error Request Count",
            "output_token_throughput": "Output Token Throughput", "goodput": "Goodput"}
# AIPerf's arrival names -> ours (poisson is poisson; constant spaces arrivals evenly: gamma with cv 0)
_PATTERNS = {"poisson": ("poisson", {}), "constant": ("gamma", {"cv": 0.0})}


class AiperfCsv(list[dict[str, str]]):
    """The rows of AIPerf's ``profile_export_aiperf.csv``, a list of ``{column: text}`` with ``Metric`` in each."""


def parse_csv(text: str) -> AiperfCsv:
    """AIPerf's CSV sections (blank-line separated, each with its own header row) as one list of rows."""
    rows, header = AiperfCsv(), None
    for line in csv.reader(io.StringIO(text)):
        if not line:
            header = None
        elif header is None:
            header = line
        else:
            rows.append(dict(zip(header, line, strict=False)))
    return rows


def _seconds(block: object, where: str, name: str) -> float | None:
    """A ``{"value": V, "unit": U}`` in seconds; None when absent."""
    if not isinstance(block, dict):
        return None
    unit = block.get("unit", "ms")
    if unit not in _UNITS:
        raise ConfigError(where, name, f"unit {unit!r} is not a time unit ({', '.join(_UNITS)})")
    return num(block["value"]) * _UNITS[unit]


def _value(metrics: dict, *names: str) -> int | None:
    """The first of ``names`` the record carries, as an int; None when it carries none."""
    for name in names:
        block = metrics.get(name)
        if isinstance(block, dict) and block.get("value") is not None:
            return int(num(block["value"]))
    return None


def _record(line: dict, index: int, t0: int, where: str) -> tuple[RequestRecord, bool]:
    """(the request, whether its output tokens are the server's count)."""
    meta, metrics, error = line["metadata"], line.get("metrics") or {}, line.get("error")
    start, end = int(meta["request_start_ns"]), meta.get("request_end_ns")
    sent = (start - t0) / 1e9
    # AIPerf 0.13 records when its timing manager issued the request's credit: when it was due
    due = (int(meta["credit_issued_ns"]) - t0) / 1e9 if meta.get("credit_issued_ns") is not None else sent
    if meta.get("was_cancelled"):
        err = "aborted"  # --request-cancellation-rate: the client dropped it, as our abort_rate does
    elif error:
        code = error.get("code")
        err = http_class(int(code)) if isinstance(code, int) and code >= 400 else (
            error_class(f"{error.get('type', '')} {error.get('message', '')}") or "other")
    else:
        err = ""
    ttft = _seconds(metrics.get("time_to_first_token"), where, "time_to_first_token")
    ok = not err and end is not None
    gaps = (metrics.get("inter_chunk_latency") or {})
    scale = _UNITS.get(gaps.get("unit", "ms"), 1e-3)
    server_out = _value(metrics, "usage_completion_tokens")
    out = server_out if server_out is not None else _value(metrics, "output_sequence_length", "output_token_count")
    isl = _value(metrics, "usage_prompt_tokens", "input_sequence_length", "error_isl")
    return RequestRecord(
        index=index, step=0, scheduled_s=min(due, sent), sent_s=sent,
        first_token_s=sent + ttft if ok and ttft is not None else None,
        done_s=(int(end) - t0) / 1e9 if ok else None,
        itl_s=[num(g) * scale for g in gaps.get("value") or []] if ok else [],
        input_tokens=isl or 0, output_tokens=out or 0,
        status=200 if ok else (int(error["code"]) if error and isinstance(error.get("code"), int) else 0),
        error=err, tenant="", tier="", route="", trace_id="",
    ), server_out is not None


def _config(data: object) -> dict:
    """Model, offered rate, arrival pattern and concurrency from an aggregate's ``input_config``: AIPerf 0.13 keeps
    them in ``models.items[].name`` and its profiling ``phases[]`` (``type``, ``rate``, ``concurrency``), earlier
    versions in ``endpoint.model_names`` and ``loadgen`` (``request_rate``, ``request_rate_mode``, ``concurrency``);
    absent ones are empty."""
    cfg = (data.get("input_config") or {}) if isinstance(data, dict) else {}
    items = (cfg.get("models") or {}).get("items") if isinstance(cfg.get("models"), dict) else None
    models = [m.get("name") for m in items or [] if isinstance(m, dict)] or (cfg.get("endpoint") or {}).get("model_names") or []
    phases = [p for p in cfg.get("phases") or [] if isinstance(p, dict) and p.get("kind", "profiling") == "profiling"]
    if phases:
        load = {"request_rate": phases[0].get("rate"), "request_rate_mode": phases[0].get("type"),
                "concurrency": phases[0].get("concurrency")}
    else:
        load = cfg.get("loadgen") or {}
    mode, rate = load.get("request_rate_mode"), load.get("request_rate")
    return {"model": str(models[0]) if models else "", "rate": None if rate is None else num(rate),
            "pattern": str(mode).lower() if mode else "", "concurrency": load.get("concurrency"),
            "version": str(data.get("aiperf_version", "")) if isinstance(data, dict) else ""}


def _comparability(summary: dict, config: dict, slo: Slo) -> None:
    pattern, extra = _PATTERNS.get(config["pattern"], (config["pattern"] or "aiperf", {}))
    if config["rate"] is None:
        pattern = "concurrency" if config["concurrency"] else pattern
    summary["comparability"].update({
        "model": config["model"], "slo": str(slo), "tool_version": config["version"],
        "arrival": {"pattern": pattern, **extra, **({"rate": config["rate"]} if config["rate"] is not None else {}),
                    **({"tool_pattern": config["pattern"]} if config["pattern"] else {})},
        "concurrency_steps": [config["concurrency"]] if config["concurrency"] and config["rate"] is None else [],
    })
    summary["slo"] = slo.to_dict()


def _label(config: dict) -> str:
    if config["rate"] is not None:
        return f"{config['pattern'] or 'rate'} rate={config['rate']:g}"
    return f"concurrency={config['concurrency']}" if config["concurrency"] else "aiperf"


def _beside(path: Path) -> dict:
    """The configuration in the ``profile_export_aiperf.json`` beside a JSONL export ({} when there is none)."""
    aggregate = path.with_name(AGGREGATE_FILE)
    if not aggregate.is_file():
        return {}
    return parse_json(read_text(aggregate), str(aggregate))


def import_aiperf_records(lines: list[dict], path: Path, slo: Slo) -> tuple[dict, list[RequestRecord]]:
    """profile_export.jsonl: one step over AIPerf's benchmark duration (first request start to last response)."""
    where = str(path)
    lines = [x for x in lines if (x.get("metadata") or {}).get("benchmark_phase", "profiling") == "profiling"]
    if not lines:
        raise ConfigError(where, "metadata.benchmark_phase", "no profiling-phase records")
    t0 = min(int(x["metadata"].get("credit_issued_ns") or x["metadata"]["request_start_ns"]) for x in lines)
    pairs = [_record(x, i, t0, f"{where}: line {i + 1}") for i, x in enumerate(lines)]
    records = [r for r, _ in pairs]
    end = max((int(x["metadata"].get("request_end_ns") or 0) - t0) / 1e9 for x in lines)
    config = _config(_beside(path))
    summary = new_summary("aiperf")
    _comparability(summary, config, slo)
    summary["steps"] = summarize(records, slo, [Step(0, _label(config), 0.0, max(end, 1e-9), 0.0, config["rate"],
                                                     config["concurrency"] if config["rate"] is None else None, None)])
    summary["source"] = {"token_counts": "server" if all(s for _, s in pairs) else "client"}
    return summary, records


def _aggregates(data: AiperfCsv | dict, where: str) -> tuple[dict, dict]:
    """(our distribution dicts by key, AIPerf's scalars by tag) from profile_export_aiperf.json or its CSV."""
    dists: dict[str, dict] = {}
    scalars: dict[str, float] = {}
    if isinstance(data, AiperfCsv):
        by_label = {}
        for row in data:
            label, _, unit = row.get("Metric", "").partition(" (")
            by_label[label] = (row, unit.rstrip(")"))
        for label, key in _DISTRIBUTIONS.values():
            if label in by_label:
                row, unit = by_label[label]
                dists[key] = {"unit": unit, **{k: num(v) for k, v in row.items() if k != "Metric" and v}}
        for tag, label in _SCALARS.items():
            if label in by_label and by_label[label][0].get("Value"):
                scalars[tag] = num(by_label[label][0]["Value"])
    else:
        for tag, (_, key) in _DISTRIBUTIONS.items():
            if isinstance(data.get(tag), dict):
                dists[key] = data[tag]
        scalars = {tag: num(data[tag]["avg"]) for tag in _SCALARS if isinstance(data.get(tag), dict)}
    out = {}
    for key, block in dists.items():
        unit = block.get("unit", "ms")
        if unit not in _UNITS:
            raise ConfigError(where, key, f"unit {unit!r} is not a time unit")
        scale = _UNITS[unit]
        out[key] = {**{f"p{p}": (num(block[f"p{p}"]) * scale if block.get(f"p{p}") is not None else None)
                       for p in (50, 90, 95, 99)},
                    "mean": num(block["avg"]) * scale if block.get("avg") is not None else None,
                    "count": int(block["count"]) if block.get("count") is not None else None}
    return out, scalars


def import_aiperf_aggregate(data: AiperfCsv | dict, path: Path, slo: Slo) -> dict:
    """profile_export_aiperf.json or .csv: AIPerf's own aggregates, one step; SLO figures None (no requests). The
    CSV has no configuration: it is read from the JSON beside it."""
    where = str(path)
    dists, sc = _aggregates(data, where)
    if "benchmark_duration" not in sc:
        raise ConfigError(where, "benchmark_duration", "missing: not an AIPerf profile export")
    config = _config(data if isinstance(data, dict) else _beside(path))
    duration = sc["benchmark_duration"]
    step = Step(0, _label(config), 0.0, duration, 0.0, config["rate"],
                config["concurrency"] if config["rate"] is None else None, None)
    summary = new_summary("aiperf")
    _comparability(summary, config, slo)
    summary["steps"] = [aggregate_step(
        step, int(sc.get("request_count", 0)), int(sc.get("error_request_count", 0)),
        achieved_rate=sc.get("request_throughput"), input_tokens_per_s=None,
        output_tokens_per_s=sc.get("output_token_throughput"), latencies=dists, tool_goodput=sc.get("goodput"))]
    summary["invalid_reasons"].append("no per-request data (AIPerf's aggregate export; import its profile_export.jsonl "
                                      "for SLO goodput)")
    if isinstance(data, dict):
        server = isinstance(data.get("usage_completion_tokens"), dict)
        for ours, names in (("input_tokens", ("usage_prompt_tokens", "input_sequence_length")),
                            ("output_tokens", ("usage_completion_tokens", "output_sequence_length"))):
            block = next((data[n] for n in names if isinstance(data.get(n), dict)), None)
            if block is not None:
                summary["comparability"][ours] = {k: num(block[t]) for k, t in
                                                  (("mean", "avg"), ("p50", "p50"), ("p90", "p90"), ("p99", "p99"))
                                                  if block.get(t) is not None}
        summary["source"] = {"token_counts": "server" if server else "client"}
    return summary
