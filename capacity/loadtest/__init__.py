"""``goodput loadtest``: drive an OpenAI-compatible target under an arrival pattern and measure SLO goodput.

The public names below are imported on first use, so ``import capacity.loadtest`` does not load httpx.
"""

from goodput.foundation.lazy import lazy_exports

_EXPORTS = {
    "Client": "capacity.loadtest.client",
    "ClientOptions": "capacity.loadtest.client",
    "RequestRecord": "capacity.loadtest.records",
    "RunResult": "capacity.loadtest.runner",
    "load_workload": "capacity.loadtest.workload",
    "preflight": "capacity.loadtest.client",
    "run_plan": "capacity.loadtest.runner",
}
__all__ = lazy_exports(__name__, _EXPORTS)
