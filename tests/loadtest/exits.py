"""The exit code a finished `loadtest run` owes its caller, read from what it wrote."""
import json
from pathlib import Path

from goodput.loadtest.cli import EXIT_INVALID


def run_exit(summary: dict | Path) -> int:
    """0 for a complete, valid run; EXIT_INVALID where summary.json says the client or the machine set the pace
    (a loaded test machine may, whatever the test asks of the target). Takes the summary or the run directory."""
    if isinstance(summary, Path):
        summary = json.loads((summary / "summary.json").read_text())
    assert summary["complete"], summary
    return 0 if summary["valid"] else EXIT_INVALID
