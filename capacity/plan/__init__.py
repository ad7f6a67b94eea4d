"""Capacity plans: the memory budget of one deployment (``goodput plan memory``)."""

__all__: list[str] = []
