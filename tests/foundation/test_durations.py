"""One reading of a duration for the rules, the command line and the review: Prometheus' units, compound terms,
a bare number of seconds, and nothing else."""

import pytest

from goodput.foundation.durations import seconds


@pytest.mark.parametrize(("text", "expected"), [
    ("180", 180.0), ("0.5", 0.5), ("180s", 180.0), ("500ms", 0.5), ("3m", 180.0), ("1h30m", 5400.0),
    ("1d", 86400.0), ("2w", 1209600.0), ("1m30s500ms", 90.5), (" 5m ", 300.0),
])
def test_prometheus_durations_and_bare_seconds(text, expected):
    assert seconds(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "5x", "m5", "1h 30m", "5m-1s", "-5s", "1.5.2s"])
def test_anything_else_is_refused_naming_it(text):
    with pytest.raises(ValueError, match="not a duration") as e:
        seconds(text)
    assert repr(text) in str(e.value)
