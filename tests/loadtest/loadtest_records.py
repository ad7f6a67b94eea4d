"""Building RequestRecords by hand for the loadtest statistics tests."""

from goodput.loadtest.records import RequestRecord


def rec(index, *, step=0, sched=0.0, ttft=0.1, e2e=1.0, out=10, inp=100, error="", tier="P1", itl=None, lag=0.0):
    """A request scheduled at ``sched``, sent ``lag`` later, with the given TTFT and E2E (None: never came)."""
    sent = sched + lag
    return RequestRecord(
        index=index, step=step, scheduled_s=sched, sent_s=sent,
        first_token_s=None if ttft is None else sent + ttft, done_s=None if e2e is None else sent + e2e,
        itl_s=list(itl or []), input_tokens=inp, output_tokens=out, status=0 if error else 200, error=error,
        tenant="t", tier=tier, route="chat", trace_id=f"{index:032x}",
    )
