"""The OpenAI-compatible HTTP face of one live replica, as an aiohttp application.

Serves ``POST /v1/completions`` and ``POST /v1/chat/completions`` (streaming SSE paced by the simulated
engine, or one JSON answer), ``GET /v1/models``, ``GET /health`` and ``GET /metrics``. The "model"
generates filler words, one token each (``goodput.simulator.tokenizer``); what matters is when each token arrives and
the usage counts.

Handlers never poll and never take the fleet's lock: a request goes to the engine thread as a ``Ticket``,
and the engine thread wakes the ticket (once per engine tick, for all the tickets that moved) through
``deliver`` on this event loop. Refused requests are reported to the backend with their reason.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Protocol

from aiohttp import web

from goodput.contracts.vocabulary import QUOTA_REASONS as QUOTAS
from goodput.simulator.openai_protocol import CHAT, COMPLETIONS, ApiError, Generation, error_body, parse_body, validate
from goodput.simulator.request import Request
from goodput.simulator.request_meta import LabelGuard
from goodput.simulator.tokenizer import FILLER_WORDS

__all__ = ["MAX_BODY_BYTES", "Backend", "Ticket", "deliver", "make_app"]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 4 * 1024 * 1024
BODY_TIMEOUT_S = 10.0  # a body that trickles in slower than this is refused (408)
STALL_S = 30.0  # a stream whose client reads nothing for this long is dropped (and its request aborted)
FINISH = {"stop": "stop", "length": "length"}  # anything else ends a stream as "abort"


class Ticket:
    """A submitted request as its handler sees it. The engine thread sets ``req`` and ``seen``; the event loop
    sets ``produced``/``done`` (via ``deliver``) and wakes ``changed``."""

    __slots__ = ("changed", "done", "produced", "req", "seen")

    def __init__(self) -> None:
        self.req: Request | None = None
        self.produced = 0
        self.done = False
        self.seen = (-1, False)
        self.changed = asyncio.Event()

    @property
    def submitted(self) -> Request:
        """``req``, which the engine thread sets when it takes the submission, before any update or later command."""
        req = self.req
        assert req is not None, "the engine thread has not taken the submission yet"
        return req


def deliver(updates: list[tuple[Ticket, int, bool]]) -> None:
    """Run on the event loop, once per engine tick: publish progress and wake the waiting handlers."""
    for ticket, produced, done in updates:
        ticket.produced, ticket.done = produced, done
        ticket.changed.set()


class Backend(Protocol):
    """What the face needs from the live fleet for one replica (thread-safe, non-blocking)."""

    name: str
    model: str
    max_model_len: int
    created: int
    guard: LabelGuard

    @property
    def tokenizer(self) -> str | None: ...  # the served model's tokenizer.json (checked), or None: the shipped BPE

    def metrics(self) -> bytes: ...

    def submit(self, ticket: Ticket, gen: Generation, tier: str, meta: dict) -> None: ...

    def abort(self, ticket: Ticket) -> None: ...

    def refuse(self, reason: str, tier: str, meta: dict) -> None: ...


def _error(status: int, message: str, param: str | None = None, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=error_body(status, message, param), content_type="application/json",
                        headers=headers)


def _text(i0: int, i1: int) -> str:
    return "".join(FILLER_WORDS[i % len(FILLER_WORDS)] for i in range(i0, i1))


async def _write(resp: web.StreamResponse, transport, data: bytes) -> None:
    """Write one SSE event; when the socket is already backed up, give the client ``STALL_S`` to read."""
    if transport is None or transport.is_closing():
        raise ConnectionResetError("the connection is closed")
    if not transport.get_write_buffer_size():
        await resp.write(data)
        return
    try:
        async with asyncio.timeout(STALL_S):
            await resp.write(data)
    except TimeoutError:
        raise ConnectionResetError(f"the client read nothing for {STALL_S:g} s") from None


def _usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class _Api:
    def __init__(self, backend: Backend) -> None:
        self.b = backend

    # ------------------------------------------------------------------ plain routes

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.b.metrics(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        b = self.b
        return web.json_response({"object": "list", "data": [{
            "id": b.model, "object": "model", "created": b.created, "owned_by": "goodput", "root": b.model,
            "max_model_len": b.max_model_len}]})

    @web.middleware
    async def errors(self, request: web.Request, handler) -> web.StreamResponse:
        """The router's 404/405 (and any HTTP error aiohttp raises) in OpenAI's error shape."""
        try:
            return await handler(request)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            if e.status == 405 and request.path in (CHAT, COMPLETIONS):
                b = self.b
                b.refuse("method_not_allowed", "P1", b.guard.meta(request.headers, request.path == CHAT, None))
            allow = {"Allow": e.headers["Allow"]} if "Allow" in e.headers else None
            return _error(e.status, f"{e.reason}: {request.method} {request.path}", headers=allow)

    # ------------------------------------------------------------------ generation

    async def _body(self, request: web.Request) -> bytes:
        if (request.content_length or 0) > MAX_BODY_BYTES:
            raise ApiError(413, f"body larger than {MAX_BODY_BYTES} bytes", "body_too_large")
        try:
            async with asyncio.timeout(BODY_TIMEOUT_S):
                return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise ApiError(413, f"body larger than {MAX_BODY_BYTES} bytes", "body_too_large") from None
        except TimeoutError:
            raise ApiError(408, f"body not received within {BODY_TIMEOUT_S:g} s", "invalid_request") from None

    async def generate(self, request: web.Request) -> web.StreamResponse:
        b, path, headers = self.b, request.path, request.headers
        tier = b.guard.tier(headers)
        try:
            gen = validate(path, parse_body(await self._body(request)), b.model, b.max_model_len, b.tokenizer)
            if tier is None:
                raise ApiError(400, "x-tier: must be one of P0, P1, P2", "invalid_header", "x-tier")
        except ApiError as e:
            b.refuse(e.reason, tier or "P1", b.guard.meta(headers, path == CHAT, None))
            return _error(e.status, str(e), e.param)
        ticket = Ticket()
        b.submit(ticket, gen, tier, b.guard.meta(headers, gen.chat, gen.user))
        try:
            await ticket.changed.wait()
            req = ticket.submitted
            if ticket.done and req.finish_reason in ("rejected", "timeout", "error") and ticket.produced == 0:
                reason = req.reject_reason or req.finish_reason
                client = reason in ("context_too_long", "kv_capacity", "capability")  # no retry would change it
                status = 400 if client else 429 if reason in QUOTAS else 503
                return _error(status, f"request rejected: {reason}")
            if gen.stream:
                return await self._stream(request, ticket, gen)
            return await self._whole(ticket, gen)
        except asyncio.CancelledError:
            log.debug("%s: client went away, request aborted", b.name)
            raise
        finally:
            if not ticket.done:
                b.abort(ticket)  # the client went away (cancelled handler or failed write): free the engine

    async def _whole(self, ticket: Ticket, gen: Generation) -> web.Response:
        while not ticket.done:
            ticket.changed.clear()
            await ticket.changed.wait()
        req, produced = ticket.submitted, ticket.produced
        finish = FINISH.get(req.finish_reason, "abort")
        text = _text(0, produced)
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish,
                   "logprobs": None} if gen.chat else {"index": 0, "text": text, "finish_reason": finish, "logprobs": None})
        return web.json_response({"id": ("chatcmpl-" if gen.chat else "cmpl-") + uuid.uuid4().hex,
                                  "object": "chat.completion" if gen.chat else "text_completion",
                                  "created": int(time.time()), "model": self.b.model, "choices": [choice],
                                  "usage": _usage(req.prompt_tokens, produced)})

    async def _stream(self, request: web.Request, ticket: Ticket, gen: Generation) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        chat, transport = gen.chat, request.transport
        head = json.dumps({"id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
                           "object": "chat.completion.chunk" if chat else "text_completion",
                           "created": int(time.time()), "model": self.b.model})[:-1]

        def event(choice: dict | None, usage: dict | None = None) -> bytes:
            tail: dict[str, object] = {"choices": [choice] if choice is not None else []}
            if usage is not None:
                tail["usage"] = usage
            return b"data: " + (head + ", " + json.dumps(tail)[1:]).encode() + b"\n\n"

        def piece(i0: int, i1: int, finish: str | None = None) -> dict:
            if chat:
                delta = {"content": _text(i0, i1)} if i1 > i0 else {}
                if i0 == 0 and i1 > 0:
                    delta["role"] = "assistant"
                return {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            return {"index": 0, "text": _text(i0, i1), "finish_reason": finish, "logprobs": None}

        sent = 0
        try:
            while True:
                produced, done = ticket.produced, ticket.done
                if produced > sent:
                    await _write(resp, transport, event(piece(sent, produced)))
                    sent = produced
                if done:
                    break
                ticket.changed.clear()
                await ticket.changed.wait()
            await resp.write(event(piece(sent, sent, FINISH.get(ticket.submitted.finish_reason, "abort"))))
            if gen.include_usage:
                await resp.write(event(None, _usage(ticket.submitted.prompt_tokens, sent)))
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except ConnectionError as e:  # reset by the client, or it stopped reading: the caller aborts the request
            log.debug("%s: client went away mid-stream (%s)", self.b.name, e)
            if transport is not None:
                transport.close()
        return resp


def make_app(backend: Backend) -> web.Application:
    api = _Api(backend)
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[api.errors])
    app.router.add_get("/metrics", api.metrics)
    app.router.add_get("/health", api.health)
    app.router.add_get("/v1/models", api.models)
    app.router.add_post(CHAT, api.generate)
    app.router.add_post(COMPLETIONS, api.generate)
    return app
