"""docs/console.md's figures of the demo's incident are the code's (before: its RAG plan row said 12,000 tokens/s per
replica while goodput/demo/incident.py planned 15,000)."""

from __future__ import annotations

import re

from goodput.demo.incident import RAG_REPLICA_GOODPUT
from tests.conftest import REPO


def test_the_rag_plan_row_in_the_console_doc_is_the_code_s():
    text = " ".join((REPO / "docs" / "console.md").read_text().split())
    (figure,) = re.findall(r"`RAG_REPLICA_GOODPUT`: ([\d,]+) tokens/s per replica", text)
    assert int(figure.replace(",", "")) == RAG_REPLICA_GOODPUT
    assert not re.search(r"plan row is its own \(\d", text)  # no second, hand-kept figure beside it
