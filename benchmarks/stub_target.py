"""A cheap OpenAI-compatible streaming target, so that a load-test *client* is what a benchmark measures.

``python -m benchmarks.stub_target --port P [--itl-ms 10] [--model M]`` (its own process; ``start()`` runs it from a
benchmark) serves, over HTTP/1.1 keep-alive:

- ``GET /health`` and ``GET /v1/models`` (what GuideLLM's backend validation and ``goodput loadtest``'s preflight ask);
- ``POST /v1/chat/completions`` and ``POST /v1/completions``, streaming (chunked SSE) or not: a chat stream gets
  its role chunk at once, then one content chunk per tick of a single ``--itl-ms`` timer shared by every stream
  (as an engine's decode step serves its whole batch) until ``max_tokens`` / ``max_completion_tokens``, then, when
  ``stream_options.include_usage`` asks, the usage chunk (``prompt_tokens`` counted as the simulated fleet does:
  4 characters a token), and ``data: [DONE]``;
- ``GET /stats``: requests answered, content tokens streamed, timer ticks, streams in flight, and this process's CPU
  seconds, so a benchmark can tell whether the target, not the client, was the limit (busy, or ticking slower
  than ``--itl-ms``).

The SSE chunks are encoded once at start-up; per token the server does one ``transport.write``. A raw asyncio
protocol, no framework and no per-request task: it needs a small fraction of a core where the simulated fleet needs
whole cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["MODEL", "start"]

MODEL = "stub-model"
MAX_HEAD = 64 * 1024
MAX_BODY = 16 * 1024 * 1024
MAX_TOKENS = 1_000_000  # one stream's cap, checked before it starts


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: dict) -> bytes:
    return _chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


DONE = _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n")


class _Api:
    """The pre-encoded chunks of one API (chat or completions)."""

    def __init__(self, chat: bool, model: str) -> None:
        self.head = {"id": "cmpl-stub", "object": "chat.completion.chunk" if chat else "text_completion",
                     "created": 0, "model": model}

        def choice(text: str, finish: str | None = None) -> dict:
            return ({"index": 0, "delta": {"content": text}, "finish_reason": finish} if chat
                    else {"index": 0, "text": text, "finish_reason": finish})
        self.first = _event({**self.head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                        "finish_reason": None}]}) if chat else b""
        self.token = _event({**self.head, "choices": [choice(" tok")]})
        self.last = _event({**self.head, "choices": [choice(" end", "length")]})

    def usage(self, prompt: int, completion: int) -> bytes:
        return _event({**self.head, "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                                             "total_tokens": prompt + completion}})


def _prompt_tokens(body: dict, chat: bool) -> int:
    """Prompt tokens as the simulated fleet estimates them: characters / 4 (chat: 3 + 4 per message)."""
    if not chat:
        prompt = body.get("prompt")
        return max(1, len(prompt) // 4) if isinstance(prompt, str) else len(prompt or [])
    total = 3
    for m in body.get("messages") or []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        total += 4 + max(1, len(content or "") // 4)
    return total


class Stub:
    """Every stream in flight, advanced together by one timer; the counters ``/stats`` reports."""

    def __init__(self, itl_s: float, model: str) -> None:
        self.itl_s, self.model = itl_s, model
        self.apis = {True: _Api(True, model), False: _Api(False, model)}
        self.streams: dict[asyncio.Transport, list] = {}  # transport -> [api, tokens left, total, prompt, usage]
        self.ticking = False
        self.requests = 0
        self.tokens = 0
        self.ticks = 0

    def stream(self, transport: asyncio.Transport, chat: bool, tokens: int, prompt: int, usage: bool) -> None:
        api = self.apis[chat]
        transport.write(STREAM_HEAD + _chunk(b": stub\n\n") + api.first)  # headers and a comment flushed at once
        self.streams[transport] = [api, tokens, tokens, prompt, usage]
        if not self.ticking:
            self.ticking = True
            loop = asyncio.get_running_loop()
            loop.call_at(loop.time() + self.itl_s, self.tick, loop.time() + self.itl_s)

    def tick(self, due: float) -> None:
        self.ticks += 1
        done = []
        for transport, s in self.streams.items():
            if transport.is_closing():
                done.append(transport)
                continue
            s[1] -= 1
            self.tokens += 1
            if s[1] > 0:
                transport.write(s[0].token)
            else:
                transport.write(s[0].last + (s[0].usage(s[3], s[2]) if s[4] else b"") + DONE)
                done.append(transport)
        for t in done:
            del self.streams[t]
        if self.streams:
            loop = asyncio.get_running_loop()
            nxt = max(due + self.itl_s, loop.time())  # a late tick does not make the next ones bunch up
            loop.call_at(nxt, self.tick, nxt)
        else:
            self.ticking = False

    def stats(self) -> dict:
        t = os.times()
        return {"requests": self.requests, "tokens": self.tokens, "ticks": self.ticks, "in_flight": len(self.streams),
                "cpu_s": t.user + t.system, "unix_time": time.time()}


def _response(status: str, body: bytes, kind: str = "application/json") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


class _Conn(asyncio.Protocol):
    def __init__(self, stub: Stub) -> None:
        self.stub = stub
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.stub.streams.pop(self.transport, None)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while self.transport is not None and not self.transport.is_closing():
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD:
                    self._fail("431 Request Header Fields Too Large", "request head too large")
                return
            lines = self.buf[:end].decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                return self._fail("400 Bad Request", "bad content-length")
            if length > MAX_BODY:
                return self._fail("413 Payload Too Large", f"body over {MAX_BODY} bytes")
            if len(self.buf) < end + 4 + length:
                return  # the rest of the body is still coming
            body, self.buf = self.buf[end + 4:end + 4 + length], self.buf[end + 4 + length:]
            method, path, *_ = lines[0].split(" ") + ["", ""]
            self._answer(method, path.split("?")[0], body)

    def _fail(self, status: str, message: str) -> None:
        self.transport.write(_response(status, json.dumps({"error": {"message": message}}).encode()))
        self.transport.close()

    def _answer(self, method: str, path: str, raw: bytes) -> None:
        stub, t = self.stub, self.transport
        if method == "GET" and path == "/health":
            t.write(_response("200 OK", b"{}"))
        elif method == "GET" and path == "/v1/models":
            t.write(_response("200 OK", json.dumps({"object": "list", "data": [
                {"id": stub.model, "object": "model", "owned_by": "stub", "max_model_len": 1 << 20}]}).encode()))
        elif method == "GET" and path == "/stats":
            t.write(_response("200 OK", json.dumps(stub.stats()).encode()))
        elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            chat = path == "/v1/chat/completions"
            try:
                body = json.loads(raw)
                tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
                prompt = _prompt_tokens(body, chat)
            except (ValueError, TypeError, AttributeError) as e:
                return t.write(_response("400 Bad Request", json.dumps({"error": {"message": str(e)}}).encode()))
            if not 1 <= tokens <= MAX_TOKENS:
                return t.write(_response("400 Bad Request", b'{"error": {"message": "max_tokens out of range"}}'))
            stub.requests += 1
            if body.get("stream"):
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                stub.stream(t, chat, tokens, prompt, usage)
            else:
                stub.tokens += tokens
                text = " tok" * tokens
                choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                          if chat else {"index": 0, "text": text, "finish_reason": "length"})
                t.write(_response("200 OK", json.dumps({**stub.apis[chat].head, "choices": [choice], "usage": {
                    "prompt_tokens": prompt, "completion_tokens": tokens, "total_tokens": prompt + tokens}}).encode()))
        else:
            t.write(_response("404 Not Found", b'{"error": {"message": "not found"}}'))


async def serve(port: int, itl_s: float, model: str, host: str = "127.0.0.1") -> None:
    stub = Stub(itl_s, model)
    server = await asyncio.get_running_loop().create_server(lambda: _Conn(stub), host, port, backlog=4096)
    async with server:
        await server.serve_forever()


def start(port: int, itl_ms: float = 10.0, model: str = MODEL) -> subprocess.Popen:
    """The stub in a process of its own on ``port`` (the caller waits for ``/health`` and terminates it)."""
    return subprocess.Popen([sys.executable, "-m", "benchmarks.stub_target", "--port", str(port),
                             "--itl-ms", f"{itl_ms:g}", "--model", model],
                            cwd=Path(__file__).resolve().parents[1], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.stub_target", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--itl-ms", type=float, default=10.0, help="gap between tokens, every stream (default 10)")
    p.add_argument("--model", default=MODEL, help=f"the one model served (default {MODEL})")
    args = p.parse_args(argv)
    if args.itl_ms <= 0:
        p.error("--itl-ms must be positive")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port, args.itl_ms / 1000.0, args.model, args.host))


if __name__ == "__main__":
    main(sys.argv[1:])
