"""The webhook receiver behind Alertmanager: payloads that are not an alerts list get 400, and it keeps serving;
what the real Alertmanager sends it becomes alerts.log lines with the alert's start and end."""

import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import yaml

from goodput.demo.stack import start_alertmanager
from goodput.demo.timeline import alert_line
from goodput.demo.webhook import WebhookReceiver
from tests.conftest import free_port_block, needs


def test_bad_payloads_get_400_and_good_ones_still_arrive():
    hook = WebhookReceiver(port=0).start()
    try:
        for body in (b"{not json", b"[1]", b'{"alerts": 5}', b'{"alerts": "abc"}', b'{"alerts": [5]}',
                     b"[" * 100_000, b'{"alerts": null}'):
            r = httpx.post(f"{hook.url}/pager", content=body)
            assert r.status_code == 400, (body[:20], r.status_code, r.text)
        alert = {"status": "firing", "labels": {"alertname": "TTFTHigh"}}
        assert httpx.post(f"{hook.url}/pager", json={"alerts": [alert, {"status": "firing"}]}).status_code == 200
        assert hook.alerts("pager", "TTFTHigh") == [alert]
    finally:
        hook.stop()


def test_it_keeps_the_newest_alerts_only():
    """A client posting in a loop (or Alertmanager repeating a group for days) holds ``keep`` alerts per receiver."""
    hook = WebhookReceiver(port=0, keep=3).start()
    try:
        for i in range(5):
            alerts = [{"status": "firing", "labels": {"alertname": "A", "n": str(i), "k": str(k)}} for k in range(2)]
            assert httpx.post(f"{hook.url}/pager", json={"alerts": alerts}).status_code == 200
        assert [(a["labels"]["n"], a["labels"]["k"]) for a in hook.alerts("pager")] == [("3", "1"), ("4", "0"),
                                                                                        ("4", "1")]
    finally:
        hook.stop()


@needs("prometheus-alertmanager")
def test_alerts_log_lines_carry_the_start_and_the_end_alertmanager_sends(tmp_path):
    """The real Alertmanager posts an alert firing, then resolved: the demo's alerts.log line (goodput/demo/timeline.py
    ``alert_line``) keeps the start of both and, for the resolved one, the end Alertmanager sent (not the start)."""
    base = free_port_block(2)
    hook = WebhookReceiver(port=base).start()
    config = tmp_path / "alertmanager.yaml"
    config.write_text(yaml.safe_dump({
        "route": {"receiver": "pager", "group_by": ["alertname"], "group_wait": "1s", "group_interval": "1s",
                  "repeat_interval": "1h"},
        "receivers": [{"name": "pager", "webhook_configs": [{"url": f"{hook.url}/pager", "send_resolved": True}]}]}))
    am = start_alertmanager(tmp_path / "am", base + 1, config)
    try:
        am.ready("/-/ready")
        start = datetime.now(UTC) - timedelta(seconds=30)
        alert = {"labels": {"alertname": "StoryLog", "deployment": "d1"}, "startsAt": start.isoformat()}
        httpx.post(f"{am.url}/api/v2/alerts", json=[alert], timeout=10).raise_for_status()
        _until(lambda: hook.alerts("pager", "StoryLog"))
        end = datetime.now(UTC).replace(microsecond=0)
        httpx.post(f"{am.url}/api/v2/alerts", json=[{**alert, "endsAt": end.isoformat()}], timeout=10).raise_for_status()
        resolved = _until(lambda: hook.alerts("pager", "StoryLog", status="resolved"))[0]
        firing = hook.alerts("pager", "StoryLog")[0]
    finally:
        am.stop()
        hook.stop()
    f, r = alert_line("pager", firing).split(), alert_line("pager", resolved).split()
    assert f[:5] == [firing["startsAt"], "-", "pager", "firing", "StoryLog"] and f[5:] == ["deployment=d1"]
    assert r[:5] == [firing["startsAt"], resolved["endsAt"], "pager", "resolved", "StoryLog"]
    assert datetime.fromisoformat(r[0][:19]).replace(tzinfo=UTC) == start.replace(microsecond=0)
    assert datetime.fromisoformat(r[1][:19]).replace(tzinfo=UTC) == end


def _until(check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got := check():
            return got
        time.sleep(0.2)
    pytest.fail(f"nothing arrived within {timeout:.0f} s")
