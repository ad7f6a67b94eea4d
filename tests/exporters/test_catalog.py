import re

from exporters.catalog import CATALOG, names
from tests.conftest import REPO


def test_every_design_metric_is_in_the_catalog():
    design = (REPO / "docs" / "design.md").read_text()
    contract = design.split("## Metric contract", 1)[1].split("## Span model", 1)[0]
    wanted = set(re.findall(r"`(llm_[a-z_]+)`", contract))
    assert len(wanted) >= 39
    assert wanted <= names(), sorted(wanted - names())


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
