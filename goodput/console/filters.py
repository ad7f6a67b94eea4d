"""The sidebar's shared filters and their form in the URL query string (so an alert can link to a page).

A value from the URL is data, never code: the time range must be one of ``RANGES``, the others are label
values that reach SQL only as parameters and PromQL only through ``label_matchers`` (quoted, escaped).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

__all__ = ["DIMENSIONS", "RANGES", "Filters", "label_matchers"]

RANGES = {"15m": timedelta(minutes=15), "1h": timedelta(hours=1), "6h": timedelta(hours=6),
          "24h": timedelta(days=1), "7d": timedelta(days=7), "all": None}
DIMENSIONS = ("deployment", "tier", "tenant")
MAX_VALUE = 200  # a label value longer than this in a URL is not a label value


@dataclass(frozen=True)
class Filters:
    range: str = "1h"
    deployment: str | None = None
    tier: str | None = None
    tenant: str | None = None

    @classmethod
    def from_query(cls, params: Mapping[str, str | list[str]]) -> tuple[Filters, list[str]]:
        """Filters from a query string, and the keys that were ignored because their value was not valid."""
        def one(key: str) -> str | None:
            v = params.get(key)
            v = v[-1] if isinstance(v, list) and v else v
            return v if isinstance(v, str) and v else None

        bad = []
        f = cls()
        r = one("range")
        if r is not None:
            if r in RANGES:
                f = replace(f, range=r)
            else:
                bad.append("range")
        for dim in DIMENSIONS:
            v = one(dim)
            if v is None:
                continue
            if len(v) > MAX_VALUE or any(ord(c) < 32 for c in v):
                bad.append(dim)
            else:
                f = replace(f, **{dim: v})
        return f, bad

    def query(self) -> dict[str, str]:
        """The query string that reproduces these filters (defaults left out)."""
        q = {"range": self.range} if self.range != Filters.range else {}
        q.update({d: getattr(self, d) for d in DIMENSIONS if getattr(self, d)})
        return q

    def window(self, end: datetime) -> tuple[datetime | None, datetime]:
        """(since, until) of the range ending at ``end`` (``since`` None for all time); ``until`` is exclusive, so
        it is nudged past ``end`` to keep the newest request."""
        until = end + timedelta(microseconds=1)
        span = RANGES[self.range]
        return (None if span is None else end - span), until

    def sql_params(self, end: datetime) -> dict:
        since, until = self.window(end)
        return {"since": since, "until": until, **{d: getattr(self, d) for d in DIMENSIONS}}


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def label_matchers(filters: Filters, labels: tuple[str, ...] = ("deployment", "tier")) -> str:
    """``deployment="x",tier="y"`` for the filters set among ``labels`` (a series without that label is not matched)."""
    return ",".join(f"{d}={_quote(getattr(filters, d))}" for d in labels if getattr(filters, d))

