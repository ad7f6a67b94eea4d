"""Per-replica SLO goodput from load-test runs (goodput's own or imported GuideLLM / vLLM bench runs).

Each run measured one replica of one candidate (``CANDIDATE=RUN_DIR`` on the command line). Runs of different
candidates may differ in what a comparison is for (model, hardware, TP, engine), never in the workload
(prompt template, cache state, token lengths, arrival pattern, concurrency steps, SLO): those differences
are refused with the fields named, unless the planner allows a mixed set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from goodput.foundation.errors import ConfigError
from goodput.loadtest.compare import compare
from goodput.loadtest.results import read_run

__all__ = ["RunGoodput", "check_comparable", "load_runs", "parse_run_args", "run_goodput"]

# a candidate is allowed to differ from another in its model; the rest of the workload must match
CANDIDATE_FIELDS = ("model",)


@dataclass(frozen=True)
class RunGoodput:
    candidate: str
    run_dir: str
    goodput_tokens_per_s: float  # input + output tokens/s of requests within the SLO, at the knee
    knee_rate: float | None
    concurrency: float  # requests in flight at the knee (achieved rate x mean E2E)
    slo: str


def parse_run_args(values: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            raise ConfigError("--runs", v, "expected CANDIDATE=RUN_DIR (a candidate name of the demand file)")
        out.append((name, path))
    return out


def check_comparable(summaries: Sequence[tuple[str, dict]]) -> None:
    """``ConfigError`` naming the workload fields in which a run differs from the first one."""
    if len(summaries) < 2:
        return
    first_dir, first = summaries[0]
    for run_dir, s in summaries[1:]:
        diff = [d for d in compare(first, s)["differences"] if d["blocking"] and d["field"] not in CANDIDATE_FIELDS]
        if diff:
            fields = "; ".join(f"{d['field']} {d['a']!r} vs {d['b']!r}" for d in diff)
            raise ConfigError(run_dir, "comparability",
                              f"not comparable with {first_dir}: {fields} (pass --allow-mixed to plan anyway)")


def run_goodput(candidate: str, run_dir: str, summary: dict) -> RunGoodput:
    """The knee step's SLO goodput in input + output tokens/s (summary.json counts output tokens only)."""
    knee = summary.get("knee") or {}
    step = next((s for s in summary["steps"] if s.get("index") == knee.get("step")), None)
    if step is None:
        if not (summary.get("slo") or {}).get("terms"):
            raise ConfigError(run_dir, "slo", "the run has no SLO, so no SLO goodput to plan with (run it again "
                                              "with --slo, e.g. --slo ttft_p95=0.8s,tpot_p95=50ms)")
        raise ConfigError(run_dir, "knee", "the run has no step that met its SLO, so no SLO goodput to plan with")
    rate = step.get("achieved_rate") or 0.0
    good = step.get("goodput_requests_per_s") or 0.0
    tokens = (step.get("input_tokens_per_s") or 0.0) + (step.get("output_tokens_per_s") or 0.0)
    if rate <= 0 or good <= 0 or tokens <= 0:
        raise ConfigError(run_dir, f"steps[{step.get('index')}]", "the knee step has no completed requests or tokens")
    per_request = tokens / rate
    e2e = (step.get("e2e_s") or {}).get("mean") or 0.0
    return RunGoodput(candidate, run_dir, good * per_request, knee.get("offered_rate"), rate * e2e,
                      str((summary.get("comparability") or {}).get("slo", "")))


def load_runs(pairs: Sequence[tuple[str, str]], allow_mixed: bool) -> dict[str, RunGoodput]:
    """Goodput per candidate name; one run per candidate."""
    seen: dict[str, str] = {}
    summaries = []
    for name, path in pairs:
        if name in seen:
            raise ConfigError("--runs", name, f"two runs for one candidate: {seen[name]} and {path}")
        seen[name] = path
        summaries.append((path, read_run(path)[1]))
    if not allow_mixed:
        check_comparable(summaries)
    return {name: run_goodput(name, path, s) for (name, path), (_, s) in zip(pairs, summaries, strict=True)}
