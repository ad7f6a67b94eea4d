"""vLLM ``bench serve --save-result`` JSON (``vllm/benchmarks/serve.py``): one result a step; with ``--save-detailed``
each request becomes a record, without it only vLLM's aggregates come over."""

from __future__ import annotations

import math

from goodput.foundation.errors import ConfigError
from goodput.loadtest.imports.common import aggregate_step, error_class, num
from goodput.loadtest.patterns import Step
from goodput.loadtest.records import RequestRecord
from goodput.loadtest.results import new_summary
from goodput.loadtest.slo import Slo
from goodput.loadtest.stats import summarize

__all__ = ["import_vllm"]


def _stats_ms(stats: dict, metric: str) -> dict:
    """vLLM's ``mean_/median_/pNN_{metric}_ms`` aggregates as our distribution dict in seconds (None where absent)."""
    def s(key: str) -> float | None:
        v = stats.get(key)
        return None if v is None else num(v) / 1000.0
    return {
        "p50": s(f"median_{metric}_ms"), "p90": s(f"p90_{metric}_ms"), "p95": s(f"p95_{metric}_ms"),
        "p99": s(f"p99_{metric}_ms"), "mean": s(f"mean_{metric}_ms"), "count": None,
    }


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
            sent = num(data["start_times"][i]) - t0 + offset_s
            err = error_class(data["errors"][i])
            ok = not err
            out.append(RequestRecord(
                index=first_index + i, step=step, scheduled_s=sent - num(queue[i] or 0.0), sent_s=sent,
                first_token_s=sent + num(data["ttfts"][i]) if ok else None,
                done_s=sent + num(data["latencies"][i]) if ok else None,
                itl_s=[num(g) for g in (data["itls"][i] or [])] if ok else [],
                input_tokens=int(data["input_lens"][i]), output_tokens=int(data["output_lens"][i]),
                status=200 if ok else 0, error=err, tenant="", tier="", route="", trace_id="",
            ))
        except (TypeError, ValueError) as e:
            raise ConfigError(where, f"request {i}", f"bad per-request value: {e}") from None
    return out


def _vllm_aggregate_step(data: dict, step: Step) -> dict:
    """A step from vLLM's own aggregates only (no per-request data)."""
    duration = step.end_s - step.start_s
    return aggregate_step(
        step, int(data.get("completed") or 0), int(data.get("failed") or 0),
        achieved_rate=num(data.get("request_throughput") or 0.0),
        input_tokens_per_s=num(data.get("total_input_tokens") or 0) / duration if duration > 0 else 0.0,
        output_tokens_per_s=num(data.get("output_throughput") or 0.0),
        latencies={"ttft_s": _stats_ms(data, "ttft"), "tpot_s": _stats_ms(data, "tpot"),
                   "itl_s": _stats_ms(data, "itl"), "e2e_s": _stats_ms(data, "e2el")},
        tool_goodput=data.get("request_goodput"))


def import_vllm(results: list[dict], where: str, slo: Slo) -> tuple[dict, list[RequestRecord] | None]:
    """One step per result (``--append-result`` puts one per line), laid end to end on one clock."""
    summary = new_summary("vllm-bench")
    records: list[RequestRecord] = []
    steps, offset, rates, cvs, concs = [], 0.0, [], set(), []
    detailed = True
    for i, data in enumerate(results):
        here = f"{where}: result {i + 1}" if len(results) > 1 else where
        try:
            duration = num(data["duration"])
            rate = data.get("request_rate")
            rate = None if rate in (None, "inf") or rate == math.inf else num(rate)
            burstiness = num(data.get("burstiness") or 1.0)
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


