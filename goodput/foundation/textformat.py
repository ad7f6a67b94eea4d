"""The Prometheus text exposition format (0.0.4) as served: its content type, importable without the HTTP stack
(``exporter engine normalize`` renders the format but serves nothing, and starts faster for it)."""

__all__ = ["CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
