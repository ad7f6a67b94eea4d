"""JSON a user or a server gave, with its size and nesting depth checked before it is parsed.

``json.loads`` recurses once per level (a 40 KB ``[[[[…]]]]`` is a ``RecursionError``) and costs ~10× its input
in memory, so both limits are checked first: the size by length, the depth by one pass over the brackets that are
not inside strings. What is wrong is a ``ConfigError`` (``SOURCE: WHERE: PROBLEM``); a caller with its own error
type (Prometheus answers) catches it and re-raises.
"""

from __future__ import annotations

import json
import re
import sys
from itertools import accumulate
from pathlib import Path
from typing import Any

from goodput.foundation.errors import ConfigError, long_integer
from goodput.foundation.yamlfile import MAX_DEPTH, decode, read_bytes

__all__ = ["MAX_DEPTH", "MAX_JSON_BYTES", "check_depth", "load_json", "parse_json"]

MAX_JSON_BYTES = 256 * 2**20  # a load-test export of a million requests is ~200 MB

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_NEWLINE = b"\n"
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def check_depth(data: bytes, source: str, limit: int = MAX_DEPTH) -> None:
    """``ConfigError`` when the arrays and objects of JSON ``data`` nest deeper than ``limit`` (brackets inside
    strings do not count; unbalanced ones are left for the parser to report)."""
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKET)
    if len(brackets) <= 2 * limit:
        return
    deepest = max(accumulate(_STEP[b] for b in brackets))
    if deepest > limit:
        raise ConfigError(source, "", f"nested deeper than the limit of {limit} arrays and objects")


def parse_json(data: bytes | str, source: str, limit: int = MAX_JSON_BYTES, depth: int = MAX_DEPTH) -> Any:
    """JSON ``data`` (UTF-8) from ``source`` as Python data: at most ``limit`` bytes, nested at most ``depth``."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if len(raw) > limit:
        raise ConfigError(source, "", f"{len(raw)} bytes is larger than the limit of {limit} bytes")
    check_depth(raw, source, depth)
    text = decode(raw, source) if isinstance(data, bytes) else data
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(source, f"line {e.lineno}", f"not valid JSON: {e.msg}") from None
    except RecursionError:  # a depth under ``depth`` that still meets Python's limit (a deep caller's stack)
        raise ConfigError(source, "", "nested too deep to parse") from None
    except ValueError:  # what else json.loads raises: an integer past Python's digit limit
        raise ConfigError(source, _long_integer_line(raw), long_integer()) from None


def _long_integer_line(raw: bytes) -> str:
    """``line N`` of the first integer of JSON ``raw`` past Python's digit limit (strings, which hold no newline in
    JSON, removed first), or "" when none is found outside them."""
    text = _STRING.sub(b'""', raw)
    m = re.search(rb"[0-9]{%d}" % (sys.get_int_max_str_digits() + 1), text)
    return f"line {text.count(_NEWLINE, 0, m.start()) + 1}" if m else ""


def load_json(path: str | Path, limit: int = MAX_JSON_BYTES, depth: int = MAX_DEPTH) -> Any:
    """A JSON file of at most ``limit`` bytes (refused by its size before it is read), nested at most ``depth``."""
    return parse_json(read_bytes(path, limit), str(path), limit, depth)
