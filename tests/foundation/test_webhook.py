"""The webhook receiver behind Alertmanager: payloads that are not an alerts list get 400, and it keeps serving."""

import httpx

from goodput.webhook import WebhookReceiver


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
