"""Compare two load-test runs: may they be compared at all, and what changed in goodput and latency.

The seed's comparability fields split in two. The workload (model, prompt template, cache state, input and
output lengths, arrival pattern and rates, concurrency steps, SLO) must match, or the runs measured different
things and the comparison is refused (``comparable`` False, the fields named). The system (quantization,
framework and version, hardware, tensor parallelism) is what a comparison is for: its differences are listed,
never blocking. A field that one run left empty is unknown, listed apart, not a difference.
"""

from __future__ import annotations

__all__ = ["LENGTH_TOLERANCE", "SYSTEM_FIELDS", "WORKLOAD_FIELDS", "compare", "render_text"]

WORKLOAD_FIELDS = (
    "model", "prompt_template", "cache_state", "input_tokens", "output_tokens", "arrival", "concurrency_steps", "slo",
)
SYSTEM_FIELDS = ("quantization", "framework", "framework_version", "hardware", "tensor_parallel")
LENGTH_TOLERANCE = 0.10  # token-length statistics within 10% are the same workload (tools tokenize and sample differently)
_STEP_FIGURES = ("achieved_rate", "goodput_requests_per_s", "goodput_tokens_per_s", "slo_attainment", "error_rate")
_LATENCIES = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
_PCTS = ("p50", "p90", "p95", "p99")


def _empty(v) -> bool:
    return v is None or v == "" or v == {} or v == []


def _rates(arrival: dict) -> list[float]:
    if arrival.get("rates") is not None:
        return [r for r in arrival["rates"] if r is not None]
    return [arrival["rate"]] if arrival.get("rate") is not None else []


def _same(field: str, a, b) -> bool:
    if field in ("input_tokens", "output_tokens"):
        keys = [k for k in ("mean", "p50", "p90", "p99") if a.get(k) is not None and b.get(k) is not None]
        return all(abs(a[k] - b[k]) <= LENGTH_TOLERANCE * max(abs(a[k]), abs(b[k]), 1e-12) for k in keys)
    if field == "arrival":
        return a.get("pattern") == b.get("pattern") and sorted(_rates(a)) == sorted(_rates(b))
    if field == "concurrency_steps":
        return sorted(a) == sorted(b)
    return a == b


def _change(a, b) -> dict:
    out = {"a": a, "b": b, "change": None, "relative": None}
    if isinstance(a, int | float) and isinstance(b, int | float):
        out["change"] = b - a
        out["relative"] = (b - a) / a if a else None
    return out


def _load(step: dict):
    return ("rate", step["offered_rate"]) if step.get("offered_rate") is not None else ("concurrency", step.get("concurrency"))


def compare(summary_a: dict, summary_b: dict) -> dict:
    """Differences in comparability, then per load level (steps paired by offered rate or concurrency) the change
    in goodput, attainment and latency percentiles, and the change of the knee."""
    ca, cb = summary_a.get("comparability") or {}, summary_b.get("comparability") or {}
    differences, unknown = [], []
    for field in (*WORKLOAD_FIELDS, *SYSTEM_FIELDS):
        a, b = ca.get(field), cb.get(field)
        if _empty(a) or _empty(b):
            if not (_empty(a) and _empty(b)):
                unknown.append(field)
            continue
        if not _same(field, a, b):
            differences.append({"field": field, "a": a, "b": b, "blocking": field in WORKLOAD_FIELDS})
    steps_b = {_load(s): s for s in summary_b.get("steps") or []}
    paired, only_a = [], []
    for sa in summary_a.get("steps") or []:
        sb = steps_b.pop(_load(sa), None)
        if sb is None:
            only_a.append(sa["label"])
            continue
        kind, value = _load(sa)
        row = {"load": {kind: value}, "label_a": sa["label"], "label_b": sb["label"]}
        for key in _STEP_FIGURES:
            row[key] = _change(sa.get(key), sb.get(key))
        for lat in _LATENCIES:
            da, db = sa.get(lat) or {}, sb.get(lat) or {}
            row[lat] = {p: _change(da.get(p), db.get(p)) for p in _PCTS}
        paired.append(row)
    ka, kb = summary_a.get("knee") or {}, summary_b.get("knee") or {}
    return {
        "comparable": not any(d["blocking"] for d in differences),
        "tools": [summary_a.get("tool"), summary_b.get("tool")],
        "differences": differences,
        "unknown": unknown,
        "steps": paired,
        "only_in_a": only_a,
        "only_in_b": [s["label"] for s in steps_b.values()],
        "knee": {
            "offered_rate": _change(ka.get("offered_rate"), kb.get("offered_rate")),
            "goodput_requests_per_s": _change(ka.get("goodput_requests_per_s"), kb.get("goodput_requests_per_s")),
        },
    }


def _fmt(v, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v * 1000:.1f}ms" if unit == "s" else f"{v:.3g}"
    return str(v)


def _pct(rel) -> str:
    return "" if rel is None else f" ({rel:+.1%})"


def render_text(result: dict) -> str:
    """A plain-text report of ``compare``'s result, one line per difference and per figure."""
    lines = [f"runs: {result['tools'][0]} vs {result['tools'][1]}"]
    lines.append("comparable: yes" if result["comparable"] else "comparable: NO (the workloads differ)")
    for d in result["differences"]:
        tag = "workload" if d["blocking"] else "system"
        lines.append(f"  differs ({tag}): {d['field']}: {d['a']!r} vs {d['b']!r}")
    if result["unknown"]:
        lines.append(f"  unknown in one run: {', '.join(result['unknown'])}")
    for row in result["steps"]:
        (kind, value), = row["load"].items()
        lines.append(f"{kind}={value:g}:")
        for key in _STEP_FIGURES:
            c = row[key]
            lines.append(f"  {key:<24} {_fmt(c['a']):>10} -> {_fmt(c['b']):<10}{_pct(c['relative'])}")
        for lat in _LATENCIES:
            for p in _PCTS:
                c = row[lat][p]
                if c["a"] is None and c["b"] is None:
                    continue
                name = f"{lat[:-2]} {p}"
                lines.append(f"  {name:<24} {_fmt(c['a'], 's'):>10} -> {_fmt(c['b'], 's'):<10}{_pct(c['relative'])}")
    for side in ("a", "b"):
        if result[f"only_in_{side}"]:
            lines.append(f"steps only in run {side.upper()}: {', '.join(result[f'only_in_{side}'])}")
    k = result["knee"]["offered_rate"]
    lines.append(f"knee (offered rate): {_fmt(k['a'])} -> {_fmt(k['b'])}{_pct(k['relative'])}")
    return "\n".join(lines) + "\n"
