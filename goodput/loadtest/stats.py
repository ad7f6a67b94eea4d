"""Per-step statistics of a load test: rates, latency percentiles, errors, SLO attainment, SLO goodput, the knee.

Pure functions over ``RequestRecord``s. A step's measured window is ``[start_s + settle_s, end_s)``: requests
scheduled during the settle period are left out, and every rate is "per second of the measured window" (wall
time, not the busy time in which requests happened to be in flight). Percentiles are numpy's linear
interpolation over the step's completed requests; ITL pools every gap of every completed request.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from goodput.foundation.quantiles import percentile
from goodput.loadtest.records import RequestRecord
from goodput.loadtest.slo import Slo, SloTerm

__all__ = [
    "PERCENTILES", "distribution", "knee", "length_stats", "served_rate", "slo_term_value", "summarize", "verdict",
]

PERCENTILES = (50, 90, 95, 99)


def distribution(values: Sequence[float]) -> dict:
    """p50/p90/p95/p99/mean and count of ``values``; None for each figure when there are none."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return {**{f"p{p}": None for p in PERCENTILES}, "mean": None, "count": 0}
    qs = np.percentile(arr, PERCENTILES)
    figures = {f"p{p}": float(q) for p, q in zip(PERCENTILES, qs, strict=True)}
    return {**figures, "mean": float(arr.mean()), "count": int(arr.size)}


def length_stats(tokens: Sequence[int]) -> dict:
    """mean/p50/p90/p99 of token lengths: summary.json's ``comparability.input_tokens`` / ``output_tokens``."""
    d = distribution(tokens)
    return {k: d[k] for k in ("mean", "p50", "p90", "p99")} if d["count"] else {}


def _ok(r: RequestRecord) -> bool:
    return not r.error and r.done_s is not None


def slo_term_value(term: SloTerm, records: Sequence[RequestRecord]) -> float | None:
    """The step's value of one SLO term: its percentile over the step's requests, failed ones counted as infinitely late.

    Failed requests (an error, or no response end) enter as +inf, so a step cannot meet a TTFT term by failing
    its slow requests. TPOT ignores one-token answers (they have none); ITL pools every gap. None when no value.
    """
    values: list[float] = []
    for r in records:
        if not _ok(r):
            values.append(math.inf)
        elif term.metric == "itl":
            values.extend(r.itl_s)
        else:
            v = term.value_of(r)
            if v is not None:
                values.append(v)
    return percentile(values, term.percentile) if values else None


def _group(records: Sequence[RequestRecord], slo: Slo, measured_s: float) -> dict:
    """Counts, rates, latency distributions and SLO figures of one group of requests over ``measured_s`` seconds."""
    done = [r for r in records if _ok(r)]
    good = [r for r in done if slo.meets(r)]
    errors = Counter(r.error for r in records if r.error)
    per_s = (lambda x: x / measured_s) if measured_s > 0 else (lambda x: 0.0)
    return {
        "requests": len(records),
        "completed": len(done),
        "achieved_rate": per_s(len(done)),
        "input_tokens_per_s": per_s(sum(r.input_tokens for r in done)),
        "output_tokens_per_s": per_s(sum(r.output_tokens for r in done)),
        "ttft_s": distribution([r.ttft_s for r in done if r.ttft_s is not None]),
        "tpot_s": distribution([r.tpot_s for r in done if r.tpot_s is not None]),
        "itl_s": distribution([g for r in done for g in r.itl_s]),
        "e2e_s": distribution([r.e2e_s for r in done if r.e2e_s is not None]),
        "errors": dict(sorted(errors.items())),
        "error_rate": sum(errors.values()) / len(records) if records else 0.0,
        "slo_attainment": len(good) / len(records) if records else None,
        "goodput_requests_per_s": per_s(len(good)),
        "goodput_tokens_per_s": per_s(sum(r.output_tokens for r in good)),
    }


def summarize(records: Iterable[RequestRecord], slo: Slo, steps, *, tool_assigned: bool = False) -> list[dict]:
    """One dict per step (summary.json's ``steps``), from the records of that step scheduled after its settle period.

    ``steps`` are ``patterns.Step``s (index, label, start_s, end_s, settle_s, offered_rate, concurrency).
    A step meets the SLO when every term holds (``slo_term_value`` ≤ threshold) and it had requests.
    ``tool_assigned``: the records' steps were decided by the tool that measured them (an import), so each counts
    even when scheduled before the step's window: GuideLLM 0.8.1 schedules its first request a few ms before its
    ``measure_start_time`` and counts it in every figure it reports.
    """
    by_step: dict[int, list[RequestRecord]] = {}
    for r in records:
        by_step.setdefault(r.step, []).append(r)
    out = []
    for step in steps:
        measured_from = step.start_s + step.settle_s
        measured_s = max(0.0, step.end_s - measured_from)
        mine = sorted((r for r in by_step.get(step.index, ()) if tool_assigned or r.scheduled_s >= measured_from),
                      key=lambda r: r.index)
        terms = []
        for term in slo.terms:
            value = slo_term_value(term, mine)
            met = value is not None and value <= term.threshold_s
            terms.append({"term": str(term), "value_s": value if value is None or math.isfinite(value) else None, "met": met})
        tiers = sorted({r.tier for r in mine})
        per_tier = {t: _group([r for r in mine if r.tier == t], slo, measured_s) for t in tiers} if len(tiers) > 1 else {}
        out.append({
            "index": step.index,
            "label": step.label,
            "offered_rate": step.offered_rate,
            "concurrency": step.concurrency,
            "start_s": step.start_s,
            "end_s": step.end_s,
            "settle_s": step.settle_s,
            "measured_s": measured_s,
            **_group(mine, slo, measured_s),
            "slo_terms": terms,
            "slo_met": bool(mine) and all(t["met"] for t in terms),
            "per_tier": per_tier,
            "server": {},
        })
    return out


def served_rate(records: Iterable[RequestRecord], step) -> float | None:
    """Requests the target completed per second *during* the step's measured window, whichever step sent them: under
    overload this is the target's capacity, where ``achieved_rate`` (the step's own requests, however late they
    finished) is the offered rate again. None for an empty window."""
    start = step.start_s + step.settle_s
    if step.end_s <= start:
        return None
    return sum(1 for r in records if _ok(r) and start <= r.done_s < step.end_s) / (step.end_s - start)


def _load(step: dict) -> float | None:
    """Where a step sits on the load axis: its offered rate, else its concurrency, else (an imported step whose tool
    did not say what it offered) the rate it achieved."""
    for key in ("offered_rate", "concurrency", "achieved_rate"):
        if step.get(key) is not None:
            return step[key]
    return None


def verdict(step_dicts: Sequence[dict]) -> dict:
    """The one judgement of a run, goodput's own and imported ones alike: whether any step could be judged (a step
    without per-request data has ``slo_met`` None), which steps met the SLO, and the knee, the highest load of
    those. A single step without an offered rate is judged like any other, not skipped."""
    judged = [s for s in step_dicts if s.get("slo_met") is not None]
    meeting = [(load, s) for s in judged if s["slo_met"] and (load := _load(s)) is not None]
    best = max(meeting, key=lambda m: m[0])[1] if meeting else None
    return {
        "judged": bool(judged),
        "met": [s["index"] for s in judged if s["slo_met"]],
        "knee": None if best is None else {
            "step": best["index"],
            "offered_rate": best.get("offered_rate"),
            "concurrency": best.get("concurrency"),
            "goodput_requests_per_s": best.get("goodput_requests_per_s"),
            "goodput_tokens_per_s": best.get("goodput_tokens_per_s"),
        },
    }


def knee(step_dicts: Sequence[dict]) -> dict | None:
    """The highest load whose step meets the SLO (``verdict``'s knee); None when no step does."""
    return verdict(step_dicts)["knee"]
