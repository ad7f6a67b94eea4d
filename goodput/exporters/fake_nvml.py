"""A fake NVML for machines without a GPU: the functions the GPU exporter calls, raising pynvml's real errors.

Described in YAML::

    driver_version: "550.54.15"
    hostname: gpu-node-1
    gpus:
      - name: NVIDIA H100 80GB HBM3
        uuid: GPU-00000000-0000-0000-0000-000000000000     # default: derived from the index
        memory_total_bytes: 85520809984
        utilization: {0: 0.2, 60: 0.95}                     # value, or {seconds: value} stepped over time
        memory_used_bytes: 60000000000
        power_watts: 420
        temperature_celsius: 64
        sm_clock_mhz: 1980
        ecc: {corrected: 0, uncorrected: 0}
        processes: [{pid: 4242, used_memory_bytes: 59000000000}]
        unsupported: [power_watts]                          # these raise NVMLError_NotSupported
    faults:
      - {at: 30, gpu: 1, kind: lost}                        # NVMLError_GpuIsLost from then on
      - {at: 10, gpu: 0, kind: xid, xid: 79}                # one XID critical error event

A ``driver`` callable (gpu index -> dict of the same keys, plus ``lost: true``) overrides values live,
which is how the simulated fleet makes GPU memory and utilisation follow its load.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

from goodput.foundation.errors import ConfigError

__all__ = ["FakeNvml", "load_fake"]

FIELDS = ("utilization", "memory_used_bytes", "memory_total_bytes", "memory_reserved_bytes", "power_watts",
          "temperature_celsius", "sm_clock_mhz", "ecc", "processes")


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # pynvml returns the per-code subclass, e.g. NVMLError_GpuIsLost


@dataclass
class _Handle:
    index: int


class _Utilization:
    def __init__(self, gpu: float, memory: float) -> None:
        self.gpu, self.memory = gpu, memory


class _Memory:
    def __init__(self, total: int, reserved: int, used: int) -> None:
        self.total, self.reserved, self.used, self.free = total, reserved, used, max(0, total - reserved - used)


class _Process:
    def __init__(self, pid: int, used: int) -> None:
        self.pid, self.usedGpuMemory = pid, used


class _Event:
    def __init__(self, index: int, xid: int) -> None:
        self.device, self.eventType, self.eventData = _Handle(index), pynvml.nvmlEventTypeXidCriticalError, xid
        self.gpuInstanceId = self.computeInstanceId = 0xFFFFFFFF


class FakeNvml:
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_MEMORY_ERROR_TYPE_CORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC
    nvmlMemory_v2 = pynvml.nvmlMemory_v2
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError
    NVMLError = pynvml.NVMLError

    def __init__(self, spec: dict[str, Any], clock: Callable[[], float] | None = None,
                 driver: Callable[[int], dict[str, Any]] | None = None) -> None:
        self.spec = spec
        self.gpus = spec.get("gpus") or []
        self.faults = sorted(spec.get("faults") or [], key=lambda f: f["at"])
        t0 = time.monotonic()
        self.clock = clock or (lambda: time.monotonic() - t0)
        self.driver = driver
        self.initialized = False
        self._delivered: set[int] = set()

    # --- helpers
    def _now(self) -> float:
        return self.clock()

    def _gpu(self, h: _Handle) -> dict[str, Any]:
        if not self.initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        if self.driver is not None and (self.driver(h.index) or {}).get("lost"):
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        for f in self.faults:
            if f["kind"] == "lost" and f["gpu"] == h.index and f["at"] <= self._now():
                raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        return self.gpus[h.index]

    def _value(self, h: _Handle, key: str, default: Any = None) -> Any:
        g = self._gpu(h)
        if key in (g.get("unsupported") or ()):
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if self.driver is not None:
            live = self.driver(h.index) or {}
            if key in live:
                return live[key]
        v = g.get(key, default)
        if isinstance(v, dict) and v and all(isinstance(k, (int, float)) for k in v):
            now, cur = self._now(), None
            for at in sorted(v):
                if at <= now:
                    cur = v[at]
            return cur if cur is not None else v[min(v)]
        return v

    # --- the NVML surface the exporter uses
    def nvmlInit(self) -> None:
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self.spec.get("driver_version", "550.54.15"))

    def nvmlDeviceGetCount(self) -> int:
        if not self.initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> _Handle:
        if not 0 <= i < len(self.gpus):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        h = _Handle(i)
        self._gpu(h)
        return h

    def nvmlDeviceGetIndex(self, h: _Handle) -> int:
        return h.index

    def nvmlDeviceGetUUID(self, h: _Handle) -> str:
        return self._gpu(h).get("uuid") or f"GPU-00000000-0000-0000-0000-{h.index:012d}"

    def nvmlDeviceGetName(self, h: _Handle) -> str:
        return self._gpu(h).get("name", "NVIDIA H100 80GB HBM3")

    def nvmlDeviceGetUtilizationRates(self, h: _Handle) -> _Utilization:
        u = float(self._value(h, "utilization", 0.0))
        return _Utilization(round(u * 100), 0)

    def nvmlDeviceGetMemoryInfo(self, h: _Handle, version: int | None = None) -> _Memory:
        total = int(self._value(h, "memory_total_bytes", 85_520_809_984))
        reserved = int(self._value(h, "memory_reserved_bytes", 536_870_912))
        used = int(self._value(h, "memory_used_bytes", 0))
        return _Memory(total, reserved, used)

    def nvmlDeviceGetPowerUsage(self, h: _Handle) -> int:
        return int(float(self._value(h, "power_watts", 100.0)) * 1000)  # milliwatts, as NVML

    def nvmlDeviceGetTemperature(self, h: _Handle, sensor: int) -> int:
        return int(self._value(h, "temperature_celsius", 40))

    def nvmlDeviceGetClockInfo(self, h: _Handle, clock: int) -> int:
        return int(self._value(h, "sm_clock_mhz", 1980))

    def nvmlDeviceGetTotalEccErrors(self, h: _Handle, kind: int, counter: int) -> int:
        ecc = self._value(h, "ecc", {}) or {}
        return int(ecc.get("corrected" if kind == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else "uncorrected", 0))

    def nvmlDeviceGetComputeRunningProcesses(self, h: _Handle) -> list[_Process]:
        return [_Process(int(p["pid"]), int(p.get("used_memory_bytes", 0))) for p in self._value(h, "processes", []) or []]

    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, h: _Handle, types: int, event_set: object) -> None:
        self._gpu(h)

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> _Event:
        now = self._now()
        for i, f in enumerate(self.faults):
            if f["kind"] == "xid" and f["at"] <= now and i not in self._delivered:
                self._delivered.add(i)
                return _Event(int(f["gpu"]), int(f["xid"]))
        raise _err(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: object) -> None:
        pass


def _number(source: str, key: str, v: Any, *, maximum: float | None = None) -> None:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0 or (
            maximum is not None and v > maximum):
        bound = f"in 0..{maximum:g}" if maximum is not None else ">= 0"
        raise ConfigError(source, key, f"expected a finite number {bound}, got {v!r}")


def _value(source: str, key: str, v: Any, maximum: float | None = None) -> None:
    """A number, or ``{seconds: number}`` stepped over time."""
    if isinstance(v, dict):
        if not v:
            raise ConfigError(source, key, "expected a number or a non-empty {seconds: value} mapping")
        for at, x in v.items():
            _number(source, f"{key}.{at}", at)
            _number(source, f"{key}.{at}", x, maximum=maximum)
    else:
        _number(source, key, v, maximum=maximum)


def _gpu(source: str, key: str, g: Any) -> None:
    if not isinstance(g, dict):
        raise ConfigError(source, key, "expected a mapping")
    allowed = (*FIELDS, "name", "uuid", "unsupported")
    for k, v in g.items():
        where = f"{key}.{k}"
        if k not in allowed:
            raise ConfigError(source, where, f"unknown key; allowed: {', '.join(allowed)}")
        if k in ("name", "uuid"):
            if not isinstance(v, str) or not v:
                raise ConfigError(source, where, "expected a non-empty string")
        elif k == "unsupported":
            if not isinstance(v, list) or any(x not in FIELDS for x in v):
                raise ConfigError(source, where, f"expected a list of fields from: {', '.join(FIELDS)}")
        elif k == "ecc":
            _ecc(source, where, v)
        elif k == "processes":
            _processes(source, where, v)
        else:
            _value(source, where, v, maximum=1.0 if k == "utilization" else None)


def _ecc(source: str, where: str, v: Any) -> None:
    """``{corrected: N, uncorrected: N}``, each a number or stepped over time."""
    if not isinstance(v, dict) or set(v) - {"corrected", "uncorrected"}:
        raise ConfigError(source, where, "expected {corrected: N, uncorrected: N}")
    for kind, n in v.items():
        _value(source, f"{where}.{kind}", n)


def _processes(source: str, where: str, v: Any) -> None:
    """A list of ``{pid, used_memory_bytes}``: what ``nvmlDeviceGetComputeRunningProcesses`` will return."""
    if not isinstance(v, list):
        raise ConfigError(source, where, "expected a list of {pid, used_memory_bytes}")
    for j, proc in enumerate(v):
        if not isinstance(proc, dict) or set(proc) - {"pid", "used_memory_bytes"}:
            raise ConfigError(source, f"{where}[{j}]", "expected {pid: N, used_memory_bytes: N}")
        if not isinstance(proc.get("pid"), int) or isinstance(proc["pid"], bool) or proc["pid"] < 0:
            raise ConfigError(source, f"{where}[{j}].pid", f"expected a process id, got {proc.get('pid')!r}")
        _number(source, f"{where}[{j}].used_memory_bytes", proc.get("used_memory_bytes", 0))


def load_fake(spec: Any, source: str) -> dict[str, Any]:
    """Validate a fake-NVML description, every value included, so that sampling it cannot fail later.

    ``ConfigError`` names the key that is wrong (``gpus[0].utilization``).
    """
    if spec is None:
        raise ConfigError(source, "", "the file is empty; expected a mapping with a 'gpus' list")
    if not isinstance(spec, dict):
        raise ConfigError(source, "", f"expected a mapping with a 'gpus' list, got {type(spec).__name__}")
    unknown = sorted(set(spec) - {"driver_version", "hostname", "gpus", "faults"}, key=str)
    if unknown:
        raise ConfigError(source, str(unknown[0]), "unknown key; allowed: driver_version, hostname, gpus, faults")
    for k in ("driver_version", "hostname"):
        if k in spec and not isinstance(spec[k], str):
            raise ConfigError(source, k, f"expected a string (quote it), got {spec[k]!r}")
    if not isinstance(spec.get("gpus"), list) or not spec["gpus"]:
        raise ConfigError(source, "gpus", "expected a non-empty list of GPUs")
    for i, g in enumerate(spec["gpus"]):
        _gpu(source, f"gpus[{i}]", g)
    if not isinstance(spec.get("faults") or [], list):
        raise ConfigError(source, "faults", "expected a list of {at, gpu, kind}")
    for i, f in enumerate(spec.get("faults") or []):
        if not isinstance(f, dict) or f.get("kind") not in ("lost", "xid"):
            raise ConfigError(source, f"faults[{i}].kind", "must be lost or xid")
        if not isinstance(f.get("gpu"), int) or not 0 <= f["gpu"] < len(spec["gpus"]):
            raise ConfigError(source, f"faults[{i}].gpu", "must be the index of a listed GPU")
        _number(source, f"faults[{i}].at", f.get("at"))
        if f["kind"] == "xid" and (not isinstance(f.get("xid"), int) or isinstance(f["xid"], bool)):
            raise ConfigError(source, f"faults[{i}].xid", "expected the XID code (integer)")
    return spec
