"""Which alerts page, read from Alertmanager through the one client (goodput.foundation.promapi): only active
``severity="page"`` alerts that name a deployment, the longest-firing first; an Alertmanager that gives no usable
answer is one ``PromError`` naming Alertmanager and its URL (a real socket each, no store)."""

from __future__ import annotations

import json
import socket

import pytest

from goodput.analyzer.paging import paging_alerts
from goodput.foundation.promapi import Malformed, Unreachable
from tests.foundation.test_promapi import J, serving


def _alert(name: str, deployment: str | None, starts: str, severity: str = "page") -> dict:
    labels = {"alertname": name, "severity": severity, **({"deployment": deployment} if deployment else {})}
    return {"labels": labels, "annotations": {}, "startsAt": starts}


def test_paging_alerts_are_the_pages_naming_a_deployment_longest_firing_first():
    alerts = [_alert("B", "rag", "2026-11-23T10:05:00Z"), _alert("A", "chat", "2026-11-23T10:00:00Z"),
              _alert("T", "chat", "2026-11-23T09:00:00Z", "ticket"), _alert("C", None, "2026-11-23T08:00:00Z")]
    seen: list = []
    with serving(200, J, json.dumps(alerts).encode(), seen) as url:
        got = paging_alerts(url)
    assert got == [("chat", "A", "2026-11-23T10:00:00Z"), ("rag", "B", "2026-11-23T10:05:00Z")]
    assert seen[0][1] == "/api/v2/alerts" and seen[0][2]["filter"] == 'severity="page"'


def test_an_alertmanager_without_a_usable_answer_is_one_error_naming_it():
    with socket.create_server(("127.0.0.1", 0)) as s:
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(Unreachable, match=f"^{url}: alerts: cannot reach Alertmanager \\(ConnectError"):
        paging_alerts(url)
    with serving(200, J, b'{"alerts": []}') as url, pytest.raises(Malformed, match="not an Alertmanager answer"):
        paging_alerts(url)
