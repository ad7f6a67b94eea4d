"""The load-test client: one streaming request to an OpenAI-compatible target, measured into a ``RequestRecord``.

asyncio + httpx, connection pools that together hold the most requests the runner will have in flight, so a request
never waits for a connection behind the measurement's back. Each request streams (SSE) with
``stream_options.include_usage`` and carries ``x-tenant``/``x-tier``/``x-route`` and a fresh W3C ``traceparent``,
so its trace joins the engine's. Failures become an error class on the record, never an exception.
"""

from __future__ import annotations

import asyncio
import json
import random
import secrets
import ssl
import time
from dataclasses import dataclass

import httpx

from capacity.loadtest.records import RequestRecord
from capacity.loadtest.workload import RequestSpec, prompt_text
from goodput.foundation.errors import ConfigError

__all__ = ["Client", "ClientOptions", "base_url", "error_class", "preflight"]

PREFLIGHT_TIMEOUT_S = 5.0
POOL_CONNECTIONS = 64
ERROR_BODY_BYTES = 4096  # how much of an error answer is read (then dropped) before the connection is reused


def base_url(target: str) -> str:
    """``http://host:port`` of a target given with or without ``/v1``."""
    url = target.rstrip("/")
    return url.removesuffix("/v1")


def error_class(status: int) -> str:
    """The record's error class for an HTTP status."""
    if status < 400:
        return ""
    if status == 429:
        return "http_429"
    return "http_4xx" if status < 500 else "http_5xx"


@dataclass(frozen=True)
class ClientOptions:
    model: str
    chat: bool = True
    timeout_s: float = 120.0  # the whole request, send to last byte (and each connect/read/write)
    ignore_eos: bool = True  # ask for exactly the planned output length, as vLLM bench and GuideLLM do
    abort_rate: float = 0.0  # the fraction of requests the client drops mid-stream (a fault)
    api_key: str | None = None
    seed: int = 0


class Client:
    """Sends requests to ``targets`` in turn, timed on the run clock (monotonic seconds since ``start_clock``)."""

    def __init__(self, targets: list[str], options: ClientOptions, max_in_flight: int) -> None:
        self.urls = [base_url(t) + ("/v1/chat/completions" if options.chat else "/v1/completions") for t in targets]
        self.opt = options
        self.t0 = time.perf_counter()
        self.rng = random.Random(options.seed)
        # httpcore scans every connection of a pool on each request start and end (quadratic in the pool's size:
        # 3.7 of 10.9 CPU seconds for 1,000 streams at once), so requests are spread over pools of about
        # POOL_CONNECTIONS; each may hold all ``max_in_flight`` so a request never waits for a connection
        limits = httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight)
        tls = ssl.create_default_context()  # one, shared: building one per pool costs ~30 ms each
        self.pools = [httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(options.timeout_s), trust_env=False,
                                        verify=tls) for _ in range(max(1, -(-max_in_flight // POOL_CONNECTIONS)))]

    def start_clock(self) -> None:
        """The run starts now: run-clock time 0."""
        self.t0 = time.perf_counter()

    def clock(self) -> float:
        return time.perf_counter() - self.t0

    async def aclose(self) -> None:
        for pool in self.pools:
            await pool.aclose()

    def _body(self, spec: RequestSpec, index: int) -> dict:
        text = prompt_text(spec, index, self.opt.chat)
        body: dict = {"model": self.opt.model, "max_tokens": spec.output_tokens, "stream": True,
                      "stream_options": {"include_usage": True}}
        if self.opt.chat:
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        if self.opt.ignore_eos:
            body["ignore_eos"] = True
        return body

    def record(self, index: int, step: int, scheduled_s: float, spec: RequestSpec) -> RequestRecord:
        """A record for a request not sent yet, its trace id chosen."""
        return RequestRecord(index, step, scheduled_s, scheduled_s, None, None, [], spec.input_tokens, 0, 0, "",
                             spec.tenant, spec.tier, spec.route, secrets.token_hex(16))

    async def send(self, rec: RequestRecord, spec: RequestSpec) -> RequestRecord:
        """Send ``spec`` now and fill ``rec`` with what happened (``rec.sent_s`` is set here)."""
        headers = {"x-tenant": rec.tenant, "x-tier": rec.tier, "x-route": rec.route,
                   "traceparent": f"00-{rec.trace_id}-{secrets.token_hex(8)}-01"}
        if self.opt.api_key:
            headers["authorization"] = f"Bearer {self.opt.api_key}"
        abort_after = (1 + int(self.rng.random() * max(1, spec.output_tokens - 1))
                       if self.opt.abort_rate and self.rng.random() < self.opt.abort_rate else 0)
        url = self.urls[rec.index % len(self.urls)]
        body = json.dumps(self._body(spec, rec.index)).encode()
        headers["content-type"] = "application/json"
        clock = self.clock
        rec.sent_s = clock()
        try:
            async with asyncio.timeout(self.opt.timeout_s), \
                    self.pools[rec.index % len(self.pools)].stream("POST", url, content=body, headers=headers) as resp:
                rec.status = resp.status_code
                if resp.status_code >= 400:
                    await _drain(resp)
                    rec.error = error_class(resp.status_code)
                    rec.done_s = clock()
                    return rec
                await self._read_stream(rec, resp, abort_after)
        except httpx.ConnectError:
            rec.error = "connect"
        except (httpx.TimeoutException, TimeoutError):  # one operation, or the whole request, took too long
            rec.error = "timeout"
        except httpx.HTTPError:  # the connection broke or the answer was not HTTP: the stream did not complete
            rec.error = "disconnect"
        return rec

    async def _read_stream(self, rec: RequestRecord, resp: httpx.Response, abort_after: int) -> None:
        clock = self.clock
        chat = self.opt.chat
        last = None
        chunks = 0
        usage = None
        finished = False
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                finished = True
                break
            now = clock()
            try:
                event = json.loads(data)
            except json.JSONDecodeError:
                continue  # one unreadable event does not end the measurement
            if not isinstance(event, dict):
                continue
            if event.get("usage"):
                usage = event["usage"]
            for choice in event.get("choices") or ():
                text = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
                if not text:
                    continue
                if last is None:
                    rec.first_token_s = now
                else:
                    rec.itl_s.append(now - last)
                last = now
                chunks += 1
            if abort_after and chunks >= abort_after:
                rec.error = "aborted"
                rec.output_tokens = chunks
                return  # leaving the stream closes the connection: the server sees the client go away
        if usage:
            rec.input_tokens = int(usage.get("prompt_tokens") or rec.input_tokens)
            rec.output_tokens = int(usage.get("completion_tokens") or chunks)
        else:
            rec.output_tokens = chunks
        if finished:
            rec.done_s = clock()
        else:
            rec.error = "disconnect"


async def _drain(resp: httpx.Response) -> None:
    """Read an error answer (bounded) so the connection can be reused."""
    read = 0
    async for chunk in resp.aiter_bytes():
        read += len(chunk)
        if read > ERROR_BODY_BYTES:
            break


def preflight(target: str, model: str | None) -> tuple[str, dict]:
    """Before the run: the target answers ``GET /v1/models`` like an OpenAI server; returns (model, its entry).

    Raises ``ConfigError`` with one line: unreachable, not OpenAI-compatible (naming what it answered), or the model
    not served (naming those that are)."""
    url = base_url(target) + "/v1/models"
    try:
        resp = httpx.get(url, timeout=PREFLIGHT_TIMEOUT_S, trust_env=False)
    except httpx.HTTPError as e:
        raise ConfigError(target, "", f"unreachable: {type(e).__name__}: {e}") from None
    kind = resp.headers.get("content-type", "no content type").split(";")[0]
    try:
        data = resp.json()["data"] if resp.status_code == 200 else None
        ids = [m["id"] for m in data]
    except (ValueError, KeyError, TypeError):
        data = None
    if not data:
        snippet = " ".join(resp.text[:80].split())
        raise ConfigError(target, "/v1/models", f"not OpenAI-compatible: answered HTTP {resp.status_code} {kind}"
                                                f"{': ' + repr(snippet) if snippet else ''}")
    chosen = model or ids[0]
    if chosen not in ids:
        raise ConfigError(target, "--model", f"{chosen!r} is not served here; it serves {', '.join(map(str, ids))}")
    return chosen, data[ids.index(chosen)]
