"""The simulated fleet: workload profiles, the vLLM-style replica model, virtual-time and live runs."""

from simulator.compiled import check_fresh as _check_fresh

_check_fresh()  # before the first compiled module is imported

from goodput.foundation.errors import ConfigError
from simulator.config import FleetConfig, load_fleet, parse_fleet
from simulator.fleet import Fleet
from simulator.live import LiveFleet
from simulator.run import SimulationResult, simulate, write_outputs

__all__ = ["ConfigError", "Fleet", "FleetConfig", "LiveFleet", "SimulationResult", "load_fleet", "parse_fleet", "simulate",
           "write_outputs"]
