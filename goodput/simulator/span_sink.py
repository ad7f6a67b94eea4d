"""Where the live fleet's request spans go: an OTLP/HTTP endpoint, a JSON lines file, or both.

A background thread batches requests once a second, in goodput's span shape, vLLM's or both
(``span_format``, goodput/simulator/spans.py). As OpenTelemetry exports a span when it ends, a request's ``llm.gateway``
span goes out in the batch after its admission (``admitted``) and its ``llm.queue`` span in the batch after it
is scheduled (``scheduled``); the root and the remaining segments when it finishes (``add``). Each span is sent
once: what went early is left out of the finished request's spans. vLLM's shape has no early span, so with
``--span-format vllm`` a request is seen only once it finishes. Sending retries on connection errors
and on 429/503 (honouring Retry-After); the buffer is bounded, and what it must give up is counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from pathlib import Path

import httpx

from goodput.foundation.errors import ConfigError
from goodput.simulator.config import FleetConfig
from goodput.simulator.records import RequestTable
from goodput.simulator.request import Request
from goodput.simulator.spans import SPAN_FORMATS, Part, span_documents

__all__ = ["SpanSink"]

log = logging.getLogger(__name__)
CLOSE_DRAIN_S = 10.0  # how long close keeps retrying a slow or busy receiver


class SpanSink:
    def __init__(self, cfg: FleetConfig, seed: int, endpoint: str | None, path: Path | None,
                 max_buffered_docs: int = 1000, interval_s: float = 1.0, base_ns: int | None = None,
                 span_format: str = "goodput") -> None:
        if span_format not in SPAN_FORMATS:
            raise ConfigError("--span-format", span_format, f"must be one of {', '.join(SPAN_FORMATS)}")
        self.cfg, self.seed, self.span_format = cfg, seed, span_format
        self.base_ns = base_ns if base_ns is not None else time.time_ns()  # virtual second 0 = now
        self.endpoint, self.path = endpoint, path
        self.pending: list[Request] = []
        self.opened: list[tuple[Request, int]] = []  # (request, segments to have sent) reported in flight
        self.sent: dict[int, int] = {}  # rid -> early segments already sent, while the request is in flight
        self.docs: deque[str] = deque()
        self.max_docs = max_buffered_docs
        self.dropped_docs = 0
        self.sent_docs = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.interval = interval_s
        self.client = httpx.Client(timeout=5.0) if endpoint else None
        self.thread = threading.Thread(target=self._loop, name="span-sink", daemon=True)

    @property
    def enabled(self) -> bool:
        return bool(self.endpoint or self.path)

    def start(self) -> None:
        if self.enabled:
            self.thread.start()

    def add(self, reqs: list[Request]) -> None:
        if self.enabled and reqs:
            with self.lock:
                self.pending.extend(reqs)

    def _early(self, req: Request, upto: int) -> None:
        if self.enabled and self.span_format != "vllm":
            with self.lock:
                self.opened.append((req, upto))

    def admitted(self, req: Request) -> None:
        """``req`` was admitted (routed to a replica and queued): its ``llm.gateway`` span has ended."""
        self._early(req, 1)

    def scheduled(self, req: Request) -> None:
        """``req`` was scheduled for the first time: its ``llm.queue`` span has ended."""
        self._early(req, 2)

    def _parts(self, batch: list[Request], opened: list[tuple[Request, int]]) -> tuple[list[Request], dict[int, Part]]:
        """The requests of one render and what to send of each (by rid); a request that finished in the batch
        that also reports it in flight goes whole, once."""
        parts: dict[int, Part] = {r.rid: (self.sent.pop(r.rid, 0), None) for r in batch}
        reqs = {r.rid: r for r in batch}
        for req, upto in opened:
            if req.rid in reqs and parts[req.rid][1] is None:
                continue
            sent = self.sent.get(req.rid, 0)
            if upto > sent:
                parts[req.rid] = (parts[req.rid][0] if req.rid in parts else sent, upto)
                reqs[req.rid] = req
                self.sent[req.rid] = upto
        return list(reqs.values()), parts

    def _render(self) -> None:
        with self.lock:
            batch, self.pending = self.pending, []
            opened, self.opened = self.opened, []
        if not batch and not opened:
            return
        reqs, parts = self._parts(batch, opened)
        table = RequestTable(self.cfg, reqs, self.seed, base_ns=self.base_ns, run_id=str(self.base_ns))
        docs = list(span_documents(table, service="goodput-fleet", span_format=self.span_format, parts=parts))
        if self.path is not None:
            with open(self.path, "a") as f:
                for d in docs:
                    f.write(d + "\n")
        if self.endpoint:
            self.docs.extend(docs)
            while len(self.docs) > self.max_docs:
                self.docs.popleft()
                self.dropped_docs += 1

    def _send(self) -> bool:
        """Post the buffered documents in order until one fails; False when nobody listens at the endpoint."""
        client, endpoint = self.client, self.endpoint
        if client is None or not endpoint:
            return True  # no endpoint: nothing is buffered to send
        while self.docs and not self.stop.is_set():
            doc = self.docs[0]
            try:
                r = client.post(endpoint, content=doc, headers={"Content-Type": "application/json"})
            except httpx.ConnectError as e:
                log.debug("span export failed: %s", e)
                return False
            except httpx.HTTPError as e:  # a slow receiver: the document stays first in line
                log.debug("span export failed: %s", e)
                return True
            if r.status_code in (429, 503):
                time.sleep(min(5.0, float(r.headers.get("Retry-After", "1") or 1)))
                return True
            self.docs.popleft()
            if r.status_code >= 400:
                log.warning("span export rejected (%s): %s", r.status_code, r.text[:200])
                self.dropped_docs += 1
            else:
                self.sent_docs += 1
        return True

    def _loop(self) -> None:
        while not self.stop.wait(self.interval):
            self._render()
            if self.endpoint:
                self._send()

    def close(self) -> None:
        """Flush what is buffered and stop. A receiver that is slow or busy (503) is retried for ``CLOSE_DRAIN_S``
        (under load one timed-out post used to lose the last in-flight spans); one that is gone is not waited for.
        What is still unsent then counts in ``dropped_docs``. A second close flushes what was added since (a fleet
        that is stopped, then closed, hands over its last requests in between)."""
        self.stop.set()
        if self.thread.is_alive():  # its post ends within the client's timeout, a Retry-After sleep within 5 s:
            self.thread.join()      # it must be gone before this drain, or both would send the same document
        self._render()
        if self.endpoint:
            client = self.client
            if client is None or client.is_closed:
                client = self.client = httpx.Client(timeout=5.0)
            self.stop.clear()
            deadline = time.monotonic() + CLOSE_DRAIN_S
            while self.docs and self._send() and self.docs and time.monotonic() < deadline:
                time.sleep(0.2)
            self.dropped_docs += len(self.docs)
            self.docs.clear()
            client.close()
