"""The committed dashboards and their PromQL, as the tests read them (from the JSON, not from the generator)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from tests.conftest import REPO

DASHBOARDS = REPO / "dashboards"
# what the tests put for Grafana's variables: every value of a multi-value variable, and a rate window that
# covers four 1 s scrapes with room to spare
SUBSTITUTE = {"$__rate_interval": "1m", "$__interval": "1m"}
ALL = ".*"


@dataclass(frozen=True)
class Expr:
    where: str  # "fleet.json panel 3 B", "fleet.json annotation Releases", "fleet.json variable tier"
    raw: str

    @property
    def promql(self) -> str:
        """The expression as Grafana sends it with every variable at All, or the selector of a ``label_values``."""
        text = self.raw
        m = re.fullmatch(r"label_values\((.*), *\w+\)", text)
        if m:
            text = m[1]
        for var, value in SUBSTITUTE.items():
            text = text.replace(var, value)
        return re.sub(r"\$\w+", ALL, text)


def boards() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def expressions() -> list[Expr]:
    out = []
    for name, board in boards().items():
        for p in board["panels"]:
            out += [Expr(f"{name} panel {p['id']} {t['refId']}", t["expr"]) for t in p["targets"]]
        out += [Expr(f"{name} annotation {a['name']}", a["expr"]) for a in board["annotations"]["list"]]
        out += [Expr(f"{name} variable {v['name']}", v["query"]["query"]) for v in board["templating"]["list"]
                if v["type"] == "query"]
    return out
