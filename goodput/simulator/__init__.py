"""The simulated fleet: workload profiles, the vLLM-style replica model, virtual-time and live runs.

The public names below are imported on first use, so ``import goodput.simulator`` (and every
``goodput.simulator.*`` import, which runs this file first) stays cheap for the command line.
"""

from goodput.foundation.lazy import lazy_exports
from goodput.simulator.compiled import check_fresh as _check_fresh

_check_fresh()  # before the first compiled module is imported: a stale one refuses to import

_EXPORTS = {
    "ConfigError": "goodput.foundation.errors",
    "Fleet": "goodput.simulator.fleet",
    "FleetConfig": "goodput.simulator.config",
    "LiveFleet": "goodput.simulator.live",
    "SimulationResult": "goodput.simulator.run",
    "load_fleet": "goodput.simulator.config",
    "parse_fleet": "goodput.simulator.config",
    "simulate": "goodput.simulator.run",
    "write_outputs": "goodput.simulator.run",
}
__all__ = lazy_exports(__name__, _EXPORTS)
