"""GuideLLM JSON report (``GenerativeBenchmarksReport``, report schema version 2, GuideLLM 0.8.x): each benchmark a
step, each request sample a record."""

from __future__ import annotations

from goodput.foundation.errors import ConfigError
from goodput.loadtest.imports.common import error_class, num
from goodput.loadtest.patterns import Step
from goodput.loadtest.records import RequestRecord
from goodput.loadtest.results import new_summary
from goodput.loadtest.slo import Slo
from goodput.loadtest.stats import summarize

__all__ = ["import_guidellm"]

_RATE_KEYS = ("achieved_rate", "input_tokens_per_s", "output_tokens_per_s", "goodput_requests_per_s", "goodput_tokens_per_s")
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
        gaps = [(num(last) - num(first)) / (out_tokens - 1)] * (out_tokens - 1)
    targeted = t.get("targeted_start")
    if targeted is not None and num(targeted) < t0 - _OFF_CLOCK_S:
        targeted = None  # GuideLLM 0.8.1 writes a relative time for some Poisson requests: not on the report's clock
    return RequestRecord(
        index=index, step=step, scheduled_s=num(targeted if targeted is not None else start) - t0, sent_s=num(start) - t0,
        first_token_s=num(first) - t0 if ok and first is not None else None,
        done_s=num(end) - t0 if ok else None, itl_s=gaps,
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


def import_guidellm(data: dict, where: str, slo: Slo) -> tuple[dict, list[RequestRecord]]:
    summary = new_summary("guidellm")
    benches = data["benchmarks"]
    if not benches:
        raise ConfigError(where, "benchmarks", "the report holds no benchmarks")
    try:
        t0 = min(num(b["scheduler_metrics"]["measure_start_time"]) for b in benches)
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(where, "benchmarks[].scheduler_metrics.measure_start_time", f"missing or not a number: {e}") from None
    version = (data.get("metadata") or {}).get("guidellm_version", "")
    records: list[RequestRecord] = []
    steps, sampled = [], {}
    kinds, rates, concs = set(), [], []
    for i, b in enumerate(benches):
        cfg = b.get("config") or {}
        strat = cfg.get("strategy") or {}
        kind = strat.get("type_", "")
        kinds.add(kind)
        rate = num(strat["rate"]) if strat.get("rate") is not None else None
        conc = strat.get("streams") if kind == "concurrent" else (1 if kind == "synchronous" else None)
        rates.append(rate)
        concs.append(conc)
        sm = b["scheduler_metrics"]
        start, end = num(sm["measure_start_time"]) - t0, num(sm["measure_end_time"]) - t0
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
    # GuideLLM lists each benchmark's requests itself; its first is often scheduled ms before measure_start_time
    summary["steps"] = summarize(records, slo, steps, tool_assigned=True)
    for i, (kept, total) in sampled.items():
        s = summary["steps"][i]
        scale = total / kept if kept else 0.0
        for key in _RATE_KEYS:
            s[key] *= scale
        s["sampled"] = {"kept": kept, "total": total}
    return summary, records


