"""``goodput loadtest``: drive an OpenAI-compatible target under an arrival pattern and measure SLO goodput.

The public names below are imported on first use, so ``import capacity.loadtest`` does not load httpx.
"""

from goodput.foundation.lazy import lazy_exports

_EXPORTS = {
    "RequestRecord": "capacity.loadtest.records",
}
__all__ = lazy_exports(__name__, _EXPORTS)
