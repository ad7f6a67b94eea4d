"""goodput: observability, alerting and capacity planning for LLM inference fleets."""

__all__ = ["__version__"]

__version__ = "0.1.0"
