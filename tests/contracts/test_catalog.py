"""The metric catalog against its conventions and against docs/design.md, whose metric tables are rendered from it.

Regenerate the tables after a catalog change: ``python -m tests.contracts.test_catalog``.
"""

import re

import pytest

from goodput.contracts.catalog import CATALOG, COST, ENGINE, GATEWAY, GPU, KUBE, SELF, MetricSpec, names
from tests.conftest import REPO

DESIGN = REPO / "docs" / "design.md"
GROUPS = {"engine": ENGINE, "kube": KUBE, "gateway": GATEWAY, "gpu": GPU, "self": SELF, "cost": COST}
BLOCK = re.compile(r"(<!-- catalog:(\w+) [^>]*-->\n)(.*?)(<!-- /catalog:\2 -->)", re.S)


def render_table(specs: tuple[MetricSpec, ...]) -> str:
    """A Markdown table of ``specs``: name, type, unit, labels, meaning (the catalog's help text)."""
    rows = ["| name | type | unit | labels | meaning |", "|---|---|---|---|---|"]
    for m in specs:
        labels = ", ".join(f"`{label}`" for label in m.labels)
        rows.append(f"| `{m.name}` | {m.type} | {m.unit or '-'} | {labels} | {m.help} |")
    return "\n".join(rows) + "\n"


def render_design(text: str) -> str:
    """``text`` with every ``<!-- catalog:GROUP ... -->`` block replaced by the table the catalog renders now."""
    unknown = {m[2] for m in BLOCK.finditer(text)} - set(GROUPS)
    if unknown:
        raise ValueError(f"docs/design.md names catalog groups that do not exist: {sorted(unknown)}")
    return BLOCK.sub(lambda m: m[1] + render_table(GROUPS[m[2]]) + m[4], text)


def _contract(text: str) -> str:
    return text.split("## Metric contract", 1)[1].split("\n## ", 1)[0]


def test_design_tables_are_the_catalog():
    text = DESIGN.read_text()
    found = [m[2] for m in BLOCK.finditer(text)]
    assert sorted(found) == sorted(GROUPS), f"docs/design.md should hold one table per group, has {found}"
    assert render_design(text) == text, "docs/design.md's metric tables are stale: python -m tests.contracts.test_catalog"


def test_every_metric_the_design_names_is_in_the_catalog():
    """Prose too: a metric named anywhere in the contract, outside the generated tables, must exist."""
    contract = _contract(DESIGN.read_text())
    wanted = set(re.findall(r"`(llm_[a-z0-9_]+)`", contract))
    assert {m.name for m in CATALOG} <= wanted  # every family is documented
    assert wanted <= names(), sorted(wanted - names())


def test_a_stale_or_invented_table_is_caught():
    text = DESIGN.read_text()
    stale = text.replace("| `llm_engine_up` | gauge |", "| `llm_engine_up` | counter |", 1)
    assert stale != text and render_design(stale) != stale
    invented = _contract(text) + "\n| `llm_requests_teleported_total` | counter | - | | Made up. |\n"
    assert "llm_requests_teleported_total" in set(re.findall(r"`(llm_[a-z0-9_]+)`", invented)) - names()
    with pytest.raises(ValueError, match="gpus"):
        render_design("<!-- catalog:gpus (generated) -->\n<!-- /catalog:gpus -->\n")


def test_catalog_follows_prometheus_conventions():
    seen = set()
    for m in CATALOG:
        assert m.name not in seen
        seen.add(m.name)
        assert ":" not in m.name and m.name.startswith("llm_")
        assert m.name.endswith("_total") == (m.type == "counter"), m.name
        if m.unit == "seconds":
            assert m.name.endswith(("_seconds", "_seconds_total")), m.name
        if m.type == "histogram" and m.buckets is not None:
            assert list(m.buckets) == sorted(m.buckets)
        assert m.help.endswith(".")
        assert "|" not in m.help  # it lands in a Markdown table cell


if __name__ == "__main__":  # rewrite the tables in docs/design.md
    DESIGN.write_text(render_design(DESIGN.read_text()))
