"""What a client's headers may say about its request, bounded: tenant, tier, route, scene and W3C trace context.

Each value becomes a label (of spans, then of ``llm_gateway_*`` series), so none may grow without bound:
routes and scenes outside the fleet file's workloads read ``other``, every value is cut to
``MAX_LABEL_CHARS``, and tenants are bounded later by the request exporter's top-N guard.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from goodput.contracts.vocabulary import TIER_RANK
from goodput.simulator.config import FleetConfig

__all__ = ["MAX_LABEL_CHARS", "OTHER", "LabelGuard", "parse_traceparent"]

MAX_LABEL_CHARS = 64
OTHER = "other"
DEFAULT_ROUTES = ("chat", "completions")  # what a request without x-route is labelled, by endpoint
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def parse_traceparent(value: str | None) -> tuple[str, str] | None:
    """(trace id, parent span id) of a valid version-00 W3C ``traceparent``; None for anything else."""
    if not value:
        return None
    m = _TRACEPARENT.fullmatch(value.strip())
    if m is None or m.group(1) == "0" * 32 or m.group(2) == "0" * 16:
        return None
    return m.group(1), m.group(2)


def _cap(value: str) -> str:
    return value[:MAX_LABEL_CHARS]


@dataclass(frozen=True)
class LabelGuard:
    """The routes and scenes a fleet knows; anything else a client sends is folded into ``other``."""

    routes: frozenset[str]
    scenes: frozenset[str]

    @classmethod
    def of(cls, cfg: FleetConfig) -> LabelGuard:
        return cls(frozenset(w.route for w in cfg.workloads) | frozenset(DEFAULT_ROUTES),
                   frozenset(w.scene for w in cfg.workloads) | {"chat"})

    def tier(self, headers: Mapping[str, str]) -> str | None:
        """The request's tier (P1 when not given); None when the header names no tier."""
        tier = headers.get("x-tier") or "P1"
        return tier if tier in TIER_RANK else None

    def meta(self, headers: Mapping[str, str], chat: bool, user: str | None) -> dict:
        """``Request.meta`` for a live request: labels from the headers, guarded; the trace context if valid."""
        route = headers.get("x-route") or ("chat" if chat else "completions")
        scene = headers.get("x-scene") or "chat"
        meta: dict[str, str | tuple[str, str]] = {
            "tenant": _cap(headers.get("x-tenant") or user or "default"),
            "route": route if route in self.routes else OTHER,
            "scene": scene if scene in self.scenes else OTHER,
            "operation": "chat" if chat else "text_completion",
            "workload": "http",
        }
        trace = parse_traceparent(headers.get("traceparent"))
        if trace is not None:
            meta["traceparent"] = trace
        return meta
