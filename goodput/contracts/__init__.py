"""The names every part shares and other systems rely on: the metric catalog (``catalog``), the recorded-rule
names (``recorded``), the dashboards' addresses (``dashboard_ids``) and the vocabulary of requests, tiers,
releases and refusals (``vocabulary``).

Standard library only, and below everything but the foundation: the analyzer, the console and the exporters read
these names without importing the simulator (``tests/test_layers.py``).
"""

__all__: list[str] = []
