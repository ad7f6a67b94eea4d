"""Argument types every ``goodput`` command shares, and a parser that reports a bad argument in one line.

A value that parses but makes no sense (``--duration nan``, ``--interval 0``, ``--port 99999``,
``--seed -1``) is refused when the command line is read, before any work starts, rather than
running silently on nonsense or failing later with a traceback; so is one too large to do
(``int_in``, ``positive_number_at_most``: each command's limits are in its docs page).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from goodput.foundation.durations import seconds

__all__ = [
    "MIN_INTERVAL_S",
    "Parser",
    "any_port",
    "duration",
    "http_url",
    "int_in",
    "interval_seconds",
    "non_negative_int",
    "non_negative_number",
    "output_dir",
    "output_file",
    "port",
    "positive_int",
    "positive_number",
    "positive_number_at_most",
    "seed",
]

# Background loops (scrapes, GPU samples) sleep at least this long between rounds: no busy loops.
MIN_INTERVAL_S = 0.1


class Parser(argparse.ArgumentParser):
    """``argparse`` with a one-line error: ``goodput: error: COMMAND: argument --X: PROBLEM``, exit 2."""

    def error(self, message: str) -> NoReturn:
        print(f"goodput: error: {self.prog}: {message} (see `{self.prog} --help`)", file=sys.stderr)
        sys.exit(2)


def _number(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return v


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def positive_number(text: str) -> float:
    """A finite number > 0 (durations, timeouts, speed factors)."""
    v = _number(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return v


def non_negative_number(text: str) -> float:
    """A finite number >= 0 (drain time, traffic factor, thresholds)."""
    v = _number(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return v


def interval_seconds(text: str) -> float:
    """A loop interval: finite and at least ``MIN_INTERVAL_S`` seconds."""
    v = _number(text)
    if v < MIN_INTERVAL_S:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_INTERVAL_S:g} s, got {text}")
    return v


def duration(text: str) -> float:
    """A finite duration >= 0 in seconds: ``180``, ``180s``, ``3m``, ``1h30m``."""
    try:
        v = seconds(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not 0 <= v < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite duration >= 0, got {text!r}")
    return v


def positive_int(text: str) -> int:
    v = _integer(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be an integer > 0, got {text}")
    return v


def non_negative_int(text: str) -> int:
    v = _integer(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
    return v


def seed(text: str) -> int:
    """A random seed: an integer in 0 .. 2**64-1 (what NumPy's generators accept without surprise)."""
    v = _integer(text)
    if not 0 <= v < 2**64:
        raise argparse.ArgumentTypeError(f"must be an integer in 0..2**64-1, got {text}")
    return v


def http_url(text: str) -> str:
    """An http(s) URL with a host (and a port in 1..65535) a client can request: http.http_url_problem's check."""
    from goodput.foundation.http import http_url_problem  # httpx, only for the commands that take a URL

    problem = http_url_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def port(text: str) -> int:
    """A fixed TCP port, 1..65535 (one that others are told about, e.g. in a Prometheus config)."""
    v = _integer(text)
    if not 1 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port in 1..65535, got {text}")
    return v


def any_port(text: str) -> int:
    """A port to listen on, 0..65535; 0 asks the system for a free one (the command prints the URL)."""
    v = _integer(text)
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port in 0..65535 (0: any free port), got {text}")
    return v


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An integer in ``low..high``; the upper bound is a limit a real user never meets, checked before the work
    instead of growing until the OOM killer (``--tenants 1000000000``)."""
    def parse(text: str) -> int:
        v = _integer(text)
        if not low <= v <= high:
            raise argparse.ArgumentTypeError(f"must be an integer in {low}..{high}, got {text}")
        return v
    return parse


def positive_number_at_most(limit: float, unit: str = "") -> Callable[[str], float]:
    """A finite number in (0, ``limit``] (``--duration 1e12`` is refused here, not by a numpy MemoryError)."""
    def parse(text: str) -> float:
        v = positive_number(text)
        if v > limit:
            raise argparse.ArgumentTypeError(f"must be at most {limit:.15g}{unit}, got {text}")
        return v
    return parse


def output_dir(text: str) -> Path:
    """A directory the command may create and write into: a path under a file, or in a directory that takes no new
    entry (read-only, virtual like /proc), is refused when the command line is read, not after the work. Checked by
    making and removing a scratch directory in the nearest existing ancestor, so a refused command leaves nothing."""
    p = Path(text)
    if p.exists() and not p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a directory")
    ancestor = next(a for a in (p.absolute(), *p.absolute().parents) if a.exists())
    if not ancestor.is_dir():
        raise argparse.ArgumentTypeError(f"cannot create directory {text}: {ancestor} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(dir=ancestor, prefix=".goodput-write-check-"))
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot write into {ancestor}: {e.strerror or e}") from None
    return p


def output_file(text: str) -> Path:
    """A file to write: not a directory, in a directory ``output_dir`` accepts."""
    p = Path(text)
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; expected a file to write")
    output_dir(str(p.parent))
    return p
