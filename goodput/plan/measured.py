"""Measured demand for ``goodput plan replicas --demand-from``: the peak hourly req/s and token mix of every
deployment x scene x tier over the last N weeks, read from Prometheus or the analyzer's trace store, put in place
of the demand file's stream figures (its SLOs, headroom and candidates stay).

Both sources give the same thing, hourly req/s per stream, and one pure function (``summarize``) takes the peaks,
the per-week peaks and the growth the hours show (the review's trend fit, ``goodput.review.forecast``).
Prometheus: the gateway request counter's ``increase[1h]`` at hourly steps, token means from the token counters
over the window, and token quantiles from the per-request token histograms (``llm_gateway_request_*_tokens``):
``histogram_quantile`` over their ``increase`` across the window, summed by ``le`` and the stream labels. Those are
estimates interpolated inside buckets that are powers of 2 (16 .. 128k tokens), so a quantile is known to within
its bucket, a factor 2; ``max`` is the top of the highest bucket with a request. A stream without the histograms
(an exporter older than them) keeps its demand file's quantile shape, scaled to the measured mean, and the output
says which streams did. The trace store: ``sql/measured_*.sql`` over the ``requests`` table, real token quantiles
of the requests. The PromQL is below (``PROMQL_*``); counter names are the review's (``RAW``, checked against the
catalog), histogram names and label names the catalog's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import numpy as np

from goodput.contracts.catalog import GATEWAY_HIST_LABELS, by_name
from goodput.foundation import promapi
from goodput.foundation.errors import ConfigError
from goodput.plan.demand import Demand, Stream, token_mix
from goodput.review.forecast import forecast_peaks
from goodput.review.queries import RAW

__all__ = ["Measurement", "MeasuredStream", "apply_measurement", "measure", "parse_source", "parse_until",
           "render_measurement", "summarize"]

WEEK_S = 7 * 86400
HOUR_S = 3600
QUANTILES = ("p50", "p90", "p95", "p99")
FLAG = "--demand-from"
MAX_WEEKS = 52  # hourly points of one range query stay under promapi.MAX_POINTS (a wider step would skip hours)

Key = tuple[str, str, str]  # deployment, scene (Prometheus: route), tier

# The Prometheus source's queries. {by}: the gateway histogram labels (a stream); {window}: the measured weeks.
PROMQL_HOURLY = "sum by ({by}) (increase({requests}[1h])) / 3600"  # req/s of the hour ending at each step
PROMQL_TOTAL = "sum by ({by}) (increase({name}{match}[{window}]))"
PROMQL_TOKEN_QUANTILE = "histogram_quantile({level}, sum by (le, {by}) (increase({name}_bucket[{window}])))"
TOKEN_HISTOGRAMS = {"input_tokens": by_name("llm_gateway_request_input_tokens").name,
                    "output_tokens": by_name("llm_gateway_request_output_tokens").name}
TOKEN_LEVELS = {**{q: int(q[1:]) / 100 for q in QUANTILES}, "max": 1.0}  # 1.0: the highest bucket's top
# where a stream's token quantiles came from (the trace store's requests, the token histograms, or none: the demand
# file's shape, scaled to the measured means), as the output says it in its first line and in its table
TOKENS_SAID = {"requests": "token quantiles measured",
               "histogram": "token quantiles estimated from the token histograms (within a bucket, a factor 2)",
               "none": "token means measured; quantiles keep the demand file's shape, scaled to them"}
TOKENS_SHORT = {"requests": "requests", "histogram": "histogram", "none": "file's shape"}


@dataclass(frozen=True)
class MeasuredStream:
    deployment: str
    scene: str
    tier: str
    peak_rps: float
    peak_hour: str  # ISO start of the peak hour, UTC
    weekly_peaks: tuple[float | None, ...]  # peak hourly req/s per week of the window, oldest first; None: no data
    input_mean: float | None
    output_mean: float | None
    input_tokens: dict[str, float] | None = None  # quantiles, where the source has them
    output_tokens: dict[str, float] | None = None
    token_quantiles: str = "none"  # where they came from: a key of TOKENS_SAID


@dataclass(frozen=True)
class Measurement:
    source: str  # what --demand-from named
    start: float  # unix seconds, the window [start, end)
    end: float
    weeks: int
    streams: tuple[MeasuredStream, ...]
    growth_per_week: dict[str, float | None]  # per deployment: the weekly growth its hourly demand shows

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "start": _iso(self.start), "end": _iso(self.end), "weeks": self.weeks,
                "growth_per_week": self.growth_per_week, "streams": [asdict(s) for s in self.streams]}


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def parse_source(text: str) -> tuple[str, str]:
    """``prometheus:URL`` or ``duckdb:FILE`` -> (kind, where)."""
    kind, _, where = text.partition(":")
    if kind == "prometheus" and where.startswith(("http://", "https://")):
        return kind, where.rstrip("/")
    if kind == "duckdb" and where:
        return kind, where
    raise ConfigError(FLAG, text, "expected prometheus:http(s)://HOST:PORT or duckdb:TRACES.duckdb")


def parse_until(text: str | None) -> float:
    """The window's end, floored to the hour: an ISO time (UTC unless it says otherwise), or now."""
    if text is None:
        t = datetime.now(UTC).timestamp()
    else:
        try:
            d = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError("--until", text, "expected an ISO time like 2026-11-30T00:00:00Z") from None
        t = (d if d.tzinfo else d.replace(tzinfo=UTC)).timestamp()
    return math.floor(t / HOUR_S) * HOUR_S


def _weekly_peaks(times: np.ndarray, rps: np.ndarray, start: float, weeks: int) -> tuple[float | None, ...]:
    week = ((times - HOUR_S - start) // WEEK_S).astype(int)
    return tuple(float(rps[week == w].max()) if (week == w).any() else None for w in range(weeks))


def summarize(source: str, hourly: dict[Key, tuple[np.ndarray, np.ndarray]], tokens: dict[Key, dict[str, Any]],
              start: float, end: float, weeks: int) -> Measurement:
    """Peaks, per-week peaks and growth from hourly req/s per stream (``times`` are hour ends). ``tokens`` per stream:
    ``input_mean``, ``output_mean`` and, where known, ``input_tokens`` / ``output_tokens`` quantiles and
    ``token_quantiles`` (where they came from)."""
    streams = []
    by_dep: dict[str, dict[float, float]] = {}  # per deployment, req/s per hour end
    for key in sorted(hourly):
        t, v = hourly[key]
        ok = np.isfinite(v) & (t > start) & (t <= end)
        t, v = t[ok], v[ok]
        if not len(t) or v.max() <= 0:
            continue
        i = int(np.argmax(v))
        tok = tokens.get(key, {})
        streams.append(MeasuredStream(*key, float(v[i]), _iso(t[i] - HOUR_S), _weekly_peaks(t, v, start, weeks),
                                      tok.get("input_mean"), tok.get("output_mean"), tok.get("input_tokens"),
                                      tok.get("output_tokens"), tok.get("token_quantiles", "none")))
        total = by_dep.setdefault(key[0], {})
        for ti, vi in zip(t.tolist(), v.tolist(), strict=True):
            total[ti] = total.get(ti, 0.0) + vi
    growth = {}
    for dep, total in by_dep.items():  # the review's trend fit (hour-of-week levels); None under a week of hours
        fit = forecast_peaks(np.array(list(total)), np.array(list(total.values())), start)
        growth[dep] = None if fit is None else round(fit.growth_per_week, 4)
    return Measurement(source, start, end, weeks, tuple(streams), growth)


def _from_prometheus(server: promapi.Endpoint, start: float, end: float, weeks: int) -> Measurement:
    by = ", ".join(GATEWAY_HIST_LABELS)
    window = f"{weeks * 7}d"

    def total(name: str, match: str = "") -> str:
        return PROMQL_TOTAL.format(by=by, name=name, match=match, window=window)
    queries = [
        promapi.Query("hourly", PROMQL_HOURLY.format(by=by, requests=RAW["requests"]), start + HOUR_S, end, HOUR_S),
        promapi.Query("input", total(RAW["input"]), end, end),
        promapi.Query("output", total(RAW["output"]), end, end),
        promapi.Query("admitted", total(RAW["requests"], '{outcome!="rejected"}'), end, end),
        promapi.Query("ok", total(RAW["requests"], '{outcome="ok"}'), end, end),
        *(promapi.Query(f"{side} {q}", PROMQL_TOKEN_QUANTILE.format(level=level, by=by, name=name, window=window),
                        end, end)
          for side, name in TOKEN_HISTOGRAMS.items() for q, level in TOKEN_LEVELS.items()),
    ]
    url = server.url
    try:
        got = promapi.run_queries(server, queries)
    except promapi.PromError as e:
        raise promapi.config_error(url, e, FLAG) from None

    def key(s: promapi.Series) -> Key:
        dep, tier, route = (s.labels.get(k, "unknown") for k in GATEWAY_HIST_LABELS)
        return dep, route, tier

    hourly = {key(s): (np.array(s.times), np.array(s.values)) for s in got["hourly"]}
    sums = {name: {key(s): s.values[0] for s in got[name]} for name in ("input", "output", "admitted", "ok")}

    def per_request(tokens: str, requests: str, k: Key) -> float | None:  # as the trace store: output of ok ones
        n = sums[requests].get(k, 0.0)
        return sums[tokens].get(k, 0.0) / n if n > 0 else None
    tokens: dict[Key, dict[str, Any]] = {
        k: {"input_mean": per_request("input", "admitted", k), "output_mean": per_request("output", "ok", k)}
        for k in hourly}
    for side in TOKEN_HISTOGRAMS:  # a stream without the histogram has no series here; one without a request, NaN
        levels = {q: {key(s): s.values[0] for s in got[f"{side} {q}"]} for q in TOKEN_LEVELS}
        for k, t in tokens.items():
            est = [levels[q].get(k, math.nan) for q in TOKEN_LEVELS]
            if all(math.isfinite(v) for v in est):  # a token count under 1 is 1, as the trace store's
                t[side] = {q: max(1.0, v) for q, v in zip(TOKEN_LEVELS, est, strict=True)}
                t["token_quantiles"] = "histogram"
    return summarize(f"prometheus:{url}", hourly, tokens, start, end, weeks)


def _sql(name: str) -> str:
    return resources.files("goodput.plan").joinpath("sql", f"{name}.sql").read_text()


def _from_duckdb(path: str, start: float, end: float, weeks: int) -> Measurement:
    from goodput.analyzer.store import connect  # DuckDB only for this source

    con = connect(path, read_only=True)
    params = {"start": datetime.fromtimestamp(start, UTC), "end": datetime.fromtimestamp(end, UTC)}
    try:
        rows = con.execute(_sql("measured_hourly"), params).fetchall()
        tok_rows = con.execute(_sql("measured_tokens"), params).fetchall()
    finally:
        con.close()
    grouped: dict[Key, list[tuple[float, float]]] = {}
    for dep, scene, tier, hour_end, rps in rows:
        grouped.setdefault((dep, scene, tier), []).append((float(hour_end), float(rps)))
    hourly = {k: (np.array([t for t, _ in v]), np.array([r for _, r in v])) for k, v in grouped.items()}
    tokens = {}
    for dep, scene, tier, iq, imax, imean, oq, omax, omean in tok_rows:
        t: dict[str, Any] = {"input_mean": imean, "output_mean": omean}
        if iq is not None:
            t["input_tokens"] = {**dict(zip(QUANTILES, map(float, iq), strict=True)), "max": float(imax)}
        if oq is not None:
            t["output_tokens"] = {**dict(zip(QUANTILES, map(float, oq), strict=True)), "max": float(omax)}
        if iq is not None or oq is not None:
            t["token_quantiles"] = "requests"
        tokens[(dep, scene, tier)] = t
    return summarize(f"duckdb:{path}", hourly, tokens, start, end, weeks)


def measure(source: str, weeks: int, until: str | None = None,
            server: Callable[[str], promapi.Endpoint] = promapi.Endpoint) -> Measurement:
    """The demand ``source`` (``prometheus:URL`` / ``duckdb:FILE``) shows over the ``weeks`` before ``until``; a
    window without requests is one ConfigError. ``server``: the ``Endpoint`` of a ``prometheus:`` URL (its tenant
    and credentials, ``promendpoint.from_args``)."""
    kind, where = parse_source(source)
    if weeks > MAX_WEEKS:
        raise ConfigError("--weeks", str(weeks), f"at most {MAX_WEEKS}: the peaks are of hours, one query a stream")
    end = parse_until(until)
    start = end - weeks * WEEK_S
    m = (_from_prometheus(server(where), start, end, weeks) if kind == "prometheus"
         else _from_duckdb(where, start, end, weeks))
    if not m.streams:
        raise ConfigError(source, "--weeks", f"no requests between {_iso(start)} and {_iso(end)}")
    return m


def _stream(src: str, s: Stream, m: MeasuredStream) -> Stream:
    """``s`` with the measured peak and token mix; a token side the source has no quantiles for keeps the demand
    file's shape, scaled to the measured mean."""
    def side(name: str, quantiles: dict[str, float] | None, mean: float | None, was: dict[str, float],
             was_mean: float) -> tuple[dict[str, float], float]:
        if quantiles is not None:
            return token_mix(src, f"measured {name}", {k: round(v, 1) for k, v in quantiles.items()})
        if not mean:
            return was, was_mean
        return {k: round(max(1.0, v * mean / was_mean), 1) for k, v in was.items()}, float(mean)
    iq, imean = side("input_tokens", m.input_tokens, m.input_mean, s.input_tokens, s.input_mean)
    oq, omean = side("output_tokens", m.output_tokens, m.output_mean, s.output_tokens, s.output_mean)
    return replace(s, peak_rps=m.peak_rps, input_tokens=iq, output_tokens=oq, input_mean=imean, output_mean=omean)


def apply_measurement(template: Demand, m: Measurement, growth: float | None) -> tuple[Demand, dict[str, Any]]:
    """The template with every stream it shares with the measurement replaced; the record of what came from where."""
    measured = {(s.deployment, s.scene, s.tier): s for s in m.streams}
    used, kept, deps = set(), [], []
    for d in template.deployments:
        streams = []
        for s in d.streams:
            k = (d.name, s.scene, s.tier)
            if k in measured:
                used.add(k)
                streams.append(_stream(template.source, s, measured[k]))
            else:
                kept.append("/".join(k))
                streams.append(s)
        deps.append(replace(d, streams=tuple(streams)))
    if not used:
        have = ", ".join("/".join(k) for k in sorted(measured))
        raise ConfigError(template.source, "deployments", f"no stream (deployment/scene/tier) was measured by "
                                                          f"{m.source}; it measured {have}")
    record = {**m.as_dict(), "growth_applied": growth if growth is not None else template.growth,
              "growth_from": "--growth" if growth is not None else template.source,
              "from_template": kept, "not_in_template": ["/".join(k) for k in sorted(set(measured) - used)]}
    return replace(template, growth=record["growth_applied"], deployments=tuple(deps)), record


def render_measurement(record: dict[str, Any]) -> str:
    """The table lines: which figures were measured, over which window, per-week peaks, and growth shown vs applied."""
    from goodput.plan.tables import table

    weeks = record["weeks"]
    rows = []
    for s in record["streams"]:
        row = {"stream": f"{s['deployment']}/{s['scene']}/{s['tier']}", "peak req/s": round(s["peak_rps"], 2),
               "peak hour": s["peak_hour"], "in mean": s["input_mean"] and round(s["input_mean"]),
               "out mean": s["output_mean"] and round(s["output_mean"])}
        row.update({f"wk{i + 1}": p and round(p, 2) for i, p in enumerate(s["weekly_peaks"])})
        row["token quantiles"] = TOKENS_SHORT[s["token_quantiles"]]
        rows.append(row)
    cols = ["stream", "peak req/s", "peak hour", *[f"wk{i + 1}" for i in range(weeks)], "in mean", "out mean",
            "token quantiles"]
    kinds = {s["token_quantiles"] for s in record["streams"]}
    tokens = TOKENS_SAID[kinds.pop()] if len(kinds) == 1 else "token quantiles where the source has them"
    out = [f"Measured demand from {record['source']}, {record['start']} to {record['end']} ({weeks} weeks): peak "
           f"hourly req/s and {tokens}; SLOs, headroom and candidates from the demand file.", table(rows, cols)]
    without = [f"{s['deployment']}/{s['scene']}/{s['tier']}" for s in record["streams"] if s["token_quantiles"] == "none"]
    if without and record["source"].startswith("prometheus:"):
        out.append(f"no per-request token histogram ({', '.join(TOKEN_HISTOGRAMS.values())}: an exporter older than "
                   f"them), so the demand file's quantile shape scaled to the measured means: {', '.join(without)}")
    shown = ", ".join(f"{d} {'n/a' if g is None else f'{100 * g:+.1f} %/week'}"
                      for d, g in record["growth_per_week"].items())
    out.append(f"growth applied x{record['growth_applied']:g} (from {record['growth_from']}); the data shows {shown}")
    if record["from_template"]:
        out.append(f"not measured, figures from the demand file: {', '.join(record['from_template'])}")
    if record["not_in_template"]:
        out.append(f"measured but not in the demand file (not planned): {', '.join(record['not_in_template'])}")
    return "\n".join(out)
