"""The OpenAI-compatible HTTP face of one live replica.

Serves ``POST /v1/completions`` and ``POST /v1/chat/completions`` (streaming SSE paced by the
simulated engine, or one JSON answer), ``GET /v1/models``, ``GET /health`` and ``GET /metrics``.
The "model" generates filler words; what matters is when each token arrives and the usage counts.
"""

from __future__ import annotations

import json
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from goodput.foundation.errors import ConfigError
from simulator.request import TIER_RANK
from simulator.spans import parse_traceparent

if TYPE_CHECKING:
    from simulator.live import LiveFleet, ReplicaServer

__all__ = ["ReplicaHTTPServer", "make_server"]

MAX_BODY_BYTES = 4 * 1024 * 1024
WORDS = (" the", " fleet", " serves", " tokens", " under", " load", " with", " queues", " and", " caches", " today")
POLL_S = 0.005


class ReplicaHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    live: LiveFleet
    replica: ReplicaServer


class _BadRequest(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _prompt_tokens(path: str, body: dict) -> int:
    if path == "/v1/chat/completions":
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise _BadRequest(400, "'messages' must be a non-empty list")
        total = 3
        for m in msgs:
            if not isinstance(m, dict):
                raise _BadRequest(400, "each message must be an object")
            content = m.get("content", "")
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            total += 4 + _estimate_tokens(str(content))
        return total
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return _estimate_tokens(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return _estimate_tokens(prompt[0])
    raise _BadRequest(400, "'prompt' must be a string or a list of token ids")


class Handler(BaseHTTPRequestHandler):
    server: ReplicaHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "goodput-sim/0.1"
    disable_nagle_algorithm = True  # every SSE chunk goes out when written

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - BaseHTTPRequestHandler's signature
        pass

    # --------------------------------------------------------------- plumbing

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: dict) -> None:
        self._send(status, json.dumps(obj).encode())

    def _error(self, status: int, message: str, kind: str) -> None:
        self._json(status, {"error": {"message": message, "type": kind, "code": status}, "object": "error"})

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    # --------------------------------------------------------------- routes

    def do_GET(self) -> None:
        rs = self.server.replica
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, generate_latest(rs.registry), CONTENT_TYPE_LATEST)
        elif path == "/health":
            self._send(200, b"", "text/plain")
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [{
                "id": rs.model, "object": "model", "created": int(self.server.live.started), "owned_by": "goodput",
                "root": rs.model, "max_model_len": rs.max_model_len}]})
        else:
            self._error(404, f"no route {path}", "not_found")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if path not in ("/v1/completions", "/v1/chat/completions"):
            self._error(404, f"no route {path}", "not_found")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self._error(400, "bad Content-Length", "invalid_request_error")
            return
        if length > MAX_BODY_BYTES:
            self._error(413, f"body larger than {MAX_BODY_BYTES} bytes", "invalid_request_error")
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(body, dict):
                raise _BadRequest(400, "body must be a JSON object")
            self._generate(path, body)
        except json.JSONDecodeError as e:
            self._error(400, f"body is not JSON: {e}", "invalid_request_error")
        except _BadRequest as e:
            self._error(e.status, str(e), e.kind)

    def _generate(self, path: str, body: dict) -> None:
        live, rs = self.server.live, self.server.replica
        chat = path == "/v1/chat/completions"
        prompt = _prompt_tokens(path, body)
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise _BadRequest(400, "max_tokens must be a positive integer")
        h = self.headers
        tier = h.get("x-tier", "P1")
        if tier not in TIER_RANK:
            raise _BadRequest(400, f"x-tier must be one of {', '.join(TIER_RANK)}")
        meta = {"tenant": h.get("x-tenant") or body.get("user") or "default", "route": h.get("x-route") or
                ("chat" if chat else "completions"), "scene": h.get("x-scene") or "chat",
                "operation": "chat" if chat else "text_completion", "workload": "http"}
        if (context := parse_traceparent(h.get("traceparent"))) is not None:  # W3C trace context, continued
            meta["traceparent"] = context
        req = live.submit_http(rs, prompt, max_tokens, tier, meta, bool(body.get("ignore_eos")))
        if req.finish_reason in ("rejected", "timeout", "error"):
            status = 400 if req.reject_reason == "context_too_long" else 503
            raise _BadRequest(status, f"request rejected: {req.reject_reason or req.finish_reason}",
                              "BadRequestError" if status == 400 else "ServiceUnavailableError")
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        if body.get("stream"):
            self._stream(req, rid, created, chat, rs.model, bool((body.get("stream_options") or {}).get("include_usage")))
        else:
            produced = live.wait(req, rs)
            text = "".join(WORDS[i % len(WORDS)] for i in range(produced))
            finish = "stop" if req.finish_reason == "stop" else ("length" if req.finish_reason == "length" else "abort")
            choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish,
                       "logprobs": None} if chat else
                      {"index": 0, "text": text, "finish_reason": finish, "logprobs": None})
            self._json(200, {"id": rid, "object": "chat.completion" if chat else "text_completion",
                             "created": created, "model": rs.model, "choices": [choice],
                             "usage": _usage(req.prompt_tokens, produced)})

    def _stream(self, req, rid: str, created: int, chat: bool, model: str, include_usage: bool) -> None:
        live, rs = self.server.live, self.server.replica
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        obj = "chat.completion.chunk" if chat else "text_completion"

        def event(choice: dict | None, usage: dict | None = None) -> None:
            payload = {"id": rid, "object": obj, "created": created, "model": model,
                       "choices": [choice] if choice is not None else []}
            if usage is not None:
                payload["usage"] = usage
            self._chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")

        def piece(i0: int, i1: int, finish: str | None = None) -> dict:
            text = "".join(WORDS[i % len(WORDS)] for i in range(i0, i1))
            if chat:
                delta = {"content": text} if i1 > i0 else {}
                if i0 == 0 and i1 > 0:
                    delta["role"] = "assistant"
                return {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            return {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}

        sent = 0
        try:
            while True:
                produced, done = live.progress(req, rs)
                if produced > sent:
                    event(piece(sent, produced))
                    sent = produced
                if done:
                    break
                time.sleep(POLL_S)
            finish = {"stop": "stop", "length": "length"}.get(req.finish_reason, "abort")
            event(piece(sent, sent, finish))
            if include_usage:
                event(None, _usage(req.prompt_tokens, sent))
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            live.abort(req)


def _usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def make_server(host: str, port: int, live: LiveFleet, replica: ReplicaServer) -> ReplicaHTTPServer:
    try:
        srv = ReplicaHTTPServer((host, port), Handler)
    except OSError as e:
        raise ConfigError(f"{host}:{port}", "", f"cannot listen for replica {replica.name}: {e.strerror or e}") from None
    srv.live = live
    srv.replica = replica
    return srv
