"""A progress bar for long work that stays quiet when output is not a terminal."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

__all__ = ["progress_bar"]


@contextmanager
def progress_bar(description: str, total: float, unit: str = "s", enabled: bool | None = None
                 ) -> Iterator[Callable[[float], None]]:
    """Yield ``update(completed)``; renders on stderr when it is a terminal (or ``enabled``)."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield lambda _done: None
        return
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(),
        TextColumn("{task.completed:,.0f}/{task.total:,.0f} " + unit), TimeElapsedColumn(), TimeRemainingColumn(),
        transient=False,
    ) as p:
        task = p.add_task(description, total=total)
        yield lambda done: p.update(task, completed=min(done, total))
        p.update(task, completed=total)
