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
           "num", "read_text"]

MAX_IMPORT_BYTES = 512 * 1024 * 1024  # checked before reading: a larger "report" is not one
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
    x = float(value)  # type: ignore[arg-type]
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
