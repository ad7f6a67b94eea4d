"""One measured request of a load test: the row every other loadtest module reads or writes.

All times are on the run clock (monotonic seconds since the run started). Latencies are measured from
``sent_s``, not ``scheduled_s``: schedule lag (``sent_s - scheduled_s``) is the client's own delay and is
reported separately, so a slow client shows up as lag instead of hiding inside the target's latency.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RequestRecord"]


@dataclass(slots=True)
class RequestRecord:
    index: int                    # order of scheduling
    step: int                     # step index (0 for single-step patterns)
    scheduled_s: float            # run clock (monotonic, seconds since the run started): when it was due
    sent_s: float                 # when the client actually sent it (lag = sent_s - scheduled_s)
    first_token_s: float | None   # first CONTENT token arrived (run clock); None if none
    done_s: float | None          # last byte of the response (run clock); None if it never completed
    itl_s: list[float]            # gaps between consecutive content chunks (seconds)
    input_tokens: int             # usage.prompt_tokens when the server says, else the target
    output_tokens: int            # usage.completion_tokens when the server says, else counted chunks
    status: int                   # HTTP status; 0 when no response
    error: str                    # "" ok | timeout | http_429 | http_4xx | http_5xx | disconnect | aborted | connect
    tenant: str
    tier: str                     # P0 | P1 | P2
    route: str
    trace_id: str                 # the W3C trace id sent in traceparent (32 hex)

    @property
    def ttft_s(self) -> float | None:
        """Send to first content token."""
        return None if self.first_token_s is None else self.first_token_s - self.sent_s

    @property
    def e2e_s(self) -> float | None:
        """Send to the last byte of the response."""
        return None if self.done_s is None else self.done_s - self.sent_s

    @property
    def tpot_s(self) -> float | None:
        """(E2E - TTFT) / (output tokens - 1): the per-request decode pace, first token excluded."""
        ttft, e2e = self.ttft_s, self.e2e_s
        if ttft is None or e2e is None or self.output_tokens <= 1:
            return None
        return (e2e - ttft) / (self.output_tokens - 1)
