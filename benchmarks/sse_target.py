"""A cheap OpenAI-compatible streaming target for client benchmarks: it costs little, so the client is what is measured.

``python -m benchmarks.sse_target --port P [--itl-ms 10] [--model M]`` serves ``GET /v1/models``, ``GET /health``
and streaming ``POST /v1/chat/completions`` / ``/v1/completions`` over HTTP/1.1 keep-alive (chunked). Every stream
gets a role chunk at once, then one content chunk per tick of a single ``--itl-ms`` timer shared by all streams (as
an engine's decode step serves its whole batch), then the usage chunk and ``[DONE]``. The chunks are encoded once at
start-up; per token the server does one ``transport.write``. Raw asyncio protocol, no framework: at 64,000 tokens/s
it needs a fraction of a core, where the simulated fleet needs two.
"""

from __future__ import annotations

import argparse
import asyncio
import json

MODEL = "bench-model"


def _chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: dict) -> bytes:
    return _chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


class Chunks:
    """The pre-encoded SSE chunks of one API (chat or completions)."""

    def __init__(self, chat: bool, model: str) -> None:
        kind = "chat.completion.chunk" if chat else "text_completion"
        head = {"id": "cmpl-bench", "object": kind, "created": 0, "model": model}

        def choice(text: str, finish=None) -> dict:
            return ({"index": 0, "delta": {"content": text}, "finish_reason": finish} if chat
                    else {"index": 0, "text": text, "finish_reason": finish})
        first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None} if chat else choice("")
        self.role = _event({**head, "choices": [first]})
        self.token = _event({**head, "choices": [choice(" tok")]})
        self.last = _event({**head, "choices": [choice(" end", "length")]})
        self.head = {k: v for k, v in head.items()}

    def usage(self, prompt: int, completion: int) -> bytes:
        return _event({**self.head, "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                                             "total_tokens": prompt + completion}})


DONE = _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


class Server:
    """The streams in flight and the one timer that advances them all."""

    def __init__(self, itl_s: float, model: str) -> None:
        self.itl_s, self.model = itl_s, model
        self.chunks = {True: Chunks(True, model), False: Chunks(False, model)}
        self.streams: dict[asyncio.Transport, list] = {}  # transport -> [chunks, tokens left, prompt, usage, total]
        self.next_tick: float | None = None

    def start(self, transport: asyncio.Transport, chat: bool, tokens: int, prompt: int, usage: bool) -> None:
        c = self.chunks[chat]
        transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                        + c.role)
        self.streams[transport] = [c, max(1, tokens), prompt, usage, max(1, tokens)]
        if self.next_tick is None:
            loop = asyncio.get_running_loop()
            self.next_tick = loop.time() + self.itl_s
            loop.call_at(self.next_tick, self.tick)

    def tick(self) -> None:
        done = []
        for transport, s in self.streams.items():
            s[1] -= 1
            if s[1] > 0:
                transport.write(s[0].token)
            else:
                transport.write(s[0].last + (s[0].usage(s[2], s[4]) if s[3] else b"") + DONE)
                done.append(transport)
        for transport in done:
            del self.streams[transport]
        loop = asyncio.get_running_loop()
        if self.streams:
            self.next_tick += self.itl_s  # a fixed pace: a late tick does not push the later ones back
            loop.call_at(self.next_tick, self.tick)
        else:
            self.next_tick = None


class Connection(asyncio.Protocol):
    """One keep-alive connection: requests parsed from the bytes as they come."""

    def __init__(self, server: Server) -> None:
        self.server, self.buf, self.transport = server, b"", None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.server.streams.pop(self.transport, None)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1").split("\r\n")
            length = next((int(h.split(":", 1)[1]) for h in head[1:] if h.lower().startswith("content-length:")), 0)
            if len(self.buf) < end + 4 + length:
                return
            body, self.buf = self.buf[end + 4:end + 4 + length], self.buf[end + 4 + length:]
            self.handle(head[0].split(" "), body)

    def _answer(self, status: str, obj: dict) -> None:
        body = json.dumps(obj).encode()
        self.transport.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
                             f"\r\n\r\n".encode() + body)

    def handle(self, line: list[str], body: bytes) -> None:
        method, path = line[0], line[1] if len(line) > 1 else "/"
        if method == "GET" and path == "/v1/models":
            self._answer("200 OK", {"object": "list", "data": [{"id": self.server.model, "object": "model"}]})
        elif method == "GET" and path == "/health":
            self._answer("200 OK", {"status": "ok"})
        elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            req = json.loads(body)
            prompt = len(json.dumps(req.get("messages") or req.get("prompt") or "")) // 4
            self.server.start(self.transport, path.endswith("chat/completions"), int(req.get("max_tokens") or 16),
                              prompt, bool((req.get("stream_options") or {}).get("include_usage")))
        else:
            self._answer("404 Not Found", {"error": {"message": f"no {method} {path}"}})


async def serve(port: int, itl_s: float, model: str) -> None:
    server = Server(itl_s, model)
    srv = await asyncio.get_running_loop().create_server(lambda: Connection(server), "127.0.0.1", port, backlog=4096)
    async with srv:
        await srv.serve_forever()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sse_target", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--itl-ms", type=float, default=10.0, help="the gap between a stream's tokens (default 10)")
    p.add_argument("--model", default=MODEL)
    args = p.parse_args(argv)
    asyncio.run(serve(args.port, args.itl_ms / 1e3, args.model))


if __name__ == "__main__":
    main()
