"""The simulated fleet: workload profiles, the vLLM-style replica model, virtual-time and live runs.

The public names below are imported on first use, so ``import simulator`` (and every ``simulator.*``
import, which runs this file first) stays cheap for the command line.
"""

from goodput.foundation.lazy import lazy_exports
from simulator.compiled import check_fresh as _check_fresh

_check_fresh()  # before the first compiled module is imported

_EXPORTS = {
    "ConfigError": "goodput.foundation.errors",
    "Fleet": "simulator.fleet",
    "FleetConfig": "simulator.config",
    "LiveFleet": "simulator.live",
    "SimulationResult": "simulator.run",
    "load_fleet": "simulator.config",
    "parse_fleet": "simulator.config",
    "simulate": "simulator.run",
    "write_outputs": "simulator.run",
}
__all__ = lazy_exports(__name__, _EXPORTS)
