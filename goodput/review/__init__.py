"""``goodput review`` and ``goodput week``: the weekly capacity review from Prometheus (or a store answering its API)
or from a trace store, and a compressed simulated week backfilled into a TSDB to review."""

__all__: list[str] = []
