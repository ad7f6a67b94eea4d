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

from goodput.foundation.errors import ConfigError
from goodput.loadtest.records import RequestRecord
from goodput.loadtest.workload import RequestSpec, prompt_text
from goodput.simulator.catalog import model_key

__all__ = ["Client", "ClientOptions", "base_url", "content_pieces", "error_class", "preflight"]

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
    """Sends requests to ``targets`` in turn, timed on the run clock (``time.monotonic`` seconds since ``start_clock``).

    The session is opened on the first request, inside the running event loop (aiohttp binds it to one)."""

    def __init__(self, targets: list[str], options: ClientOptions, max_in_flight: int) -> None:
        self.urls = [base_url(t) + ("/v1/chat/completions" if options.chat else "/v1/completions") for t in targets]
        self.opt = options
        self.t0 = time.monotonic()
        self.rng = random.Random(options.seed)
        self.max_in_flight = max_in_flight
        self.session: aiohttp.ClientSession | None = None

    def start_clock(self, origin: float | None = None) -> None:
        """The run starts now, or at ``origin`` (a ``time.monotonic()`` instant: CLOCK_MONOTONIC, the same in every
        process of the machine, so workers share one run clock): run-clock time 0."""
        self.t0 = time.monotonic() if origin is None else origin

    def clock(self) -> float:
        return time.monotonic() - self.t0

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
        """Read the SSE stream piece by piece: one clock reading per piece the socket delivered, content chunks timed
        at the piece's arrival. A plain content chunk is recognised by ``content_pieces``' scan of its bytes; any
        other event (usage, an error, several choices, anything unusual) is decoded as JSON."""
        clock = self.clock
        chat = self.opt.chat
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
            lines = (rest + piece if rest else piece).split(b"\n")
            rest = lines.pop()  # an incomplete last line waits for the next piece
            for line in lines:
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                found = content_pieces(data, chat)
                if found is None:
                    if data == b"[DONE]":
                        finished = True
                        break
                    found, event_usage, failed = _decode(data, chat)
                    usage = event_usage or usage
                    if failed and not rec.error:
                        rec.error = failed
                for _ in range(found):
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
        elif not rec.error:
            rec.error = "disconnect"


CHAT_KEY = b'"content"'
TEXT_KEY = b'"text"'
_SPACE = b" \t\r"


def content_pieces(data: bytes, chat: bool) -> int | None:
    """How many content pieces (0 or 1) the ``data:`` payload ``data`` carries, from a scan of its bytes, or None when
    it needs a JSON decode: ``[DONE]``, an error event, a usage that is not null, two content keys (several
    choices), a chat chunk without ``delta``, a value that is neither a string nor null, a payload that is not an
    object.

    The key (``"content"`` in chat, ``"text"`` in completions) followed by ``:`` can only be a key: inside a JSON
    string every quote is escaped, so content that quotes it never matches. A non-empty string value is a piece, as
    the decoded ``choices[0].delta.content`` would be; ``""`` (the role chunk) and ``null`` are none."""
    if data[-1:] != b"}" or data.find(b'"error"') >= 0:  # find: quicker than `in` here
        return None
    at = data.find(b'"usage"')  # OpenAI sends "usage": null in every chunk but the last
    if at >= 0 and _value(data, at + 7)[:4] != b"null":
        return None
    key = CHAT_KEY if chat else TEXT_KEY
    at = data.find(key)
    if at < 0:
        return 0
    at += len(key)
    if data.find(key, at) >= 0 or (chat and data.find(b'"delta"') < 0):
        return None
    value = _value(data, at)
    if value[:1] == b'"':
        return 0 if value[1:2] == b'"' else 1
    return 0 if value[:4] == b"null" else None


def _value(data: bytes, at: int) -> bytes:
    """The first bytes of the value whose key ends at ``at``; empty when no ``:`` follows (the name was a string
    value, which a scan cannot place) or the spaces run long (then the caller decodes)."""
    value = data[at:at + 16].lstrip(_SPACE)
    return value[1:].lstrip(_SPACE) if value[:1] == b":" else b""


def _decode(data: bytes, chat: bool) -> tuple[int, dict | None, str]:
    """(content pieces, usage, error class) of one event, decoded as JSON; an unreadable event is none of them (it
    does not end the measurement). An error event (``{"error": {...}}``, as vLLM sends when a stream fails after its
    200) is classed by its ``code`` when that is an HTTP status, else ``http_5xx``."""
    try:
        event = json.loads(data.decode())  # a str: json.loads of bytes first guesses their encoding
    except ValueError:
        return 0, None, ""
    if not isinstance(event, dict):
        return 0, None, ""
    failed = ""
    if event.get("error"):
        code = event["error"].get("code") if isinstance(event["error"], dict) else None
        failed = error_class(code) if isinstance(code, int) and code >= 400 else "http_5xx"
    pieces = 0
    for choice in event.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        text = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
        if text:
            pieces += 1
    usage = event.get("usage")
    return pieces, usage if isinstance(usage, dict) and usage else None, failed


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
        data = resp.json()["data"] if resp.status_code == 200 else []
        ids = [m["id"] for m in data]
    except (ValueError, KeyError, TypeError):
        data, ids = [], []
    if not data:
        snippet = " ".join(resp.text[:80].split())
        raise ConfigError(target, "/v1/models", f"not OpenAI-compatible: answered HTTP {resp.status_code} {kind}"
                                                f"{': ' + repr(snippet) if snippet else ''}")
    chosen = served_model(target, model or ids[0], ids)
    return chosen, data[ids.index(chosen)]


def served_model(target: str, asked: str, ids: list) -> str:
    """The id the target serves for ``asked``: itself, or the one served id of the same architecture as the catalog
    spells it (``meta-llama/Llama-3.1-8B-Instruct`` asked, ``Llama-3.1-8B`` served); several of them, or none, is a
    one-line error naming what is served."""
    if asked in ids:
        return asked
    same = [i for i in ids if isinstance(i, str) and model_key(i) == model_key(asked)]
    if len(same) > 1:
        raise ConfigError(target, "--model", f"{asked!r} matches several served models ({', '.join(same)}); "
                                             "give one of them exactly")
    if not same:
        raise ConfigError(target, "--model", f"{asked!r} is not served here; it serves {', '.join(map(str, ids))}")
    return same[0]
