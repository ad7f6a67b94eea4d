"""Capacity planning: load tests that measure SLO goodput (``capacity.loadtest``)."""

__all__: list[str] = []
