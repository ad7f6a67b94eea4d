"""The review's side of Prometheus failures (the answers themselves are checked in tests/foundation/test_promapi.py):
each is one ``ConfigError``, the line the CLI prints before exit 2."""

from __future__ import annotations

import socket

import pytest

from goodput.foundation.errors import ConfigError
from goodput.review.prom import Query, run_queries
from tests.foundation.test_promapi import MALFORMED, REFUSED, serving


@pytest.mark.parametrize("answer", ["not json", "a series without values", "an error page"])
def test_an_unusable_answer_is_one_config_error_naming_server_and_query(answer):
    with serving(*{**MALFORMED, **REFUSED}[answer]) as url, pytest.raises(ConfigError) as e:
        run_queries(url, [Query("demand", "up", 0.0, 600.0, 60.0)])
    assert (e.value.source, e.value.key) == (url, "demand") and "\n" not in str(e.value)


def test_an_unreachable_prometheus_is_one_config_error_naming_it():
    with socket.create_server(("127.0.0.1", 0)) as s:
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(ConfigError) as e:
        run_queries(url, [Query("demand", "up", 0.0, 600.0, 60.0)])
    assert e.value.source == url and e.value.key == "--prometheus" and "cannot reach" in str(e.value)


def test_nan_and_inf_points_are_dropped_from_the_series():
    body = (b'{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {"a": "b"}, '
            b'"values": [[60, "1"], [120, "NaN"], [180, "+Inf"], [240, "2"]]}]}}')
    with serving(200, "application/json", body) as url:
        (s,) = run_queries(url, [Query("k", "up", 0.0, 600.0, 60.0)])["k"]
    assert s.labels == {"a": "b"} and s.times.tolist() == [60.0, 240.0] and s.values.tolist() == [1.0, 2.0]


def test_negative_points_are_dropped_from_the_series():
    """Before: a server's -5 requests was summed into the review as a real figure."""
    body = (b'{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {"a": "b"}, '
            b'"values": [[60, "1"], [120, "-5"], [180, "-0.001"], [240, "2"]]}]}}')
    with serving(200, "application/json", body) as url:
        (s,) = run_queries(url, [Query("k", "up", 0.0, 600.0, 60.0)])["k"]
    assert s.times.tolist() == [60.0, 240.0] and s.values.tolist() == [1.0, 2.0]
