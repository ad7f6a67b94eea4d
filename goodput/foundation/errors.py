"""The error types the command line turns into one line: ``ConfigError`` (bad user input, exit 2) and
``StaleBuildError`` (a compiled module older than its source, exit 1)."""

from __future__ import annotations

import sys

__all__ = ["ConfigError", "StaleBuildError", "long_integer"]


def long_integer() -> str:
    """The problem of a decimal integer past Python's int/str conversion limit (CVE-2020-10735's 4,300 digits by
    default), which ``int()``, ``json.loads`` and YAML's int constructor raise as a bare ``ValueError``."""
    return f"an integer longer than Python's limit of {sys.get_int_max_str_digits():,} digits"


class ConfigError(ValueError):
    """A file, key or value the user gave is unusable.

    ``str(err)`` is the single line a user sees: ``FILE: KEY: PROBLEM``.
    """

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source = source
        self.key = key
        self.problem = problem
        where = f"{source}: {key}" if key else source
        super().__init__(_one_line(f"{where}: {problem}"))


def _one_line(text: str) -> str:
    """``text`` with its control characters escaped: a key a user's file spells with a newline stays one line."""
    return "".join(c if c >= " " or c == "\t" else repr(c)[1:-1] for c in text)


class StaleBuildError(ImportError):
    """A compiled module whose source changed after it was built: importing it would run the old code.

    Raised only by the import of that module, so what does not use it keeps working; ``str(err)`` names the module
    and how to rebuild.
    """
