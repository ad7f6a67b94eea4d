"""Readers for public request traces: the Azure LLM inference CSV and the Mooncake JSONL.

Both yield relative arrival times (seconds from the first request) with token counts; Mooncake
also gives prefix-block hashes (512-token blocks) that drive the prefix cache.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from goodput.foundation.errors import ConfigError
from goodput.foundation.yamlfile import read_text

__all__ = ["MOONCAKE_BLOCK_TOKENS", "Trace", "load_trace"]

MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True)
class Trace:
    times: np.ndarray  # seconds since the first request, sorted
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    hash_ids: list[tuple[int, ...]] | None = None
    block_tokens: int = MOONCAKE_BLOCK_TOKENS

    def __len__(self) -> int:
        return len(self.times)

    @property
    def span_s(self) -> float:
        return float(self.times[-1]) if len(self.times) else 0.0


def _count(v: str | int | float) -> int:
    """A token count: an integer >= 0 (``int("nan")`` and ``int(-5)`` must not slip through)."""
    n = int(v)
    if n < 0:
        raise ValueError(f"negative token count {n}")
    return n


def _azure(path: Path) -> Trace:
    times, ins, outs = [], [], []
    reader = csv.reader(read_text(path).splitlines())
    header = next(reader, None)
    if header != ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]:
        raise ConfigError(str(path), "header", f"expected TIMESTAMP,ContextTokens,GeneratedTokens, got {header}")
    for lineno, row in enumerate(reader, start=2):
        try:
            ts = datetime.strptime(row[0][:26], "%Y-%m-%d %H:%M:%S.%f").timestamp()
            times.append(ts)
            ins.append(_count(row[1]))
            outs.append(_count(row[2]))
        except (ValueError, IndexError) as e:
            raise ConfigError(str(path), f"line {lineno}", f"bad row {row!r}: {e}") from None
    t = np.asarray(times)
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0] if len(t) else t
    return Trace(t, np.asarray(ins)[order], np.asarray(outs)[order])


def _mooncake(path: Path) -> Trace:
    times, ins, outs, hashes = [], [], [], []
    for lineno, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            ts = float(rec["timestamp"])
            if not math.isfinite(ts):
                raise ValueError(f"timestamp {ts} is not finite")
            times.append(ts / 1000.0)
            ins.append(_count(rec["input_length"]))
            outs.append(_count(rec["output_length"]))
            hashes.append(tuple(int(h) for h in rec.get("hash_ids", ())))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            raise ConfigError(str(path), f"line {lineno}", f"bad record: {e}") from None
    t = np.asarray(times)
    order = np.argsort(t, kind="stable")
    t = t[order] - (t[order][0] if len(t) else 0.0)
    return Trace(t, np.asarray(ins)[order], np.asarray(outs)[order], [hashes[i] for i in order])


def load_trace(path: str | Path, fmt: str) -> Trace:
    """Load ``path`` as ``azure`` (CSV) or ``mooncake`` (JSONL); ``ConfigError`` on a bad file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(p), "path", "trace file not found")
    if fmt == "azure":
        return _azure(p)
    if fmt == "mooncake":
        return _mooncake(p)
    raise ConfigError(str(p), "format", f"unknown trace format {fmt!r}; use azure or mooncake")
