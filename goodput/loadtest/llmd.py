"""The llm-d benchmark report v0.2 (``llm-d/llm-d-benchmark``, ``benchmark_report/schema_v0_2.py``), both ways.

The one cross-tool format there is: a report holds one stage of one workload generator, so a goodput run is
exported as one report per step, and reports (one or a directory of them) are imported as steps in stage order.
A report carries aggregates only (``results.request_performance.aggregate``): an imported step keeps them and is
left unjudged. goodput's own SLO figures ride along in ``results.observability.goodput`` (the one section the
schema leaves open to extra keys) and the run's comparability in ``scenario.load.native.config.goodput``, so a
report exported here comes back as the run it was.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TypeGuard

from goodput.foundation.errors import ConfigError
from goodput.loadtest.imports.common import aggregate_step, num
from goodput.loadtest.patterns import Step
from goodput.loadtest.results import new_summary
from goodput.loadtest.slo import Slo

__all__ = ["VERSION", "export_run", "import_reports", "is_report", "to_reports"]

VERSION = "0.2"
_TIME = {"s": 1.0, "ms": 1e-3, "s/token": 1.0, "ms/token": 1e-3}
# our distribution key -> (the schema's latency field, the unit we write)
_LATENCIES = {"ttft_s": ("time_to_first_token", "s"), "tpot_s": ("time_per_output_token", "s/token"),
              "itl_s": ("inter_token_latency", "s/token"), "e2e_s": ("request_latency", "s")}
_OURS = ("slo_attainment", "slo_met", "slo_terms", "goodput_requests_per_s", "goodput_tokens_per_s", "errors")


def is_report(data: object) -> TypeGuard[dict]:
    """A v0.2 report by its identity (its version and run); ``check_whole`` says whether it is whole."""
    return isinstance(data, dict) and str(data.get("version")) == VERSION and isinstance(data.get("run"), dict)


def check_whole(report: dict, where: str) -> None:
    """``ConfigError`` naming the first part missing from ``report``: what the schema requires (``run.uid``,
    ``results``, a ``Statistics``' ``units`` and ``mean``, ``requests.total``), the aggregates the import reads
    (latency and throughput), and a ``Statistics`` with ``min`` but no ``max`` (a writer gives both or neither: a
    report cut short inside one). A cut that falls between whole sections leaves a report the schema accepts, which
    no reader can tell from a shorter one."""
    if not report["run"].get("uid"):
        raise ConfigError(where, "run.uid", "missing (the schema requires it): the report is cut short or not one")
    results = report.get("results")
    agg = ((results.get("request_performance") or {}).get("aggregate") if isinstance(results, dict) else None)
    if not isinstance(agg, dict):
        raise ConfigError(where, "results.request_performance.aggregate",
                          "missing: the report holds no aggregates to import (cut short?)")
    for path, stats in _statistics_in(report, ""):
        missing = [k for k in ("units", "mean") if stats.get(k) is None] + (
            ["max"] if stats.get("min") is not None and stats.get("max") is None else [])
        if missing:
            raise ConfigError(where, path, f"no {' or '.join(missing)} in its statistics: the report is cut short")
    if not isinstance(agg.get("requests"), dict) or agg["requests"].get("total") is None:
        raise ConfigError(where, "results.request_performance.aggregate.requests.total",
                          "missing (the schema requires it): the report is cut short")
    for part in ("latency", "throughput"):
        if not isinstance(agg.get(part), dict) or not agg[part]:
            raise ConfigError(where, f"results.request_performance.aggregate.{part}",
                              "missing: nothing of it to import (the report is cut short?)")


_STAT_KEYS = frozenset(("mean", "mode", "stddev", "min", "p0p1", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95",
                        "p99", "p99p9", "max"))


def _statistics_in(node: object, path: str):
    """(dotted path, dict) of each ``Statistics`` in ``node``: a dict with ``units`` and one of its figures."""
    if isinstance(node, dict):
        if "units" in node and _STAT_KEYS & node.keys():
            yield path, node
            return
        for k, v in node.items():
            yield from _statistics_in(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _statistics_in(v, f"{path}[{i}]")


def _statistics(d: dict, units: str) -> dict | None:
    """Our distribution as the schema's ``Statistics`` (``mean`` is required: none without it)."""
    if not d or d.get("mean") is None:
        return None
    return {"units": units, "mean": d["mean"], **{p: d[p] for p in ("p50", "p90", "p95", "p99") if d.get(p) is not None}}


def _rate(value: float | None, units: str) -> dict | None:
    return None if value is None else {"units": units, "mean": value}


def _seq_len(lengths: dict) -> dict:
    return {"distribution": "other", "value": lengths.get("mean") or 0}


def _drop_none(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def to_reports(summary: dict, run_name: str) -> list[dict]:
    """One v0.2 report per step of the run's ``summary``."""
    comp = summary.get("comparability") or {}
    eid = hashlib.sha256(json.dumps(summary, sort_keys=True).encode()).hexdigest()[:32]
    tool = summary.get("tool") or "goodput"
    reports = []
    for step in summary.get("steps") or []:
        latency = _drop_none({name: _statistics(step.get(key) or {}, units) for key, (name, units) in _LATENCIES.items()})
        requests = _drop_none({
            "total": int(step.get("requests") or 0),
            "failures": int(step.get("requests") or 0) - int(step.get("completed") or 0),
            "input_length": _statistics(comp.get("input_tokens") or {}, "count"),
            "output_length": _statistics(comp.get("output_tokens") or {}, "count"),
        })
        throughput = _drop_none({"input_token_rate": _rate(step.get("input_tokens_per_s"), "tokens/s"),
                                 "output_token_rate": _rate(step.get("output_tokens_per_s"), "tokens/s"),
                                 "request_rate": _rate(step.get("achieved_rate"), "queries/s")})
        load = _drop_none({
            "tool": tool, "tool_version": str(comp.get("tool_version") or ""), "source": "unknown",
            "stage": int(step["index"]), "input_seq_len": _seq_len(comp.get("input_tokens") or {}),
            "output_seq_len": _seq_len(comp.get("output_tokens") or {}) if comp.get("output_tokens") else None,
            "rate_qps": step.get("offered_rate") or None, "concurrency": step.get("concurrency"),
        })
        reports.append({
            "version": VERSION,
            "run": {"uid": f"{eid[:24]}{int(step['index']):08x}", "eid": eid,
                    "description": f"{run_name}: step {step['index']} ({step.get('label', '')})", "keywords": [tool]},
            "scenario": {
                "stack": [{"metadata": {"schema_version": "0.0.1", "label": "target", "cfg_id": eid},
                           "standardized": {"kind": "generic", "tool": comp.get("framework") or "unknown",
                                            "tool_version": str(comp.get("framework_version") or ""),
                                            "model": {"name": comp.get("model") or ""}},
                           "native": {}}],
                "load": {"metadata": {"schema_version": "0.0.1", "description": step.get("label", "")},
                         "standardized": load,
                         "native": {"config": {"goodput": {"comparability": comp, "slo": summary.get("slo"),
                                                           "label": step.get("label"), "measured_s": step.get("measured_s")}}}},
            },
            "results": {
                "request_performance": {"aggregate": {"requests": requests, "latency": latency, "throughput": throughput}},
                "observability": {"goodput": {k: step.get(k) for k in _OURS}},
            },
        })
    return reports


def export_run(run_dir: Path, out_dir: Path) -> list[Path]:
    """Write ``out_dir/<run>_stage_N.json`` for each step of the run in ``run_dir``; returns the paths."""
    from goodput.loadtest.results import read_run

    _, summary = read_run(run_dir)
    if not summary.get("steps"):
        raise ConfigError(str(run_dir), "steps", "the run has no steps to export")
    out_dir.mkdir(parents=True, exist_ok=True)
    name = Path(run_dir).resolve().name
    paths = []
    for report in to_reports(summary, name):
        path = out_dir / f"{name}_stage_{report['scenario']['load']['standardized']['stage']}.json"
        path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def _seconds(stats: object, where: str, field: str) -> dict | None:
    """The schema's ``Statistics`` of a latency as our distribution in seconds."""
    if not isinstance(stats, dict):
        return None
    units = stats.get("units")
    if units not in _TIME:
        raise ConfigError(where, field, f"units {units!r} is not one of {', '.join(_TIME)}")
    scale = _TIME[units]
    return {**{p: num(stats[p]) * scale if stats.get(p) is not None else None for p in ("p50", "p90", "p95", "p99")},
            "mean": num(stats["mean"]) * scale, "count": None}


def _mean(stats: object) -> float | None:
    return num(stats["mean"]) if isinstance(stats, dict) and stats.get("mean") is not None else None


def _step(report: dict, index: int, start_s: float, where: str) -> tuple[dict, dict]:
    """(one step from one report, the goodput configuration it carries or {})."""
    load = ((report.get("scenario") or {}).get("load") or {})
    std = load.get("standardized") or {}
    config = (load.get("native") or {}).get("config")
    carried = config.get("goodput") if isinstance(config, dict) else None
    ours: dict = carried if isinstance(carried, dict) else {}
    agg = ((report["results"].get("request_performance") or {}).get("aggregate") or {})
    reqs, lat, thr = agg.get("requests") or {}, agg.get("latency") or {}, agg.get("throughput") or {}
    rate = std.get("rate_qps")
    conc = std.get("concurrency")
    conc = int(conc) if isinstance(conc, int | float) and conc != float("inf") else None
    total, failed = int(reqs.get("total") or 0), int(reqs.get("failures") or 0)
    achieved = _mean(thr.get("request_rate"))
    duration = ours.get("measured_s") or ((total - failed) / achieved if achieved else 0.0)
    label = ours.get("label") or (f"rate={rate:g}" if rate else f"stage {std.get('stage', index)}")
    step = aggregate_step(
        Step(index, label, start_s, start_s + duration, 0.0, None if rate is None else num(rate), conc, None),
        total - failed, failed, achieved_rate=achieved, input_tokens_per_s=_mean(thr.get("input_token_rate")),
        output_tokens_per_s=_mean(thr.get("output_token_rate")),
        latencies={key: _seconds(lat.get(name), where, f"results.request_performance.aggregate.latency.{name}")
                   for key, (name, _) in _LATENCIES.items()},
        tool_goodput=None)
    kept = (report["results"].get("observability") or {}).get("goodput")
    if isinstance(kept, dict):
        step.update({k: kept[k] for k in _OURS if k in kept})
    return step, ours


def import_reports(reports: list[tuple[Path, dict]], slo: Slo) -> dict:
    """Reports as one run, a step per report in stage order. The steps keep their reports' aggregates; a report
    exported by goodput brings its SLO figures back, judged against the SLO it was measured with."""
    def stage(item):
        return int(((item[1].get("scenario") or {}).get("load") or {}).get("standardized", {}).get("stage") or 0)

    summary = new_summary("llmd-v0.2")
    steps: list[dict] = []
    ours: dict = {}
    start = 0.0
    for path, report in reports:
        check_whole(report, str(path))
    for i, (path, report) in enumerate(sorted(reports, key=stage)):
        step, carried = _step(report, i, start, str(path))
        steps.append(step)
        start = step["end_s"]
        ours = ours or carried
        stack = ((report.get("scenario") or {}).get("stack") or [])
        for comp in stack:
            model = ((comp.get("standardized") or {}).get("model") or {}).get("name")
            if model and not summary["comparability"]["model"]:
                summary["comparability"]["model"] = str(model)
    if ours.get("comparability"):
        summary["comparability"].update(ours["comparability"])
    else:
        rates = [s["offered_rate"] for s in steps]
        summary["comparability"]["arrival"] = {"pattern": "", "rates": rates} if any(rates) else {}
    if ours.get("slo") and ours["slo"].get("terms"):
        summary["slo"] = ours["slo"]
    else:
        summary["slo"] = slo.to_dict()
        summary["comparability"]["slo"] = str(slo)
        summary["invalid_reasons"].append("no per-request data (an llm-d benchmark report holds aggregates): "
                                          "SLO goodput not computed")
    summary["steps"] = steps
    return summary
