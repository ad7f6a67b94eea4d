"""The load-test client: one streaming request to an OpenAI-compatible target, measured into a ``RequestRecord``.

asyncio + aiohttp: one session whose connector holds as many connections as the runner will have requests in
flight, so a request never waits for a connection behind the measurement's back. aiohttp rather than httpx (the
issue's first choice) because the client must not be the bottleneck: httpx's pure-Python HTTP stack cost about
three times the CPU per streamed token (docs/loadtest.md has the figures). The stream is read in whatever pieces
the socket delivers, one clock reading per piece, and only ``data:`` lines are decoded. Each request asks for
``stream_options.include_usage`` and carries ``x-tenant``/``x-tier``/``x-route`` and a fresh W3C ``traceparent``,
so its trace joins the engine's. Failures become an error class on the record, never an exception.
"""

from __future__ import annotations

import asyncio
import json
import random
import secrets
import time
from dataclasses import dataclass

import aiohttp
import httpx

from capacity.loadtest.records import RequestRecord
from capacity.loadtest.workload import RequestSpec, prompt_text
from goodput.foundation.errors import ConfigError

__all__ = ["Client", "ClientOptions", "base_url", "error_class", "preflight"]

PREFLIGHT_TIMEOUT_S = 5.0
ERROR_BODY_BYTES = 4096  # how much of an error answer is read before the connection is given up


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
    timeout_s: float = 120.0  # the whole request, send to last byte (and each connect)
    ignore_eos: bool = True  # ask for exactly the planned output length, as vLLM bench and GuideLLM do
    abort_rate: float = 0.0  # the fraction of requests the client drops mid-stream (a fault)
    api_key: str | None = None
    seed: int = 0


class Client:
    """Sends requests to ``targets`` in turn, timed on the run clock (monotonic seconds since ``start_clock``).

    The session is opened on the first request, inside the running event loop (aiohttp binds it to one)."""

    def __init__(self, targets: list[str], options: ClientOptions, max_in_flight: int) -> None:
        self.urls = [base_url(t) + ("/v1/chat/completions" if options.chat else "/v1/completions") for t in targets]
        self.opt = options
        self.t0 = time.perf_counter()
        self.rng = random.Random(options.seed)
        self.max_in_flight = max_in_flight
        self.session: aiohttp.ClientSession | None = None

    def start_clock(self) -> None:
        """The run starts now: run-clock time 0."""
        self.t0 = time.perf_counter()

    def clock(self) -> float:
        return time.perf_counter() - self.t0

    def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            # no per-read timeout: aiohttp would re-arm a timer on every chunk; the whole request has one deadline
            timeout = aiohttp.ClientTimeout(total=None, connect=self.opt.timeout_s, sock_read=None)
            connector = aiohttp.TCPConnector(limit=self.max_in_flight, limit_per_host=0)
            self.session = aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False,
                                                 auto_decompress=False, raise_for_status=False)
        return self.session

    async def aclose(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

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
                   "traceparent": f"00-{rec.trace_id}-{secrets.token_hex(8)}-01", "content-type": "application/json"}
        if self.opt.api_key:
            headers["authorization"] = f"Bearer {self.opt.api_key}"
        abort_after = (1 + int(self.rng.random() * max(1, spec.output_tokens - 1))
                       if self.opt.abort_rate and self.rng.random() < self.opt.abort_rate else 0)
        url = self.urls[rec.index % len(self.urls)]
        body = json.dumps(self._body(spec, rec.index)).encode()
        session = self._session()
        rec.sent_s = self.clock()
        try:
            async with asyncio.timeout(self.opt.timeout_s), session.post(url, data=body, headers=headers) as resp:
                rec.status = resp.status
                if resp.status >= 400:
                    await resp.content.read(ERROR_BODY_BYTES)
                    rec.error = error_class(resp.status)
                    rec.done_s = self.clock()
                    return rec
                await self._read_stream(rec, resp, abort_after)
        except aiohttp.ClientConnectorError:
            rec.error = "connect"
        except TimeoutError:  # the connect, or the whole request, took too long
            rec.error = "timeout"
        except aiohttp.ClientError:  # the connection broke or the answer was not HTTP: the stream did not complete
            rec.error = "disconnect"
        return rec

    async def _read_stream(self, rec: RequestRecord, resp: aiohttp.ClientResponse, abort_after: int) -> None:
        """Read the SSE stream piece by piece: one clock reading per piece the socket delivered, each complete
        ``data:`` line decoded, content chunks timed at the piece's arrival."""
        clock = self.clock
        chat = self.opt.chat
        loads = json.loads
        readany = resp.content.readany
        last = None
        chunks = 0
        usage = None
        finished = False
        rest = b""
        while not finished:
            piece = await readany()
            if not piece:
                break
            now = clock()
            lines = (rest + piece).split(b"\n")
            rest = lines.pop()  # an incomplete last line waits for the next piece
            for line in lines:
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    finished = True
                    break
                try:
                    event = loads(data.decode())  # a str: json.loads of bytes first guesses their encoding
                except ValueError:
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
                    resp.close()  # closes the connection: the server sees the client go away
                    return
        if usage:
            rec.input_tokens = int(usage.get("prompt_tokens") or rec.input_tokens)
            rec.output_tokens = int(usage.get("completion_tokens") or chunks)
        else:
            rec.output_tokens = chunks
        if finished:
            rec.done_s = clock()
        else:
            rec.error = "disconnect"


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
