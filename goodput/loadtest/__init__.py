"""``goodput loadtest``: drive an OpenAI-compatible target under an arrival pattern and measure SLO goodput.

The public names below are imported on first use, so ``import goodput.loadtest`` does not load httpx.
"""

from goodput.foundation.lazy import lazy_exports

_EXPORTS = {
    "Client": "goodput.loadtest.client",
    "ClientOptions": "goodput.loadtest.client",
    "RequestRecord": "goodput.loadtest.records",
    "RunResult": "goodput.loadtest.runner",
    "load_workload": "goodput.loadtest.workload",
    "preflight": "goodput.loadtest.client",
    "run_plan": "goodput.loadtest.runner",
}
__all__ = lazy_exports(__name__, _EXPORTS)
