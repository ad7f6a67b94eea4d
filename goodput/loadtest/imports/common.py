"""What every importer shares: numbers as the tools wrote them, error classes from their free text, the file's
bytes within the limit, and the step of a file that holds only the tool's aggregates."""

from __future__ import annotations

import math
import re
from http import HTTPStatus
from pathlib import Path

from goodput.foundation.errors import ConfigError
from goodput.foundation.yamlfile import decode, read_bytes
from goodput.loadtest.patterns import Step

__all__ = ["MAX_IMPORT_BYTES", "PERCENTILE_KEYS", "aggregate_step", "empty_distribution", "error_class", "http_class",
           "check_run", "num", "read_text"]

# checked before reading: parsed, a JSON report takes ~10x its size in memory (a 300 MB one took 3-4 GB)
MAX_IMPORT_BYTES = 128 * 1024 * 1024
MAX_STEPS = 256  # benchmarks / stages in one run: GuideLLM's sweep has 10, a long ladder a few dozen
MAX_COUNT = 10**12  # requests or tokens in one step or request
MAX_CLOCK_S = 1e10  # a time on a run's clock or the epoch (the year 2286): anything past it is corrupt
PERCENTILE_KEYS = ("p50", "p90", "p95", "p99")

_REASONS = {s.phrase.lower(): s.value for s in HTTPStatus}


def http_class(code: int) -> str:
    return "http_429" if code == 429 else ("http_5xx" if code >= 500 else "http_4xx")


def error_class(text: str | None) -> str:
    """goodput's error class for another tool's free-text error ("" when there is none; "other" when unrecognised).

    vLLM bench stores the HTTP reason phrase (``Too Many Requests``) or a Python traceback; GuideLLM an
    exception message that usually names the status code.
    """
    if not text:
        return ""
    low = text.strip().lower()
    code = _REASONS.get(low)
    if code is not None and code >= 400:
        return http_class(code)
    m = re.search(r"\b([45]\d\d)\b", low)
    if m:
        return http_class(int(m.group(1)))
    if "timeout" in low or "timed out" in low:
        return "timeout"
    if "disconnect" in low or "reset by peer" in low or "payload" in low or "closed" in low:
        return "disconnect"
    if "connect" in low or "refused" in low:
        return "connect"
    if "cancel" in low:
        return "aborted"
    return "other"


def num(value: object) -> float:
    """A number the tools wrote (int, float or numeric string); NaN, an infinity or anything else is a ValueError,
    which the importer reports as a malformed file instead of writing it on."""
    try:
        x = float(value)  # type: ignore[arg-type]
    except OverflowError:  # an integer of hundreds of digits
        raise ValueError(f"{_short(value)} is too large") from None
    if not math.isfinite(x):
        raise ValueError(f"{value!r} is not a finite number")
    return x


def read_text(path: Path) -> str:
    """The file's text, refused before reading when it is larger than ``MAX_IMPORT_BYTES``."""
    if not path.is_file():
        raise ConfigError(str(path), "path", "file not found")
    return decode(read_bytes(path, MAX_IMPORT_BYTES), str(path))


def empty_distribution() -> dict:
    return {**{p: None for p in PERCENTILE_KEYS}, "mean": None, "count": None}


def aggregate_step(step: Step, completed: int, failed: int, *, achieved_rate: float | None,
                   input_tokens_per_s: float | None, output_tokens_per_s: float | None, latencies: dict,
                   tool_goodput: float | None) -> dict:
    """A step from the tool's own aggregates only (no per-request data): its latencies and rates, the SLO figures
    None (``stats.verdict`` then leaves the step unjudged)."""
    duration = step.end_s - step.start_s
    if achieved_rate is None:
        achieved_rate = completed / duration if duration > 0 else 0.0
    return {
        "index": step.index, "label": step.label, "offered_rate": step.offered_rate, "concurrency": step.concurrency,
        "start_s": step.start_s, "end_s": step.end_s, "settle_s": 0.0, "measured_s": duration,
        "requests": completed + failed, "completed": completed, "achieved_rate": achieved_rate,
        "input_tokens_per_s": input_tokens_per_s, "output_tokens_per_s": output_tokens_per_s,
        **{k: latencies.get(k) or empty_distribution() for k in ("ttft_s", "tpot_s", "itl_s", "e2e_s")},
        "errors": {"other": failed} if failed else {},
        "error_rate": failed / (completed + failed) if completed + failed else 0.0,
        "slo_attainment": None, "slo_terms": [], "slo_met": None,
        "goodput_requests_per_s": None, "goodput_tokens_per_s": None,
        "tool_goodput_requests_per_s": tool_goodput, "per_tier": {}, "server": {},
    }


def check_run(steps: list[dict], records: list | None, source: str) -> None:
    """Refuse, in one line naming the step or request, an imported run no tool could have measured: more than
    ``MAX_STEPS`` steps, a step of no or negative length, counts past ``MAX_COUNT``, negative latencies, clock
    readings past ``MAX_CLOCK_S``. Checked before anything is written, so a corrupt or hostile file leaves nothing."""
    if len(steps) > MAX_STEPS:
        raise ConfigError(source, "steps", f"{len(steps)} steps (benchmarks, stages) is more than the limit of {MAX_STEPS}")
    for r in records or ():  # first: a request's fault names the request, not the step it skews
        _check_record(r, source)
    for step in steps:
        _check_step(step, source)


def _check_step(step: dict, source: str) -> None:
    where = f"step {step['index']}"
    for key in ("start_s", "end_s"):
        _clock(step[key], source, f"{where}: {key}")
    if not step["end_s"] > step["start_s"]:
        raise ConfigError(source, where, f"lasts {step['end_s'] - step['start_s']:g} s; a measured step lasts longer than 0 s")
    for key in ("requests", "completed"):
        if not 0 <= step[key] <= MAX_COUNT:
            raise ConfigError(source, f"{where}: {key}", f"{_short(step[key])} is outside 0..{MAX_COUNT:,}")
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        for stat, value in step[key].items():
            if stat != "count" and value is not None and value < 0:
                raise ConfigError(source, f"{where}: {key} {stat}", f"{value:g} s is negative")


def _check_record(r, source: str) -> None:
    where = f"request {r.index}"
    for key in ("scheduled_s", "sent_s", "first_token_s", "done_s"):
        if getattr(r, key) is not None:
            _clock(getattr(r, key), source, f"{where}: {key}")
    for name, value in (("time to first token", r.ttft_s), ("end-to-end latency", r.e2e_s)):
        if value is not None and value < 0:
            raise ConfigError(source, where, f"{name} {value:g} s is negative (the response before the request)")
    if r.first_token_s is not None and r.done_s is not None and r.done_s < r.first_token_s:
        raise ConfigError(source, where, "its last token before its first")
    if any(not math.isfinite(g) or g < 0 for g in r.itl_s):
        raise ConfigError(source, f"{where}: itl", "an inter-token gap that is negative or not finite")
    for key in ("input_tokens", "output_tokens"):
        if not 0 <= getattr(r, key) <= MAX_COUNT:
            raise ConfigError(source, f"{where}: {key}", f"{_short(getattr(r, key))} is outside 0..{MAX_COUNT:,}")


def _clock(value: float, source: str, where: str) -> None:
    if not (math.isfinite(value) and abs(value) <= MAX_CLOCK_S):
        raise ConfigError(source, where, f"{_short(value)} s is not a time a run could record (limit ±{MAX_CLOCK_S:g} s)")


def _short(value: object) -> str:
    """A number as an error line can show it: a 400-digit integer cut to its length."""
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 24 else f"{text[:12]}… ({len(text)} digits)"
