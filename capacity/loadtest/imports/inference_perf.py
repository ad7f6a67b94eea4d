"""inference-perf (kubernetes-sigs) 0.7 reports."""

from __future__ import annotations


def detect(data: object) -> str:
    return ""


def in_directory(path) -> bool:
    return False
