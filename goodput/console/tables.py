"""The tables the pages show, built from what the sources return: pure functions, no Streamlit, so the demo's
headless check and the tests read them exactly as the pages do."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from goodput.analyzer.regressions import BACKLOG, LENGTH_SHIFT, RATE_SHIFT
from goodput.console.prom import Sample, Series
from goodput.console.runbooks import for_alert

__all__ = ["CIRCUIT_WORDS", "alert_rows", "circuit_breakers", "circuit_timeline", "fallback_paths", "gateway_tables",
           "ladder_state", "live_table", "samples_frame", "shift_table", "silence_rows", "skew", "status", "trace_table",
           "verdict_table"]

# how each live query folds onto a (deployment, tier) row: min attainment and max burn over the routes
FOLD = {"ttft_attainment": "min", "tpot_attainment": "min", "ttft_burn_1h": "max", "tpot_burn_1h": "max"}
VERDICT_COLUMNS = ["deployment", "tier", "metric", "time", "change", "before_p95_s", "after_p95_s", "segment", "cause",
                   "release", "blamed", "direction"]
ADDED_AFTER = pd.Timedelta(minutes=1)  # a replica first seen this long after its deployment's first: added
BUDGET = 1.0  # a burn rate above this spends the error budget faster than the objective earns it
# a breaker's state as the Routing page writes it (a trip is what on call looks for), and its place in the table
CIRCUIT_WORDS = {"open": "OPEN", "half_open": "HALF-OPEN", "closed": "closed"}
CIRCUIT_ORDER = {"open": -2, "half_open": -1}


def gateway_tables(decisions: pd.DataFrame, rejections: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The gateway's decisions (tenant, tier, decision, requests) and its rejections (tenant, tier, reason,
    requests), each row with its ``share`` of its tenant and tier's requests (every request gets one decision)."""
    keys = ["tenant", "tier"]
    total = decisions.groupby(keys, as_index=False)["requests"].sum().rename(columns={"requests": "_all"})
    out = []
    for df in (decisions, rejections):
        df = df[df["requests"] > 0].merge(total, on=keys, how="left")
        df["share"] = df["requests"] / df["_all"]
        out.append(df.drop(columns="_all").sort_values([*keys, "requests"], ascending=[True, True, False],
                                                       ignore_index=True))
    return out[0], out[1]


def ladder_state(samples: list[Sample]) -> pd.DataFrame:
    """Each deployment's overload ladder step now (``llm_gateway_overload_step``: its name and its place in the
    ladder, 0 none), the furthest stepped in first."""
    df = samples_frame(samples, ("deployment", "step"), "step_index")
    return df.sort_values(["step_index", "deployment"], ascending=[False, True], ignore_index=True)


def circuit_timeline(series: list[Series]) -> pd.DataFrame:
    """(deployment, time, state): each primary's breaker at each point of ``llm_gateway_circuit_state`` over a
    range (the state whose series reads 1 there), oldest first."""
    rows = [(s.labels.get("deployment", ""), t, s.labels.get("state", "")) for s in series
            for t, v in zip(s.times, s.values, strict=True) if v == 1.0]
    df = pd.DataFrame(rows, columns=["deployment", "time", "state"])
    df["time"] = pd.to_datetime(df["time"], unit="s", utc=True)
    return df.sort_values(["deployment", "time"], ignore_index=True)


def circuit_breakers(now: list[Sample], timeline: pd.DataFrame) -> pd.DataFrame:
    """Each primary's circuit breaker now (``breaker``: OPEN, HALF-OPEN, closed), since when by ``timeline`` (the
    first point of its last state; NaT when it never changed there) and how many times it opened there (a point
    open after one that was not), the open ones first."""
    rows = []
    for s in now:
        if s.value != 1.0:
            continue
        dep, state = s.labels.get("deployment", ""), s.labels.get("state", "")
        seen = timeline[timeline["deployment"] == dep]
        states, times = seen["state"].tolist(), seen["time"].tolist()
        changes = [k for k in range(1, len(states)) if states[k] != states[k - 1]]
        since = times[changes[-1]] if changes and states[-1] == state else pd.NaT
        rows.append({"deployment": dep, "breaker": CIRCUIT_WORDS.get(state, state), "since": since,
                     "opened": sum(states[k] == "open" for k in changes), "_order": CIRCUIT_ORDER.get(state, 0)})
    df = pd.DataFrame(rows, columns=["deployment", "breaker", "since", "opened", "_order"])
    df["since"] = pd.to_datetime(df["since"], utc=True)
    return df.sort_values(["_order", "deployment"], ignore_index=True).drop(columns="_order")


def fallback_paths(samples: list[Sample]) -> pd.DataFrame:
    """The fallback paths that carried requests (primary -> backup, reason, requests per second), busiest first."""
    df = samples_frame(samples, ("fallback_from", "deployment", "reason"), "requests_per_s")
    df = df[df["requests_per_s"] > 0]
    df.insert(0, "path", df["fallback_from"] + " -> " + df["deployment"])
    return df.sort_values(["requests_per_s", "path"], ascending=[False, True], ignore_index=True)


def samples_frame(samples: list[Sample], labels: tuple[str, ...], value: str) -> pd.DataFrame:
    """Instant samples as a frame: one column per label (missing: empty) and ``value``."""
    return pd.DataFrame([{**{k: s.labels.get(k, "") for k in labels}, value: s.value} for s in samples],
                        columns=[*labels, value])


def live_table(results: dict[str, list[Sample]]) -> pd.DataFrame:
    """One row per (deployment, tier); per-deployment figures repeat on each of its tiers."""
    rows: dict[tuple[str, str], dict] = {}
    per_dep: dict[str, dict] = {}
    for key, samples in results.items():
        for s in samples:
            dep, tier = s.labels.get("deployment"), s.labels.get("tier")
            if dep is None or math.isnan(s.value):
                continue
            if tier is None:
                per_dep.setdefault(dep, {})[key] = s.value
                continue
            row = rows.setdefault((dep, tier), {})
            fold = FOLD.get(key)
            row[key] = s.value if key not in row or fold is None else (min if fold == "min" else max)(row[key], s.value)
    for dep in per_dep:
        if not any(d == dep for d, _ in rows):
            rows[(dep, "")] = {}
    out = [{"deployment": d, "tier": t, **r, **per_dep.get(d, {})} for (d, t), r in sorted(rows.items())]
    cols = ["deployment", "tier", *results]
    return pd.DataFrame(out, columns=cols)


def alert_rows(alerts: list[dict], deployment: str | None, tier: str | None) -> pd.DataFrame:
    rows = []
    for a in alerts:
        lab, ann = a.get("labels", {}), a.get("annotations", {})
        if deployment and lab.get("deployment") not in (None, deployment) or tier and lab.get("tier") not in (None, tier):
            continue
        name = lab.get("alertname", "")
        rows.append({"alert": name, "severity": lab.get("severity", ""),
                     "deployment": lab.get("deployment", ""), "tier": lab.get("tier", ""),
                     "since": str(a.get("startsAt", ""))[:19].replace("T", " "), "summary": ann.get("summary", ""),
                     "runbook": for_alert(name, ann.get("runbook_url", ""))})
    return pd.DataFrame(rows, columns=["alert", "severity", "deployment", "tier", "since", "summary", "runbook"])


def silence_rows(silences: list[dict]) -> pd.DataFrame:
    """Alertmanager's silences, newest first: state, what they match, when, by whom, why."""
    def matcher(m: dict) -> str:
        op = ("=" if m.get("isEqual", True) else "!=") if not m.get("isRegex") else ("=~" if m.get("isEqual", True) else "!~")
        return f"{m.get('name', '')}{op}{m.get('value', '')}"

    rows = [{"state": s["status"].get("state", ""), "matchers": ", ".join(matcher(m) for m in s["matchers"]),
             "starts": str(s.get("startsAt", ""))[:19].replace("T", " "),
             "ends": str(s.get("endsAt", ""))[:19].replace("T", " "),
             "created_by": str(s.get("createdBy", "")), "comment": str(s.get("comment", ""))} for s in silences]
    cols = ["state", "matchers", "starts", "ends", "created_by", "comment"]
    return pd.DataFrame(rows, columns=cols).sort_values("starts", ascending=False, kind="stable")


def status(table: pd.DataFrame, alerts: pd.DataFrame | None) -> list[str]:
    """Per live row: "paging" (a page fires for its deployment and tier), "burning" (either SLI's 1 h burn above the
    budget), "met", or "no data" (no attainment yet)."""
    pages = set() if alerts is None else {(d, t) for d, t, sev in zip(alerts["deployment"], alerts["tier"],
                                                                       alerts["severity"], strict=True) if sev == "page"}
    out = []
    for r in table.to_dict("records"):
        burn = [r.get(k) for k in ("ttft_burn_1h", "tpot_burn_1h")]
        met = [r.get(k) for k in ("ttft_attainment", "tpot_attainment")]
        if (r["deployment"], r["tier"]) in pages or (r["deployment"], "") in pages:
            out.append("paging")
        elif any(b is not None and b > BUDGET for b in burn):
            out.append("burning")
        elif any(m is not None and not math.isnan(m) for m in met):
            out.append("met")
        else:
            out.append("no data")
    return out


def trace_table(df: pd.DataFrame, seconds: float) -> pd.DataFrame:
    """The traces' per (deployment, tier) figures: attainment shares and tokens per second within the SLO."""
    out = df[["deployment", "tier", "requests"]].copy()
    with_slo = df["with_slo"].where(df["with_slo"] > 0)
    out["TTFT attainment"] = df["ttft_met"] / with_slo
    out["TPOT attainment"] = df["tpot_met"] / with_slo
    out["p95 TTFT s"] = df["ttft_p95_s"]
    out["p95 queue wait s"] = df["queue_p95_s"]
    out["demand tok/s"] = df["tokens"] / seconds
    out["goodput tok/s"] = df["good_tokens"].fillna(0) / seconds
    out["preemptions"] = df["preemptions"]
    return out


def verdict_table(found: list[dict], tier: str | None) -> pd.DataFrame:
    """The analyzer's rows; ``direction`` is theirs ("regression" / "improvement"), "scale" for a scale event's,
    "backlog" for a queue still building after a blamed release (``_backlog``), '' where the analyzer gives none."""
    rows = [r for r in found if not tier or r["tier"] == tier]
    out = []
    for r in rows:
        row = {c: r.get(c) for c in VERDICT_COLUMNS}
        kind = str(r.get("release") or "").split(" ", 1)[0]
        row["direction"] = "scale" if kind == "scale" else str(r.get("direction") or "")
        out.append(row)
    return pd.DataFrame(_backlog(out), columns=VERDICT_COLUMNS)


def _backlog(rows: list[dict]) -> list[dict]:
    """The analyzer's backlog rows (a queue still building after a blamed release: regressions.BACKLOG) in amber."""
    for r in rows:
        if r["direction"] == "regression" and str(r["cause"] or "").startswith(BACKLOG.split(":", 1)[0] + ":"):
            r["direction"] = "backlog"
    return rows


def shift_table(df: pd.DataFrame, seconds: float | None = None) -> pd.DataFrame:
    """Before, now, change and whether it counts as a shift, per measure; ``seconds``: each period's length (None:
    from its first to its last request)."""
    by = {p: r for p, r in zip(df["period"], df.to_dict("records"), strict=True)}
    b, n = by.get("before", {}), by.get("now", {})
    rate = lambda r: (r.get("requests") or 0) / max(seconds or r.get("seconds") or 0, 1.0)  # noqa: E731
    rows = [("arrival rate (req/s)", rate(b) if b else None, rate(n) if n else None, RATE_SHIFT)]
    for col in ("input_mean", "input_p50", "input_p95", "output_mean", "output_p50", "output_p95"):
        rows.append((col.replace("_", " ") + " (tokens)", b.get(col), n.get(col), LENGTH_SHIFT))
    out = []
    for name, before, now, limit in rows:
        change = now / before - 1 if before and now is not None else None
        out.append({"measure": name, "before": before, "now": now, "change": change,
                    "shift": change is not None and abs(change) >= limit})
    return pd.DataFrame(out)


def skew(df: pd.DataFrame, scale_events: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Per deployment: replicas, max/min of requests and of p95 queue wait, share retried. A replica first seen over
    ``ADDED_AFTER`` after its deployment's first request of the range was added (a scale-out): it started empty
    while the old ones held the backlog, so requests and queue waits are compared within the old and within the
    added, never across; ``scale`` names the event (``scale_events``' line for the deployment, from the releases
    file, else the replicas added and when) and ``scale_note`` says why it is no skew."""
    rows = []
    for dep, g in df.groupby("deployment", sort=True):
        added = g["first_seen"] > g["first_seen"].min() + ADDED_AFTER
        parts = [p for p in (g[~added], g[added]) if len(p) > 1]
        waits = [p["queue_p95_s"].dropna() for p in parts]
        scale = note = ""
        if added.any():
            event = (scale_events or {}).get(dep) or (f"{int(added.sum())} replicas first seen from "
                                                      f"{g.loc[added, 'first_seen'].min():%H:%M}")
            scale = f"scale-out ({event})"
            note = (f"{scale}: the added replicas started empty while the old held the backlog (p95 queue wait old "
                    f"{g.loc[~added, 'queue_p95_s'].max():.2f} s, added {g.loc[added, 'queue_p95_s'].max():.2f} s); "
                    "max/min compared within each")
        rows.append({"deployment": dep, "replicas": len(g),
                     "requests max/min": max((p["requests"].max() / max(p["requests"].min(), 1) for p in parts),
                                             default=1.0),
                     "p95 queue wait max/min": max((q.max() / max(q.min(), 1e-3) for q in waits if len(q) > 1),
                                                   default=1.0),
                     "retried share": g["retried"].sum() / max(g["requests"].sum(), 1), "scale": scale,
                     "scale_note": note})
    return pd.DataFrame(rows)
