"""The demo's incident as raw exporter series, minute by minute: a backlog builds on one replica, three replicas
are added, the backlog drains while new requests wait 0.02-0.06 s.

``python -m tests.monitoring.drain_series`` writes rules/tests/drain.test.yaml from it (the promtool cases: the page
during the build-up, nothing once the added replicas serve); tests/monitoring/test_rules.py checks the file is fresh.
The numbers are the demo's (goodput/demo/incident.py): 1.8 requests/s, a release at minute 8 that doubles the prompt
(1,000 -> 2,000 tokens; 200 out), one replica that then serves 1.4 requests/s, three more ready at minute 25 that take
every new request (least-outstanding routing), the old replica draining its backlog FIFO at 1.4 requests/s.
"""

from __future__ import annotations

from dataclasses import dataclass

from goodput.contracts.catalog import GATEWAY_BUCKETS
from goodput.foundation.histogram import le_label
from tests.conftest import REPO

RELEASE, READY, END = 8, 25, 60  # minutes
ARRIVALS = 108  # per minute (1.8/s)
SERVED = 84  # per minute by the old replica once it is behind (1.4/s)
IN_BEFORE, IN_AFTER, OUT = 1000, 2000, 200  # tokens per request
NEW_WAITS = (0.02, 0.03, 0.04, 0.06)  # seconds, a new request's queue wait once the added replicas serve
REPLICA_GOODPUT = 1300  # tokens/s per replica, the capacity plan's
DEP = 'deployment="rag",tier="P1",route="rag"'
COUNTER = 'model="m",deployment="rag",tenant="a",tier="P1",route="rag"'


@dataclass
class Minute:
    arrived: int = 0
    completed: int = 0  # ok, each scheduled in the same minute (minute resolution)
    bad: int = 0  # of those, TTFT over the 2 s SLO (they waited in the backlog)
    missed_early: int = 0  # TTFT misses known at once: arrivals that queue behind the backlog
    waits: tuple[float, ...] = ()  # queue wait of each request scheduled this minute
    input_tokens: int = 0
    waiting: int = 0  # the old replica's queue at the minute's end
    oldest_age: float = 0.0
    available: int = 1


def timeline() -> list[Minute]:
    out, backlog, head_lag = [], 0, 0.0  # head_lag in minutes
    for t in range(END + 1):
        m = Minute(arrived=ARRIVALS if t else 0, available=4 if t >= READY else 1)
        if t == 0:
            pass
        elif t <= RELEASE:
            m.completed, m.waits, m.input_tokens = ARRIVALS, NEW_WAITS * (ARRIVALS // 4), ARRIVALS * IN_BEFORE
            m.oldest_age = 0.03
        else:
            # FIFO on the old replica: what it schedules now arrived head_lag minutes ago (a lag that grows 1 - 60/108
            # a minute while it is behind, whether new requests still join it or not)
            old = SERVED
            if t < READY:
                backlog += ARRIVALS - SERVED
                m.missed_early = ARRIVALS
            else:
                old = min(SERVED, backlog)
                backlog -= old
            head_lag = head_lag + (ARRIVALS - SERVED) / ARRIVALS if old else 0.0
            new = ARRIVALS if t >= READY else 0
            m.completed, m.bad = old + new, old
            m.waits = (round(head_lag * 60, 3),) * old + NEW_WAITS * (new // 4)
            m.input_tokens = (old + new) * IN_AFTER
            m.oldest_age = round(head_lag * 60, 3) if backlog else 0.06
        m.waiting = backlog
        out.append(m)
    return out


def _counter(per_minute: list[float]) -> str:
    """Cumulative values, one a minute, in promtool's notation (runs of a constant step folded)."""
    total, values = 0.0, []
    for v in per_minute:
        total += v
        values.append(total)
    return _gauge(values)


def _num(v: float) -> str:
    return str(round(v)) if abs(v - round(v)) < 1e-9 else f"{v:.3f}"


def _gauge(values: list[float]) -> str:
    """Values, one a minute, in promtool's notation: each run of a constant step as ``start+stepxN``."""
    parts, i = [], 0
    while i < len(values):
        j = i
        step = values[i + 1] - values[i] if i + 1 < len(values) else 0.0
        while j + 1 < len(values) and abs(values[j + 1] - values[j] - step) < 0.01:
            j += 1
        parts.append(_num(values[i]) + (f"{'+' if step >= 0 else '-'}{_num(abs(step))}x{j - i}" if j > i else ""))
        i = j + 1
    return " ".join(parts)


def input_series() -> list[tuple[str, str]]:
    tl = timeline()
    s: list[tuple[str, str]] = [
        (f"llm_gateway_requests_arrived_total{{{COUNTER}}}", _counter([m.arrived for m in tl])),
        (f'llm_gateway_requests_total{{{COUNTER},outcome="ok"}}', _counter([m.completed for m in tl])),
        (f"llm_gateway_input_tokens_total{{{COUNTER}}}", _counter([m.input_tokens for m in tl])),
        (f"llm_gateway_output_tokens_total{{{COUNTER}}}", _counter([m.completed * OUT for m in tl])),
        (f'llm_gateway_time_to_first_token_seconds_bucket{{{DEP},le="2.0"}}',
         _counter([m.completed - m.bad for m in tl])),
        (f"llm_gateway_time_to_first_token_seconds_count{{{DEP}}}", _counter([m.completed for m in tl])),
        (f'llm_gateway_ttft_missed_total{{{DEP},le="2.0"}}', _counter([m.missed_early for m in tl])),
        (f"llm_gateway_oldest_queued_age_seconds{{{DEP}}}", _gauge([m.oldest_age for m in tl])),
        ('llm_requests_waiting{model="m",deployment="rag",replica="rag-0"}', _gauge([m.waiting for m in tl])),
        ('llm_deployment_replicas{deployment="rag",state="available"}', _gauge([m.available for m in tl])),
        ('llm_capacity_replica_goodput_tokens_per_second{deployment="rag"}', f"{REPLICA_GOODPUT}x{END}"),
    ]
    for b in (*GATEWAY_BUCKETS, float("inf")):
        le = "+Inf" if b == float("inf") else le_label(b)
        s.append((f'llm_gateway_queue_wait_seconds_bucket{{{DEP},le="{le}"}}',
                  _counter([sum(1 for w in m.waits if w <= b) for m in tl])))
    s.append((f"llm_gateway_queue_wait_seconds_count{{{DEP}}}", _counter([len(m.waits) for m in tl])))
    return s


PATH = REPO / "rules" / "tests" / "drain.test.yaml"


def _silent(alert: str, at: int) -> str:
    return f"      - {{eval_time: {at}m, alertname: {alert}}}\n"


def _firing(alert: str, at: int, labels: dict[str, str]) -> str:
    """The alert fires at ``at``, read from ALERTS: its annotations carry a value that depends on whether promtool
    evaluated the recording group before the alert group in that step (their order is not defined)."""
    sel = ",".join(f'{k}=\\"{v}\\"' for k, v in {"alertname": alert, "alertstate": "firing", **labels}.items())
    return (f"      - {{expr: 'ALERTS{{alertname=\"{alert}\"}}', eval_time: {at}m, "
            f"exp_samples: [{{labels: \"ALERTS{{{sel}}}\", value: 1}}]}}\n")


def render() -> str:
    """rules/tests/drain.test.yaml."""
    series = "".join(f"      - {{series: '{n}', values: '{v}'}}\n" for n, v in input_series())
    page = {"severity": "page", "deployment": "rag", "tier": "P1"}
    burn = {"severity": "page", "sli": "ttft", "long_window": "6h", "short_window": "30m", "deployment": "rag",
            "tier": "P1", "route": "rag"}
    during = _firing("LLMQueueWaitRisingReplicasShort", 16, page) + _firing("LLMSLOBurnRateFast", 20, burn)
    after = "".join(_silent("LLMQueueWaitRisingReplicasShort", t) for t in range(READY + 1, END, 3)) + "".join(
        _silent("LLMSLOBurnRateFast", t) for t in range(READY + 5, END, 3))
    # the arrivals' demand while the backlog drains: 1.8/s x 2,200 tokens / 1,300 per replica x 1.2 -> 4 replicas
    required = "".join(
        f"      - {{expr: deployment:llm_replicas_required:ceil, eval_time: {t}m, exp_samples: "
        f"[{{labels: 'deployment:llm_replicas_required:ceil{{deployment=\"rag\"}}', value: 4}}]}}\n"
        for t in range(READY, READY + 8))
    return ("# Written by `python -m tests.monitoring.drain_series` (the demo's incident as raw exporter series): edit that\n"
            f"# and rerun. The pages fire while the backlog builds; once three added replicas serve (minute {READY}) and new\n"
            f"# requests wait 0.02-0.06 s, the queue page resolves at once, the burn-rate page within its 5m reset\n"
            f"# window, nothing pages while the old replica drains its backlog, and the replicas required stay 4.\n"
            f"rule_files: [../llm.rules.yaml, ../slo.rules.yaml, ../alerts.rules.yaml]\n"
            f"evaluation_interval: 1m\ntests:\n"
            f"  - name: the demo's incident pages while the backlog builds and not while it drains after the fix\n"
            f"    interval: 1m\n    input_series:\n{series}"
            f"    alert_rule_test:\n{after}    promql_expr_test:\n{during}{required}")


if __name__ == "__main__":
    PATH.write_text(render())
    print(f"wrote {PATH.relative_to(REPO)}")
