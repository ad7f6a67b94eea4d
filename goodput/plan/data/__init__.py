"""The plan's data files (``prices.yaml``), read with ``importlib.resources``."""

__all__: list[str] = []
