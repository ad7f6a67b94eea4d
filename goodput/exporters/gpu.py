"""GPU exporter: NVML sampled on a timer into a snapshot; scrapes render the last snapshot, never call NVML.

A field a GPU does not support (``NVMLError_NotSupported``, ``NoPermission``) is omitted, not
exported as 0. A GPU that is lost (``GpuIsLost``, ``GpuNotFound``, ``ResetRequired``, ``Unknown``)
reports ``llm_gpu_up 0`` while the others keep reporting. XID critical errors arrive as NVML
events and increment ``llm_gpu_xid_errors_total{xid}``. Nothing a GPU, the driver or a fake file
does ends the sampling thread: an unexpected error is counted (``kind="internal"``) and the next
sample runs; ``/healthz`` answers 503 once samples stop finishing.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pynvml

from goodput.contracts.catalog import GPU
from goodput.exporters.exposition import SELF_COLLECTION, fmt_float, labels, render, self_metrics
from goodput.exporters.liveness import Heartbeat
from goodput.foundation.errors import ConfigError
from goodput.foundation.http import Response, Route, health_route, metrics_routes

if TYPE_CHECKING:  # grpc loads only when --kubelet-pod-resources is given
    from goodput.exporters.podresources import PodAttribution, PodRef

__all__ = ["DeploymentMapping", "GpuCollector", "GpuSample", "run_gpu_exporter"]

EXPORTER = "gpu"
DEAD = (pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_GpuNotFound, pynvml.NVMLError_ResetRequired,
        pynvml.NVMLError_Unknown)
ABSENT = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_NoPermission, pynvml.NVMLError_FunctionNotFound)


@dataclass
class GpuSample:
    index: int
    uuid: str = ""
    name: str = ""
    up: bool = True
    values: dict[str, float] = field(default_factory=dict)
    ecc: dict[str, float] = field(default_factory=dict)
    processes: list[tuple[int, float, str]] = field(default_factory=list)  # pid, bytes, deployment
    deployment: tuple[str, str] | None = None
    pod: PodRef | None = None


POD_LABELS = ("namespace", "pod", "container")  # added to each series of a GPU a pod holds (dcgm-exporter's labels)


@dataclass(frozen=True)
class _Rule:
    source: str  # cmdline | env | cgroup
    pattern: re.Pattern
    env_var: str = ""
    deployment: str = ""
    replica: str = ""


class DeploymentMapping:
    """Attributes GPU processes to deployments from /proc: the command line, the environment or the cgroup.

    YAML::

        gpus: {0: {deployment: chat-8b-h100, replica: chat-8b-h100-0}}    # static, by GPU index
        rules:
          - {cmdline: '--served-model-name (?P<deployment>\\S+)'}
          - {env: GOODPUT_DEPLOYMENT, pattern: '(?P<deployment>.+)', replica: '{pid}'}
          - {cgroup: 'kubepods/.*/pod(?P<replica>[0-9a-f-]+)', deployment: rag-70b-h200}

    Named groups ``deployment`` and ``replica`` fill the labels; fixed values may use ``{pid}``.
    """

    def __init__(self, rules: list[_Rule] | None = None, static: dict[int, tuple[str, str]] | None = None,
                 proc_root: Path = Path("/proc")) -> None:
        self.rules = rules or []
        self.static = static or {}
        self.proc_root = proc_root

    @classmethod
    def load(cls, data: Any, source: str, proc_root: Path = Path("/proc")) -> DeploymentMapping:
        if data is None:
            return cls(proc_root=proc_root)
        if not isinstance(data, dict):
            raise ConfigError(source, "", "expected a mapping with 'gpus' and/or 'rules'")
        unknown = sorted(set(data) - {"gpus", "rules"}, key=str)
        if unknown:
            raise ConfigError(source, str(unknown[0]), "unknown key; allowed: gpus, rules")
        static = {}
        if not isinstance(data.get("gpus") or {}, dict):
            raise ConfigError(source, "gpus", "expected a mapping of GPU index -> {deployment, replica}")
        for k, v in (data.get("gpus") or {}).items():
            if not isinstance(k, int) or isinstance(k, bool) or k < 0:
                raise ConfigError(source, f"gpus.{k}", "expected a GPU index (an integer >= 0)")
            if not isinstance(v, dict) or "deployment" not in v:
                raise ConfigError(source, f"gpus.{k}", "expected {deployment: ..., replica: ...}")
            static[k] = (str(v["deployment"]), str(v.get("replica", "")))
        if not isinstance(data.get("rules") or [], list):
            raise ConfigError(source, "rules", "expected a list of rules")
        rules = []
        for i, r in enumerate(data.get("rules") or []):
            key = f"rules[{i}]"
            if not isinstance(r, dict):
                raise ConfigError(source, key, "expected a mapping")
            src = next((s for s in ("cmdline", "env", "cgroup") if s in r), None)
            if src is None:
                raise ConfigError(source, key, "needs one of cmdline, env, cgroup")
            text = r.get("pattern", ".*") if src == "env" else r[src]
            try:
                pat = re.compile(text)
            except (re.error, TypeError) as e:
                raise ConfigError(source, f"{key}.{src}", f"bad regular expression: {e}") from None
            if "deployment" not in pat.groupindex and not r.get("deployment"):
                raise ConfigError(source, key, "needs a (?P<deployment>...) group or a fixed deployment")
            rules.append(_Rule(src, pat, r["env"] if src == "env" else "", str(r.get("deployment", "")),
                               str(r.get("replica", ""))))
        return cls(rules, static, proc_root)

    def _read(self, pid: int, name: str) -> str:
        try:
            return (self.proc_root / str(pid) / name).read_bytes().decode(errors="replace")
        except OSError:
            return ""

    def for_process(self, pid: int) -> tuple[str, str] | None:
        for rule in self.rules:
            if rule.source == "cmdline":
                text = self._read(pid, "cmdline").replace("\0", " ").strip()
            elif rule.source == "cgroup":
                text = self._read(pid, "cgroup")
            else:
                env = dict(kv.split("=", 1) for kv in self._read(pid, "environ").split("\0") if "=" in kv)
                if rule.env_var not in env:
                    continue
                text = env[rule.env_var]
            m = rule.pattern.search(text)
            if m:
                groups = m.groupdict()
                dep = groups.get("deployment") or rule.deployment.format(pid=pid)
                rep = groups.get("replica") or rule.replica.format(pid=pid)
                return dep, rep
        return None


class GpuCollector:
    def __init__(self, nvml: Any = pynvml, mapping: DeploymentMapping | None = None, hostname: str | None = None,
                 clock=time.time, pods: PodAttribution | None = None) -> None:
        self.nvml = nvml
        self.mapping = mapping or DeploymentMapping()
        self.pods = pods
        self.hostname = hostname or socket.gethostname()
        self.clock = clock
        self.snapshot: list[GpuSample] = []
        self.driver = ""
        self.xids: dict[tuple[int, int], int] = defaultdict(int)
        self.errors: dict[str, int] = defaultdict(int)
        self.last_duration = 0.0
        self.last_success = 0.0
        self.lock = threading.Lock()
        self._events = None
        self._ident: dict[int, tuple[str, str]] = {}

    def init(self) -> None:
        """``nvmlInit``; lets ``NVMLError_LibraryNotFound`` / ``DriverNotLoaded`` through to the caller."""
        n = self.nvml
        n.nvmlInit()
        self.driver = n.nvmlSystemGetDriverVersion()
        try:
            self._events = n.nvmlEventSetCreate()
            for i in range(n.nvmlDeviceGetCount()):
                try:
                    n.nvmlDeviceRegisterEvents(n.nvmlDeviceGetHandleByIndex(i), n.nvmlEventTypeXidCriticalError,
                                               self._events)
                except pynvml.NVMLError as e:
                    self.errors[f"events_{type(e).__name__.removeprefix('NVMLError_')}"] += 1
        except pynvml.NVMLError as e:
            self._events = None
            self.errors[f"events_{type(e).__name__.removeprefix('NVMLError_')}"] += 1

    def _read(self, g: GpuSample, key: str, fn, *args, scale: float = 1.0) -> Any:
        try:
            v = fn(*args)
        except ABSENT:
            return None
        except DEAD:
            raise
        except pynvml.NVMLError as e:
            self.errors[type(e).__name__.removeprefix("NVMLError_")] += 1
            return None
        if key:
            g.values[key] = float(v) * scale
        return v

    def _sample_gpu(self, i: int) -> GpuSample:
        n = self.nvml
        g = GpuSample(i)
        try:
            h = n.nvmlDeviceGetHandleByIndex(i)
            g.uuid = n.nvmlDeviceGetUUID(h)
            g.name = n.nvmlDeviceGetName(h)
            util = self._read(g, "", n.nvmlDeviceGetUtilizationRates, h)
            if util is not None:
                g.values["utilization"] = util.gpu / 100.0
            try:
                mem = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
            except ABSENT:
                mem = self._read(g, "", n.nvmlDeviceGetMemoryInfo, h)
            if mem is not None:
                g.values["memory_used"] = float(mem.used)
                g.values["memory_total"] = float(mem.total)
                if getattr(mem, "reserved", None) is not None:
                    g.values["memory_reserved"] = float(mem.reserved)
            self._read(g, "power", n.nvmlDeviceGetPowerUsage, h, scale=1e-3)
            self._read(g, "temperature", n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU)
            self._read(g, "sm_clock", n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM, scale=1e6)
            for kind, code in (("corrected", n.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                               ("uncorrected", n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
                v = self._read(g, "", n.nvmlDeviceGetTotalEccErrors, h, code, n.NVML_VOLATILE_ECC)
                if v is not None:
                    g.ecc[kind] = float(v)
            procs = self._read(g, "", n.nvmlDeviceGetComputeRunningProcesses, h) or []
            for p in procs:
                owner = self.mapping.for_process(p.pid)
                used = float(p.usedGpuMemory) if p.usedGpuMemory is not None else float("nan")
                g.processes.append((p.pid, used, owner[0] if owner else ""))
                if owner and g.deployment is None:
                    g.deployment = owner
        except DEAD as e:
            g.up = False
            g.uuid, g.name = self._ident.get(i, (g.uuid, g.name))  # a lost GPU keeps its identity
            self.errors[type(e).__name__.removeprefix("NVMLError_")] += 1
        except Exception:  # noqa: BLE001 - not NVML's (a bug, a mapping's bad format): one GPU's loss, counted
            self.errors["internal"] += 1
        else:
            self._ident[i] = (g.uuid, g.name)
        if g.deployment is None and i in self.mapping.static:
            g.deployment = self.mapping.static[i]
        return g

    def _drain_events(self) -> None:
        if self._events is None:
            return
        n = self.nvml
        for _ in range(1000):
            try:
                ev = n.nvmlEventSetWait_v2(self._events, 0)
            except pynvml.NVMLError_Timeout:
                return
            except pynvml.NVMLError as e:
                self.errors[f"events_{type(e).__name__.removeprefix('NVMLError_')}"] += 1
                return
            if ev.eventType & n.nvmlEventTypeXidCriticalError:
                try:
                    idx = n.nvmlDeviceGetIndex(ev.device)
                except pynvml.NVMLError:
                    idx = -1
                self.xids[(idx, int(ev.eventData))] += 1

    def sample(self) -> bool:
        """Take a snapshot of every GPU; False when NVML could not even count them."""
        t0 = time.perf_counter()
        try:
            count = self.nvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as e:
            self.errors[type(e).__name__.removeprefix("NVMLError_")] += 1
            return False
        snap = [self._sample_gpu(i) for i in range(count)]
        if self.pods is not None:
            if not self.pods.refresh():
                self.errors["pod_resources"] += 1
            for g in snap:
                g.pod = self.pods.owner(g.uuid, g.index)
        self._drain_events()
        with self.lock:
            self.snapshot = snap
            self.last_duration = time.perf_counter() - t0
            self.last_success = self.clock()
        return True

    def render(self) -> str:
        with self.lock:
            snap = list(self.snapshot)
            xids = dict(self.xids)
            errors = dict(self.errors)
        fam: dict[str, list[str]] = defaultdict(list)
        bases = {g.index: _base(g) for g in snap}
        for g in snap:
            base = bases[g.index]
            fam["llm_gpu_up"].append(f"llm_gpu_up{{{base}}} {1.0 if g.up else 0.0}")
            if g.name:
                ident = labels(("gpu_model", "driver_version", "hostname"), (g.name, self.driver, self.hostname))
                fam["llm_gpu_info"].append(f"llm_gpu_info{{{base},{ident}}} 1.0")
            if g.deployment:
                fam["llm_gpu_deployment_info"].append(
                    f'llm_gpu_deployment_info{{{base},{labels(("deployment", "replica"), g.deployment)}}} 1.0')
            if not g.up:
                continue
            for key, name in (("utilization", "llm_gpu_utilization_ratio"), ("memory_used", "llm_gpu_memory_used_bytes"),
                              ("memory_total", "llm_gpu_memory_total_bytes"),
                              ("memory_reserved", "llm_gpu_memory_reserved_bytes"), ("power", "llm_gpu_power_watts"),
                              ("temperature", "llm_gpu_temperature_celsius"), ("sm_clock", "llm_gpu_sm_clock_hertz")):
                if key in g.values:
                    fam[name].append(f"{name}{{{base}}} {fmt_float(g.values[key])}")
            for kind, v in g.ecc.items():
                fam["llm_gpu_ecc_errors_total"].append(f'llm_gpu_ecc_errors_total{{{base},kind="{kind}"}} {fmt_float(v)}')
            for pid, used, dep in g.processes:
                owner = labels(("pid", "deployment"), (str(pid), dep))
                fam["llm_gpu_process_memory_bytes"].append(f"llm_gpu_process_memory_bytes{{{base},{owner}}} {fmt_float(used)}")
        for (idx, xid), count in sorted(xids.items()):
            base = bases.get(idx) or labels(("gpu", "uuid"), (str(idx), ""))
            fam["llm_gpu_xid_errors_total"].append(f'llm_gpu_xid_errors_total{{{base},xid="{xid}"}} {float(count)}')
        fam.update(self_metrics(EXPORTER, self.last_duration, self.last_success, errors))
        return render((s, fam.get(s.name, ())) for s in (*GPU, *SELF_COLLECTION))


def _base(g: GpuSample) -> str:
    """A GPU's identity labels, and the pod that holds it when the kubelet said so."""
    base = labels(("gpu", "uuid"), (str(g.index), g.uuid))
    if g.pod is None:
        return base
    return f"{base},{labels(POD_LABELS, (g.pod.namespace, g.pod.pod, g.pod.container))}"


class Sampler:
    """Runs ``collector.sample()`` every ``interval`` seconds on a background thread that no error ends."""

    def __init__(self, collector: GpuCollector, interval: float) -> None:
        self.collector, self.interval = collector, interval
        self._stop = threading.Event()
        self.heartbeat = Heartbeat("GPU sampling", grace_s=3 * interval + 10)
        self._thread = self.heartbeat.thread = threading.Thread(target=self._loop, name="gpu-sampler", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                ok = self.collector.sample()
            except Exception as e:  # noqa: BLE001 - no failed sample ends the thread: counted, the next one runs
                self.collector.errors[f"sample_{type(e).__name__}"] += 1
            else:
                if ok:
                    self.heartbeat.beat()
            self._stop.wait(self.interval)

    def start(self) -> Sampler:
        self.heartbeat.beat()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 1)


def health_with_pods(heartbeat: Heartbeat, pods: PodAttribution | None) -> Route:
    """``/healthz``: 503 while sampling is stalled; still 200 while pod attribution is off (GPUs still serve), with
    a line saying why."""
    sampling = health_route(heartbeat.problem)

    def route(h, body: bytes) -> Response:
        status, ctype, text, headers = sampling(h, body)
        if status == 200 and pods is not None and pods.problem:
            text += f"degraded: pod attribution off: {pods.problem}\n".encode()
        return status, ctype, text, headers

    return route


def run_gpu_exporter(args) -> int:
    from goodput.exporters.fake_nvml import FakeNvml, load_fake
    from goodput.exporters.podresources import PodAttribution, PodResourcesClient
    from goodput.foundation.http import Server, serve_until_signal
    from goodput.foundation.yamlfile import load_mapping, load_yaml

    nvml: Any = pynvml
    if args.fake:
        nvml = FakeNvml(load_fake(load_yaml(args.fake), str(args.fake)))
    mapping = None
    if args.mapping:
        mapping = DeploymentMapping.load(load_mapping(args.mapping, "a mapping with 'gpus' and/or 'rules'"),
                                         str(args.mapping))
    pods = None
    if args.kubelet_pod_resources:
        pods = PodAttribution(PodResourcesClient(args.kubelet_pod_resources), args.pod_resources_interval)
    collector = GpuCollector(nvml, mapping, hostname=(nvml.spec.get("hostname") if args.fake else None), pods=pods)
    try:
        collector.init()
    except pynvml.NVMLError as e:
        raise ConfigError("NVML", "", f"{e} ({type(e).__name__}); no NVIDIA driver here? "
                                      "run with --fake FILE to use a fake GPU") from None
    sampler = Sampler(collector, args.interval).start()
    routes = {**metrics_routes(collector.render), ("GET", "/healthz"): health_with_pods(sampler.heartbeat, pods)}
    srv = Server(args.host, args.port, routes).start()
    print(f"gpu exporter: {'fake NVML ' + str(args.fake) if args.fake else 'NVML'}, metrics at {srv.url}/metrics",
          flush=True)

    def stop() -> None:
        sampler.stop()
        srv.stop()
        if pods is not None:
            pods.client.close()

    serve_until_signal(stop)
    return 0
