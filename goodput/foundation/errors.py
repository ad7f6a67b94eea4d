"""The one error type that bad user input raises, so the CLI can print it as one line and exit 2."""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A file, key or value the user gave is unusable.

    ``str(err)`` is the single line a user sees: ``FILE: KEY: PROBLEM``.
    """

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source = source
        self.key = key
        self.problem = problem
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {problem}")
