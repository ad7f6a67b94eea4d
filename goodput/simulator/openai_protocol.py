"""What the OpenAI face accepts, checked the way vLLM's OpenAI server checks it: pure functions, no I/O.

The rules follow vLLM's ``entrypoints/openai/protocol.py`` (field types) and ``SamplingParams._verify_args``
(ranges): a wrong type or an out-of-range sampling parameter is a 400, an unknown model a 404, a prompt plus
``max_tokens`` beyond ``max_model_len`` a 400 with vLLM's message. Every refusal carries a short ``reason``
(a bounded set, ``REFUSAL_REASONS``) under which the live fleet counts it. docs/simulator.md lists the
differences from vLLM that remain.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from goodput.foundation.errors import long_integer
from goodput.simulator.tokenizer import count_tokens

__all__ = ["REFUSAL_REASONS", "ROLES", "ApiError", "Generation", "error_body", "parse_body", "validate"]

# why a request was refused before the engine saw it (the label values it is counted under)
REFUSAL_REASONS = ("malformed_json", "invalid_request", "unsupported_parameter", "model_not_found", "context_too_long",
                   "body_too_large", "method_not_allowed", "invalid_header")
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowedError", 408: "RequestTimeoutError",
               413: "RequestEntityTooLargeError", 503: "ServiceUnavailableError"}
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


class ApiError(Exception):
    """A request refused with an HTTP status; ``reason`` is the bounded label it is counted under."""

    def __init__(self, status: int, message: str, reason: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.reason, self.param = status, reason, param


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    """OpenAI's error shape, with vLLM's ``type`` names and the HTTP status as ``code``."""
    err = {"message": message, "type": ERROR_TYPES.get(status, "InternalServerError"), "param": param, "code": status}
    return json.dumps({"error": err}).encode()


@dataclass(frozen=True)
class Generation:
    """A valid request, as the engine needs it."""

    chat: bool
    prompt_tokens: int
    max_tokens: int | None
    stream: bool
    include_usage: bool
    ignore_eos: bool
    user: str | None


def parse_body(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(400, f"body is not JSON: {e}", "malformed_json") from None
    except RecursionError:  # the decoder's own depth limit (the interpreter's recursion limit, ~1000 levels)
        raise ApiError(400, f"body is nested more than {sys.getrecursionlimit()} levels deep", "malformed_json") from None
    except ValueError:  # after JSONDecodeError, its subclass: an integer past Python's int/str conversion limit
        raise ApiError(400, f"body is not usable JSON: {long_integer()}", "malformed_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "body must be a JSON object", "malformed_json")
    return body


def _bad(param: str, problem: str) -> ApiError:
    return ApiError(400, f"{param}: {problem}", "invalid_request", param)


def _typed(body: dict, key: str, types: tuple[type, ...], name: str):
    """``body[key]`` if it has one of ``types`` (bool is never a number here), None when absent or null."""
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) and bool not in types or not isinstance(v, types):
        raise _bad(key, f"must be {name}, got {type(v).__name__}")
    return v


def _in_range(body: dict, key: str, lo: float, hi: float, lo_open: bool = False) -> None:
    v = _typed(body, key, (int, float), "a number")
    if v is not None and not ((lo < v if lo_open else lo <= v) and v <= hi):
        raise _bad(key, f"must be in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {v}")


def _content_tokens(content, where: str, tok: str | None) -> int:
    if content is None or isinstance(content, str):
        return count_tokens(content or "", tok)
    if not isinstance(content, list):
        raise _bad(where, "must be a string or a list of content parts")
    text = []
    for part in content:
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise _bad(where, "each content part must be an object with a 'type'")
        if part["type"] == "text":
            if not isinstance(part.get("text"), str):
                raise _bad(where, "a text part needs a string 'text'")
            text.append(part["text"])
    return count_tokens(" ".join(text), tok)


def _chat_prompt(body: dict, tok: str | None) -> int:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise _bad("messages", "must be a non-empty list")
    total = 3
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _bad(where, "must be an object")
        role = m.get("role")
        if role not in ROLES:
            raise _bad(f"{where}.role", f"must be one of {', '.join(ROLES)}, got {json.dumps(role)[:40]}")
        total += 4 + _content_tokens(m.get("content"), f"{where}.content", tok)
    return total


def _completion_prompt(body: dict, tok: str | None) -> int:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return count_tokens(prompt, tok)
    if isinstance(prompt, list) and prompt and all(isinstance(x, int) and not isinstance(x, bool) for x in prompt):
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(x, str | list) for x in prompt):
        raise ApiError(400, "prompt: a batch of several prompts is not supported by the simulated fleet",
                       "unsupported_parameter", "prompt")
    raise _bad("prompt", "must be a string, a list of token ids, or a batch of one of them")


def validate(path: str, body: dict, model: str, max_model_len: int, tokenizer: str | None = None) -> Generation:
    """Check ``body`` for ``path`` against the served ``model``; raise ``ApiError`` as vLLM would refuse it.
    Prompts are counted by the model's ``tokenizer`` (a checked ``tokenizer.json`` path), else the shipped BPE."""
    chat = path == CHAT
    name = _typed(body, "model", (str,), "a string")
    if name is not None and name != model:
        raise ApiError(404, f"The model `{name}` does not exist.", "model_not_found", "model")
    prompt = _chat_prompt(body, tokenizer) if chat else _completion_prompt(body, tokenizer)
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _typed(body, key, (int,), "an integer")
    if max_tokens is not None and max_tokens < 1:
        raise _bad(key, f"must be at least 1, got {max_tokens}")
    n = _typed(body, "n", (int,), "an integer")
    if n is not None and n < 1:
        raise _bad("n", f"must be at least 1, got {n}")
    if n is not None and n > 1:
        raise ApiError(400, f"n: only n=1 is supported by the simulated fleet, got {n}", "unsupported_parameter", "n")
    _in_range(body, "temperature", 0.0, float("inf"))
    _in_range(body, "top_p", 0.0, 1.0, lo_open=True)
    _in_range(body, "min_p", 0.0, 1.0)
    _in_range(body, "presence_penalty", -2.0, 2.0)
    _in_range(body, "frequency_penalty", -2.0, 2.0)
    _in_range(body, "repetition_penalty", 0.0, float("inf"), lo_open=True)
    top_k = _typed(body, "top_k", (int,), "an integer")
    if top_k is not None and top_k < -1:
        raise _bad("top_k", f"must be -1 or 0 (disable), or at least 1, got {top_k}")
    _typed(body, "seed", (int,), "an integer")
    stop = body.get("stop")
    if stop is not None and not (isinstance(stop, str) or isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise _bad("stop", "must be a string or a list of strings")
    stream = bool(_typed(body, "stream", (bool,), "a boolean"))
    options = _typed(body, "stream_options", (dict,), "an object")
    if options is not None and not stream:
        raise _bad("stream_options", "can only be given when stream is true")
    include_usage = bool(_typed(options or {}, "include_usage", (bool,), "a boolean"))
    ignore_eos = bool(_typed(body, "ignore_eos", (bool,), "a boolean"))
    user = _typed(body, "user", (str,), "a string")
    if prompt >= max_model_len:
        raise ApiError(400, f"This model's maximum context length is {max_model_len} tokens. However, your request has "
                            f"{prompt} input tokens. Please reduce the length of the input.", "context_too_long")
    if max_tokens is not None and prompt + max_tokens > max_model_len:
        raise ApiError(400, f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                            f"{prompt + max_tokens} tokens ({prompt} in the messages, {max_tokens} in the completion). "
                            "Please reduce the length of the messages or completion.", "context_too_long", key)
    return Generation(chat, prompt, max_tokens, stream, include_usage, ignore_eos, user)
