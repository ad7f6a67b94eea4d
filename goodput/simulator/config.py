"""Fleet configuration: the YAML a user writes, parsed into frozen dataclasses and checked.

Every problem raises ``ConfigError(file, key, problem)`` with the dotted key path, so the CLI can
say exactly where a fleet file is wrong. Checks that need the catalog (does the model fit its GPUs?)
happen here too, so a bad fleet fails before any simulation starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from goodput.contracts.catalog import OVERLOAD_STEPS as CATALOG_OVERLOAD_STEPS
from goodput.contracts.vocabulary import EVENT_KINDS, RELEASE_KINDS, SCALE_KIND, SCENES, TIERS
from goodput.foundation.errors import ConfigError
from goodput.foundation.reader import Reader
from goodput.foundation.yamlfile import load_mapping
from goodput.simulator.arrivals import PROCESSES, ArrivalSpec, Batch, Burst, Diurnal, Step
from goodput.simulator.catalog import (
    DTYPE_BYTES,
    ModelSpec,
    kv_bytes_per_token,
    load_model_config,
    lookup_gpu,
    lookup_model,
    models,
)
from goodput.simulator.cold_start import ColdStartModel
from goodput.simulator.distributions import QuantileDistribution
from goodput.simulator.memory import DEFAULT_ENGINE_VERSION, MemoryBudget, MemorySetup, memory_budget
from goodput.simulator.tokenizer import load_tokenizer

__all__ = [
    "BreakerConfig",
    "Capabilities",
    "DeploymentConfig",
    "DisaggConfig",
    "EngineConfig",
    "EventConfig",
    "FleetConfig",
    "GatewayConfig",
    "MAX_BATCH",
    "MAX_BURST_FACTOR",
    "MAX_ENGINE_INT",
    "MAX_RATE",
    "MAX_REPLICAS",
    "MAX_REQUESTS",
    "MIN_DIURNAL_PERIOD_S",
    "OVERLOAD_SIGNALS",
    "OVERLOAD_STEPS",
    "OverloadStep",
    "Needs",
    "RELEASE_KINDS",
    "RetryConfig",
    "ROUTERS",
    "SCALE_KIND",
    "TIERS",
    "TenantQuota",
    "TierQueue",
    "TraceSpec",
    "WorkloadConfig",
    "check_request_budget",
    "token_distribution",
    "load_fleet",
    "parse_fleet",
]

ROUTERS = ("round-robin", "least-outstanding", "kv-aware")
# Upper bounds checked when the file is read, before any work (docs/simulator.md#limits): each far above a real
# fleet's, each far below what grows until the OOM killer (``replicas: 9223372036854775808``, ``rate: 1000000``).
MAX_REPLICAS = 1024  # per deployment
MAX_COLD_START_S = 86400.0  # per phase, and an event's
MAX_RATE = 10_000.0  # requests/s of one workload (a step's too)
MAX_BURST_FACTOR = 1000.0
MAX_BATCH = 1_000_000  # requests in one batch
MAX_ENGINE_INT = 2**24  # any engine count or token size (max_model_len 16M)
MIN_DIURNAL_PERIOD_S = 60.0  # the rate is integrated at period/2880 steps
MAX_REQUESTS = 2_000_000  # expected arrivals of one simulated run: ~1 KB of memory each while it runs
# the gateway section's bounds (docs/simulator.md#gateway)
MAX_GATEWAY_TENANTS = 10_000
MAX_QUOTA = 1e12  # any per-minute quota or token budget
MAX_WEIGHT = 1000.0
MAX_WAIT_S = 86_400.0
MAX_QUEUED = 1_000_000  # requests one tier's gateway queue holds per deployment
MAX_BURST_S = 3600.0
MAX_RETRY_ATTEMPTS = 10  # a simulated client's tries of one request
TIER_MAX_WAIT_S = {"P0": 10.0, "P1": 30.0, "P2": 600.0}
# the overload ladder (docs/simulator.md#overload): each step kind, in the catalog's one list of them, and the keys
# it takes besides its trigger
_STEP_KEYS = {"defer_p2": (), "degrade_p1": ("max_tokens", "context_tokens"), "tpm_limit": ("limit",),
              "fail_fast": ("tiers",)}
OVERLOAD_STEPS = {step: _STEP_KEYS[step] for step in CATALOG_OVERLOAD_STEPS}
OVERLOAD_SIGNALS = ("p0_wait_s", "queue_per_slot", "kv_usage")
EFFECTS = ("input_scale", "output_scale", "step_time_scale", "prefill_time_scale", "decode_time_scale")


@dataclass(frozen=True)
class EngineConfig:
    """vLLM-style scheduler and roofline knobs of one replica."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    prefill_chunk_tokens: int = 2048
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    max_model_len: int = 32768
    prefix_cache: bool = False
    prefix_cache_fraction: float = 0.3
    max_waiting_requests: int = 1024
    max_queue_time_s: float = 60.0
    weight_dtype: str = "bf16"
    kv_dtype: str = "fp16"
    # the vLLM release and top-k/top-p sampler whose start-up profiling sizes the KV pool (goodput/simulator/memory.py);
    # "default": the release's own sampler
    engine_version: str = DEFAULT_ENGINE_VERSION
    sampler: str = "default"
    compute_efficiency: float = 0.55
    memory_efficiency: float = 0.8
    # the share of HBM bandwidth the attention kernels reach reading the KV cache (the weight GEMMs reach
    # memory_efficiency), so decode steps slow down with batch x context: fitted on two published A100 serving
    # bursts (Qwen2.5-7B TP 1, 10 and 100 prompts, vllm_serving.yaml rows marked calibration; least squares, 0.43)
    # and checked on the others and on the nightly latency rows: docs/capacity.md "Fidelity"
    attention_memory_efficiency: float = 0.43
    # fixed cost per step and TP all-reduce cost per layer, fitted on vLLM's nightly latency rows (A100/H100/H200,
    # TP 1 and 4) and checked against held-out serving results: docs/capacity.md "Fidelity"
    step_overhead_ms: float = 2.0
    tp_overhead_ms_per_layer: float = 0.07
    # GB/s of NCCL bus bandwidth TP's all-reduces reach where they cost per token: GPUs without peer access
    # (vLLM's "Custom allreduce is disabled ... lacks GPU P2P capability"); 0: NVLink or custom all-reduce, whose
    # cost at serving batch sizes the per-layer term holds. Fitted (4.6) on two published TP 2 A100 bursts without P2P:
    # docs/capacity.md "Fidelity"
    tp_allreduce_gbps: float = 0.0


@dataclass(frozen=True)
class Capabilities:
    """What a deployment can serve: the columns of the fallback compatibility matrix (docs/simulator.md#fallback)."""

    context: int  # most tokens of prompt + output one request may take
    tools: bool = False
    vision: bool = False
    residency: str = ""  # where it runs ("eu"); "": not stated, so it serves no request that needs a residency
    cost_per_mtok: float | None = None  # price per million tokens; None: not stated, so it serves no request that caps it


@dataclass(frozen=True)
class Needs:
    """What a workload's requests need of the deployment that serves them (their context is each one's prompt +
    max_tokens)."""

    tools: bool = False
    vision: bool = False
    residency: str = ""  # "": anywhere
    max_cost_per_mtok: float | None = None  # the most a deployment serving them may cost per million tokens; None: any


@dataclass(frozen=True)
class DeploymentConfig:
    name: str
    model: str
    gpu: str
    tp: int
    replicas: int
    router: str
    engine: EngineConfig
    gateway_latency_ms: float = 2.0
    send_latency_ms: float = 1.0
    budget: MemoryBudget | None = None
    model_config: ModelSpec | None = None  # the fleet file's model_config (a Hugging Face config.json), if any
    tokenizer: str | None = None  # the served model's tokenizer.json (checked): prompts counted by it, not the shipped BPE
    capabilities: Capabilities | None = None  # None: not declared (never checked, never a backup)
    disaggregation: DisaggConfig | None = None  # None: each replica prefills and decodes (aggregated)
    cold_start: ColdStartModel | None = None  # None: an added replica's cold start is its event's (0 by default)

    @property
    def spec(self) -> ModelSpec:
        """The model's architecture: from its model_config, else the catalog's."""
        return self.model_config or models()[self.model]


@dataclass(frozen=True)
class DisaggConfig:
    """Prefill/decode disaggregation (llm-d, NVIDIA Dynamo): the deployment's own replicas are its prefill pool,
    ``decode`` its decode pool; a prompt's KV cache crosses a link from the one to the other (docs/simulator.md)."""

    decode: DeploymentConfig
    kv_link_gbps: float  # Gbit/s per GPU: each prefill TP rank sends its KV shard over its own NIC, as NIXL does
    kv_link_latency_ms: float
    kv_bytes_per_token: float  # on one prefill GPU (goodput/simulator/catalog.py kv_bytes_per_token)
    kv_shards: int  # the prefill pool's TP: the shards moved in parallel

    def transfer_s(self, tokens: float) -> float:
        """Link time of a ``tokens``-token prompt's KV: latency + one GPU's shard / the link's bandwidth."""
        return self.kv_link_latency_ms / 1e3 + tokens * self.kv_bytes_per_token * 8.0 / (self.kv_link_gbps * 1e9)

    def transfer_bytes(self, tokens: int) -> int:
        """Bytes a ``tokens``-token prompt's KV is, over all prefill shards."""
        return int(round(tokens * self.kv_bytes_per_token * self.kv_shards))


@dataclass(frozen=True)
class TraceSpec:
    path: str
    format: str
    time_scale: float = 1.0  # > 1 compresses the trace: replays it that many times faster
    loop: bool = True


@dataclass(frozen=True)
class WorkloadConfig:
    name: str
    scene: str
    route: str
    tier: str
    deployment: str
    tenants: tuple[tuple[str, float], ...]
    input_tokens: QuantileDistribution | None
    output_tokens: QuantileDistribution | None
    max_tokens: int
    arrival: ArrivalSpec | None
    trace: TraceSpec | None = None
    shared_prefix_tokens: int = 0
    operation: str = "chat"
    needs: Needs = Needs()


@dataclass(frozen=True)
class EventConfig:
    at: float
    kind: str
    deployment: str
    replica: int | None = None
    cold_start_s: float | None = None  # None: the deployment's cold_start model (none: 0)
    release_kind: str = ""
    from_version: str = ""
    to_version: str = ""
    note: str = ""
    effects: tuple[tuple[str, float], ...] = ()
    workload: str | None = None

    def effect(self, name: str, default: float = 1.0) -> float:
        return dict(self.effects).get(name, default)


@dataclass(frozen=True)
class TenantQuota:
    """One tenant's limits at the gateway (None: unlimited) and its weight in fair queueing."""

    weight: float = 1.0
    core: bool = False  # a core tenant keeps its full TPM quota through the overload ladder's tpm_limit step
    rpm: float | None = None  # requests per minute
    tpm: float | None = None  # tokens per minute, prompt + max output tokens, counted at admission
    concurrency: int | None = None  # admitted and not finished (waiting at the gateway or in an engine)
    token_budget: float | None = None  # tokens over the whole run: admission estimate, settled at completion
    burst_s: float = 60.0  # seconds of its per-minute quotas a tenant may spend at once (the buckets' depth)


@dataclass(frozen=True)
class TierQueue:
    """A tier's gateway queue (per deployment): how long a request may wait, how many may, and its share of slots."""

    max_wait_s: float
    max_queued: int = 10_000
    max_share: float = 1.0  # of the deployment's gateway slots this tier may hold at once


@dataclass(frozen=True)
class OverloadStep:
    """One rung of the overload ladder: engaged when ``signal`` exceeds ``above``, released after it stayed under
    ``below`` for ``hold_s`` (goodput/simulator/overload.py); what it does while engaged depends on ``step``."""

    step: str  # a key of OVERLOAD_STEPS
    signal: str  # one of OVERLOAD_SIGNALS, per deployment
    above: float
    below: float
    hold_s: float
    max_tokens: int | None = None  # degrade_p1: P1's output cap
    context_tokens: int | None = None  # degrade_p1: P1's prompt trimmed to this many tokens
    limit: float | None = None  # tpm_limit: non-core tenants' TPM x this
    tiers: tuple[str, ...] = ()  # fail_fast: the tiers refused busy


@dataclass(frozen=True)
class BreakerConfig:
    """A primary's circuit breaker (``goodput/simulator/circuit.py``): when it opens, and how long it stays open."""

    failures: int = 5  # consecutive failures that open it
    error_ratio: float = 0.5  # or this share of failures among the outcomes of the last window_s
    window_s: float = 10.0
    min_requests: int = 20  # outcomes the window needs before its ratio counts
    open_s: float = 30.0  # open this long, then half-open: one probe request decides


@dataclass(frozen=True)
class RetryConfig:
    """How the simulated clients retry a failed request (errors, timeouts, overloaded): a new request each time."""

    attempts: int = 3  # tries in all, the first included
    backoff_s: float = 1.0  # before each retry, doubling


@dataclass(frozen=True)
class GatewayConfig:
    """Admission in front of the engines: tenant quotas, then per-tier queues served by weighted fair queueing."""

    max_in_flight_per_replica: int | None  # gateway slots per ready replica; None: the engine's max_num_seqs
    tiers: tuple[TierQueue, ...]  # in TIERS order
    default_tenant: TenantQuota
    tenants: tuple[tuple[str, TenantQuota], ...] = ()
    overload: tuple[OverloadStep, ...] = ()  # the ladder, in the order it engages
    fallbacks: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (primary, its backups in order)
    circuit_breaker: BreakerConfig | None = None  # None: no breakers (retries walk the fallback routes)
    retry: RetryConfig | None = None  # None: clients do not retry
    capacity_fallback: bool = False  # a request that waited its max_wait_s at its primary tries a backup with room

    def quota(self, tenant: str) -> TenantQuota:
        return dict(self.tenants).get(tenant, self.default_tenant)


@dataclass(frozen=True)
class FleetConfig:
    name: str
    source: str
    start_time: datetime
    seed: int
    deployments: tuple[DeploymentConfig, ...]
    workloads: tuple[WorkloadConfig, ...]
    events: tuple[EventConfig, ...] = field(default=())
    gateway: GatewayConfig | None = None  # None: no gateway, requests go straight to the router

    def deployment(self, name: str) -> DeploymentConfig:
        return next(d for d in self.deployments if d.name == name)


def _required_child(r: Reader, k: str) -> Reader:
    """``r.child(k)`` of a key that must be there: the reader fails on a missing one, so the child is never None."""
    child = r.child(k)
    assert child is not None
    return child


def _engine(r: Reader | None) -> EngineConfig:
    if r is None:
        return EngineConfig()
    fields = EngineConfig.__dataclass_fields__
    r.unknown(set(fields))
    kw: dict[str, Any] = {}
    for name, f in fields.items():
        default = f.default
        if isinstance(default, bool):
            kw[name] = r.get(name, bool, default)
        elif isinstance(default, int):
            kw[name] = r.get(name, int, default, minimum=1, maximum=MAX_ENGINE_INT)
        elif isinstance(default, float):
            kw[name] = r.get(name, float, default, minimum=0.0)
        elif name in ("engine_version", "sampler"):  # the memory budget checks them, and names the key
            kw[name] = r.get(name, str, default)
        else:
            kw[name] = r.get(name, str, default, choices=tuple(DTYPE_BYTES))
    e = EngineConfig(**kw)
    if not 0 < e.gpu_memory_utilization <= 1:
        r.fail("gpu_memory_utilization", f"must be in (0, 1], got {e.gpu_memory_utilization}")
    for k in ("compute_efficiency", "memory_efficiency", "attention_memory_efficiency", "prefix_cache_fraction"):
        if not 0 < getattr(e, k) <= 1:
            r.fail(k, f"must be in (0, 1], got {getattr(e, k)}")
    if e.max_num_batched_tokens < e.max_num_seqs:
        r.fail("max_num_batched_tokens", "must be at least max_num_seqs (every running sequence decodes a token)")
    return e


_POOL_KEYS = ("replicas", "gpu", "tp", "router", "engine")
MAX_LINK_GBPS = 1e6


def _disaggregation(r: Reader, parent: dict, prefill: DeploymentConfig) -> DisaggConfig:
    """The decode pool takes the deployment's model and, for what it does not say, the deployment's settings."""
    r.unknown({"decode_pool", "kv_link_gbps", "kv_link_latency_ms"})
    p = _required_child(r, "decode_pool")
    p.unknown(set(_POOL_KEYS))
    inherited = {k: v for k, v in parent.items() if k not in ("disaggregation", "replicas")}
    decode = _deployment(Reader(r.source, {**inherited, "replicas": 1, **p.data}, p.path))
    p.get("replicas", int, 1, minimum=1, maximum=MAX_REPLICAS)  # a disaggregated deployment decodes somewhere
    spec = prefill.spec
    return DisaggConfig(
        decode=decode,
        kv_link_gbps=r.get("kv_link_gbps", float, 400.0, minimum=1e-3, maximum=MAX_LINK_GBPS),
        kv_link_latency_ms=r.get("kv_link_latency_ms", float, 1.0, minimum=0.0, maximum=MAX_WAIT_S * 1e3),
        kv_bytes_per_token=kv_bytes_per_token(spec, prefill.tp, prefill.engine.kv_dtype),
        kv_shards=prefill.tp,
    )


def _deployment(r: Reader) -> DeploymentConfig:
    r.unknown({"name", "model", "model_config", "tokenizer", "gpu", "tp", "replicas", "router", "engine",
               "gateway_latency_ms", "send_latency_ms", "capabilities", "disaggregation", "cold_start"})
    name = r.get("name", str)
    config_path = r.get("model_config", str, None)
    tok_path = r.get("tokenizer", str, None)  # relative to the fleet file, as model_config
    if config_path is None:
        model = lookup_model(r.get("model", str), r.source, r.key("model"))
    else:  # relative to the fleet file
        path = Path(r.source).parent / config_path
        model = load_model_config(path, r.get("model", str, None), r.source, r.key("model_config"))
    gpu = lookup_gpu(r.get("gpu", str), r.source, r.key("gpu"))
    tp = r.get("tp", int, 1, minimum=1)
    if tp & (tp - 1):
        r.fail("tp", f"must be a power of two, got {tp}")
    eng_r = r.child("engine", None)
    engine = _engine(eng_r)
    ek = eng_r.key if eng_r else (lambda k: r.key(f"engine.{k}"))
    if engine.weight_dtype not in model.weight_dtypes:
        raise ConfigError(r.source, ek("weight_dtype"), f"{model.name} is not offered in {engine.weight_dtype}")
    if engine.kv_dtype not in model.kv_dtypes:
        raise ConfigError(r.source, ek("kv_dtype"), f"{model.name} KV cache cannot be {engine.kv_dtype}")
    try:
        budget = memory_budget(model, gpu, MemorySetup(
            tp=tp, weight_dtype=engine.weight_dtype, kv_dtype=engine.kv_dtype,
            gpu_memory_utilization=engine.gpu_memory_utilization, max_model_len=engine.max_model_len,
            max_num_batched_tokens=engine.max_num_batched_tokens, max_num_seqs=engine.max_num_seqs,
            block_size=engine.block_size, engine_version=engine.engine_version,
            sampler=None if engine.sampler == "default" else engine.sampler), r.source)
    except ConfigError as e:  # the budget names the knob; say where it sits in the fleet file
        raise ConfigError(r.source, r.key("tp") if e.key == "tp" else ek(e.key), e.problem) from None
    problem = budget.problem()
    if problem is not None and problem[0] != "max_model_len":
        raise ConfigError(r.source, r.key("model"),
                          f"{model.name} ({engine.weight_dtype}) does not fit {tp}x {gpu.name}: {problem[1]}; "
                          f"{budget.describe()}")
    if problem is not None:
        raise ConfigError(r.source, ek("max_model_len"), f"{problem[1]} ({budget.describe()})")
    dep = DeploymentConfig(
        name=name, model=model.name, gpu=gpu.name, tp=tp,
        replicas=r.get("replicas", int, 1, minimum=0, maximum=MAX_REPLICAS),
        router=r.get("router", str, "least-outstanding", choices=ROUTERS),
        engine=engine,
        gateway_latency_ms=r.get("gateway_latency_ms", float, 2.0, minimum=0.0),
        send_latency_ms=r.get("send_latency_ms", float, 1.0, minimum=0.0),
        budget=budget,
        model_config=model if config_path is not None else None,
        tokenizer=None if tok_path is None else load_tokenizer(Path(r.source).parent / tok_path, r.source, r.key("tokenizer")),
        capabilities=_capabilities(r.child("capabilities", None), engine.max_model_len),
        cold_start=_cold_start(r.child("cold_start", None)),
    )
    dis = r.child("disaggregation", None)
    return dep if dis is None else replace(dep, disaggregation=_disaggregation(dis, r.data, dep))


def _cold_start(r: Reader | None) -> ColdStartModel | None:
    if r is None:
        return None
    r.unknown(set(ColdStartModel.__dataclass_fields__))
    seconds = {k: r.get(k, float, 0.0, minimum=0.0, maximum=MAX_COLD_START_S)
               for k in ("scheduling_s", "image_pull_s", "engine_start_s")}
    return ColdStartModel(
        **seconds, weights_cached=r.get("weights_cached", bool, True),
        cache_gb_per_s=r.get("cache_gb_per_s", float, 2.0, minimum=0.01, maximum=1000.0),
        remote_gb_per_s=r.get("remote_gb_per_s", float, 0.4, minimum=0.01, maximum=1000.0),
        spread=r.get("spread", float, 0.0, minimum=0.0, maximum=2.0))


def _capabilities(r: Reader | None, max_model_len: int) -> Capabilities | None:
    if r is None:
        return None
    r.unknown(set(Capabilities.__dataclass_fields__))
    return Capabilities(r.get("context", int, max_model_len, minimum=1, maximum=max_model_len),
                        r.get("tools", bool, False), r.get("vision", bool, False), r.get("residency", str, ""),
                        r.get("cost_per_mtok", float, None, minimum=0.0, maximum=MAX_QUOTA))


def _needs(r: Reader | None) -> Needs:
    if r is None:
        return Needs()
    r.unknown(set(Needs.__dataclass_fields__))
    return Needs(r.get("tools", bool, False), r.get("vision", bool, False), r.get("residency", str, ""),
                 r.get("max_cost_per_mtok", float, None, minimum=0.0, maximum=MAX_QUOTA))


def token_distribution(r: Reader, k: str) -> QuantileDistribution | None:
    c = r.child(k, None)
    if c is None:
        return None
    quantiles = {kk: c.get(kk, (int, float), minimum=1, maximum=MAX_ENGINE_INT) for kk in c.data}
    try:
        return QuantileDistribution.from_quantiles(quantiles)
    except ValueError as e:
        c.fail("", str(e))
    raise AssertionError("unreachable")


def _arrival(r: Reader) -> ArrivalSpec:
    r.unknown({"process", "rate", "cv", "steps", "bursts", "diurnal", "batches"})
    process = r.get("process", str, choices=PROCESSES)
    rate = r.get("rate", float, 0.0, minimum=0.0, maximum=MAX_RATE)
    cv = r.get("cv", float, 1.0, minimum=0.05)
    if process == "poisson":
        cv = 1.0
    steps = tuple(Step(s.get("at", float, minimum=0.0), s.get("rate", float, minimum=0.0, maximum=MAX_RATE))
                  for s in r.items("steps"))
    bursts = tuple(
        Burst(b.get("at", float, minimum=0.0), b.get("factor", float, minimum=0.0, maximum=MAX_BURST_FACTOR),
              b.get("duration", float, minimum=0.0))
        for b in r.items("bursts")
    )
    batches = tuple(
        Batch(b.get("at", float, minimum=0.0), b.get("count", int, minimum=1, maximum=MAX_BATCH),
              b.get("spread_s", float, 0.0, minimum=0.0))
        for b in r.items("batches")
    )
    d = r.child("diurnal", None)
    diurnal = None
    if d is not None:
        diurnal = Diurnal(
            d.get("amplitude", float, minimum=0.0, maximum=1.0),
            d.get("period_s", float, 86400.0, minimum=MIN_DIURNAL_PERIOD_S),
            d.get("peak_at_s", float, 14 * 3600.0),
        )
    need = {"step": steps, "burst": bursts, "diurnal": diurnal, "batch": batches}
    if process in need and not need[process]:
        key = {"step": "steps", "burst": "bursts", "diurnal": "diurnal", "batch": "batches"}[process]
        r.fail(key, f"process {process} needs {key}")
    if process not in ("batch", "step") and rate <= 0:
        r.fail("rate", f"process {process} needs a rate > 0")
    return ArrivalSpec(process, rate, cv, steps, bursts, diurnal, batches)


def _workload(r: Reader, deployments: dict[str, DeploymentConfig]) -> WorkloadConfig:
    r.unknown({"name", "scene", "route", "tier", "deployment", "tenants", "input_tokens", "output_tokens",
               "max_tokens", "arrival", "trace", "shared_prefix_tokens", "operation", "needs"})
    name = r.get("name", str)
    scene = r.get("scene", str, choices=SCENES)
    dep = r.get("deployment", str)
    if dep not in deployments:
        r.fail("deployment", f"no deployment named {dep!r}; have {', '.join(deployments)}")
    t = _required_child(r, "tenants")
    tenants = tuple((str(k), float(t.get(k, float, minimum=0.0))) for k in t.data)
    if not tenants or sum(s for _, s in tenants) <= 0:
        t.fail("", "needs at least one tenant with a share > 0")
    trace = None
    tr = r.child("trace", None)
    if tr is not None:
        tr.unknown({"path", "format", "time_scale", "loop"})
        path = Path(tr.get("path", str))
        if not path.is_absolute():
            path = (Path(r.source).parent / path).resolve()
        if not path.is_file():
            tr.fail("path", f"trace file {path} not found")
        trace = TraceSpec(str(path), tr.get("format", str, choices=("azure", "mooncake")),
                          tr.get("time_scale", float, 1.0, minimum=1e-6), tr.get("loop", bool, True))
    arrival = _arrival(_required_child(r, "arrival")) if trace is None else None
    inp, out = token_distribution(r, "input_tokens"), token_distribution(r, "output_tokens")
    if trace is None and (inp is None or out is None):
        r.fail("input_tokens" if inp is None else "output_tokens", "is required unless the workload replays a trace")
    max_tokens = r.get("max_tokens", int, 4096, minimum=1, maximum=MAX_ENGINE_INT)
    return WorkloadConfig(
        name=name, scene=scene, route=r.get("route", str, scene), tier=r.get("tier", str, choices=TIERS),
        deployment=dep, tenants=tenants, input_tokens=inp, output_tokens=out, max_tokens=max_tokens,
        arrival=arrival, trace=trace,
        shared_prefix_tokens=r.get("shared_prefix_tokens", int, 0, minimum=0, maximum=MAX_ENGINE_INT),
        operation=r.get("operation", str, "chat", choices=("chat", "text_completion")),
        needs=_needs(r.child("needs", None)),
    )


def _event(r: Reader, deployments: dict[str, DeploymentConfig], workloads: set[str]) -> EventConfig:
    r.unknown({"at", "kind", "deployment", "replica", "cold_start_s", "release_kind", "from", "to", "note",
               "effects", "workload"})
    kind = r.get("kind", str, choices=EVENT_KINDS)
    dep = r.get("deployment", str)
    if dep != "*" and dep not in deployments:
        r.fail("deployment", f"no deployment named {dep!r}")
    if dep == "*" and kind != "release":
        r.fail("deployment", "'*' is only allowed for releases")
    replica = r.get("replica", int, None, minimum=0)
    if kind == "replica_lost" and replica is None:
        r.fail("replica", "replica_lost needs the replica index")
    if replica is not None and dep != "*" and replica >= deployments[dep].replicas + 64:
        r.fail("replica", f"deployment {dep} has no replica {replica}")
    effects: tuple[tuple[str, float], ...] = ()
    e = r.child("effects", None)
    if e is not None:
        e.unknown(set(EFFECTS))
        effects = tuple((k, e.get(k, float, minimum=0.01)) for k in e.data)
    wl = r.get("workload", str, None)
    if wl is not None and wl not in workloads:
        r.fail("workload", f"no workload named {wl!r}")
    return EventConfig(
        at=r.get("at", float, minimum=0.0), kind=kind, deployment=dep, replica=replica,
        cold_start_s=r.get("cold_start_s", float, None, minimum=0.0, maximum=MAX_COLD_START_S),
        release_kind=r.get("release_kind", str, "config" if kind == "release" else "", choices=RELEASE_KINDS + ("",)),
        from_version=str(r.get("from", (str, int, float), "")), to_version=str(r.get("to", (str, int, float), "")),
        note=r.get("note", str, ""), effects=effects, workload=wl,
    )


def _quota(r: Reader, base: TenantQuota) -> TenantQuota:
    r.unknown(set(TenantQuota.__dataclass_fields__))
    return TenantQuota(
        weight=r.get("weight", float, base.weight, minimum=1e-6, maximum=MAX_WEIGHT),
        core=r.get("core", bool, base.core),
        rpm=r.get("rpm", float, base.rpm, minimum=0.0, maximum=MAX_QUOTA),
        tpm=r.get("tpm", float, base.tpm, minimum=0.0, maximum=MAX_QUOTA),
        concurrency=r.get("concurrency", int, base.concurrency, minimum=0, maximum=MAX_ENGINE_INT),
        token_budget=r.get("token_budget", float, base.token_budget, minimum=0.0, maximum=MAX_QUOTA),
        burst_s=r.get("burst_s", float, base.burst_s, minimum=1.0, maximum=MAX_BURST_S),
    )


def _overload_step(r: Reader) -> OverloadStep:
    kind = r.get("step", str, choices=tuple(OVERLOAD_STEPS))
    params = OVERLOAD_STEPS[kind]
    r.unknown({"step", "signal", "above", "below", "hold_s", *params})
    signal = r.get("signal", str, choices=OVERLOAD_SIGNALS)
    top = 1.0 if signal == "kv_usage" else MAX_WAIT_S
    above = r.get("above", float, minimum=0.0, maximum=top)
    below = r.get("below", float, above / 2, minimum=0.0, maximum=above)
    tiers = tuple(r.get("tiers", list, ["P1", "P2"])) if "tiers" in params else ()
    if "tiers" in params and not tiers:
        r.fail("tiers", f"{kind} needs at least one tier")
    for i, tier in enumerate(tiers):
        if tier not in ("P1", "P2"):
            r.fail(f"tiers[{i}]", f"must be P1 or P2 (P0 is what the ladder protects); got {tier!r}")
    step = OverloadStep(
        kind, signal, above, below, r.get("hold_s", float, 10.0, minimum=0.0, maximum=MAX_WAIT_S),
        max_tokens=r.get("max_tokens", int, None, minimum=1, maximum=MAX_ENGINE_INT),
        context_tokens=r.get("context_tokens", int, None, minimum=1, maximum=MAX_ENGINE_INT),
        limit=r.get("limit", float, None, minimum=0.0, maximum=1.0), tiers=tiers)
    if kind == "degrade_p1" and step.max_tokens is None and step.context_tokens is None:
        r.fail("", "degrade_p1 needs max_tokens, context_tokens or both")
    if kind == "tpm_limit" and not step.limit:
        r.fail("limit", "tpm_limit needs a limit in (0, 1]: the share of their TPM quota non-core tenants keep")
    return step


def _overload(r: Reader) -> tuple[OverloadStep, ...]:
    steps: list[OverloadStep] = []
    for s in r.items("overload"):
        step = _overload_step(s)
        if any(x.step == step.step for x in steps):
            s.fail("step", f"{step.step} is already a step of the ladder")
        steps.append(step)
    return tuple(steps)


def _fallbacks(r: Reader | None, deployments: dict[str, DeploymentConfig]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``{primary: [backup, ...]}``: each a deployment, a backup never its own primary and declaring capabilities (what
    the gateway checks a request against before it may stand in)."""
    if r is None:
        return ()
    out = []
    for primary in r.data:
        if primary not in deployments:
            r.fail(str(primary), f"no deployment named {primary!r}; have {', '.join(deployments)}")
        backups = r.get(primary, list)
        for i, b in enumerate(backups):
            where = f"{primary}[{i}]"
            if not isinstance(b, str) or b not in deployments:
                r.fail(where, f"no deployment named {b!r}; have {', '.join(deployments)}")
            if b == primary or backups.index(b) != i:
                r.fail(where, f"{b!r} is the primary or listed twice")
            if deployments[b].capabilities is None:
                r.fail(where, f"backup {b!r} declares no capabilities (deployments[].capabilities), so no request "
                              "could be checked against it")
        out.append((str(primary), tuple(backups)))
    return tuple(out)


def _breaker(r: Reader | None) -> BreakerConfig | None:
    if r is None:
        return None
    r.unknown(set(BreakerConfig.__dataclass_fields__))
    return BreakerConfig(r.get("failures", int, 5, minimum=1, maximum=MAX_ENGINE_INT),
                         r.get("error_ratio", float, 0.5, minimum=0.01, maximum=1.0),
                         r.get("window_s", float, 10.0, minimum=0.001, maximum=MAX_WAIT_S),
                         r.get("min_requests", int, 20, minimum=1, maximum=MAX_ENGINE_INT),
                         r.get("open_s", float, 30.0, minimum=0.001, maximum=MAX_WAIT_S))


def _retry(r: Reader | None) -> RetryConfig | None:
    if r is None:
        return None
    r.unknown(set(RetryConfig.__dataclass_fields__))
    return RetryConfig(r.get("attempts", int, 3, minimum=1, maximum=MAX_RETRY_ATTEMPTS),
                       r.get("backoff_s", float, 1.0, minimum=0.0, maximum=MAX_WAIT_S))


def _gateway(r: Reader, deployments: dict[str, DeploymentConfig]) -> GatewayConfig:
    r.unknown({"max_in_flight_per_replica", "tiers", "default_tenant", "tenants", "fallbacks", "circuit_breaker",
               "retry", "capacity_fallback", "overload"})
    tiers_r = r.child("tiers", None)
    if tiers_r is not None:
        tiers_r.unknown(set(TIERS))
    tiers = []
    for tier in TIERS:
        t = tiers_r.child(tier, None) if tiers_r is not None else None
        if t is None:
            tiers.append(TierQueue(TIER_MAX_WAIT_S[tier]))
            continue
        t.unknown({"max_wait_s", "max_queued", "max_share"})
        share = t.get("max_share", float, 1.0, minimum=0.0, maximum=1.0)
        if share <= 0:
            t.fail("max_share", "must be > 0 (a tier with no slots would only time out)")
        tiers.append(TierQueue(t.get("max_wait_s", float, TIER_MAX_WAIT_S[tier], minimum=0.0, maximum=MAX_WAIT_S),
                               t.get("max_queued", int, 10_000, minimum=1, maximum=MAX_QUEUED), share))
    d = r.child("default_tenant", None)
    default = _quota(d, TenantQuota()) if d is not None else TenantQuota()
    ten = r.child("tenants", None)
    tenants: tuple[tuple[str, TenantQuota], ...] = ()
    if ten is not None:
        if len(ten.data) > MAX_GATEWAY_TENANTS:
            ten.fail("", f"{len(ten.data)} tenants, over the limit of {MAX_GATEWAY_TENANTS}")
        tenants = tuple((str(k), _quota(_required_child(ten, k), default)) for k in ten.data)
    fallbacks = _fallbacks(r.child("fallbacks", None), deployments)
    breaker = _breaker(r.child("circuit_breaker", None))
    if breaker is not None and not fallbacks:
        r.fail("circuit_breaker", "guards the primaries of gateway.fallbacks, and there are none")
    return GatewayConfig(r.get("max_in_flight_per_replica", int, None, minimum=1, maximum=MAX_ENGINE_INT),
                         tuple(tiers), default, tenants, overload=_overload(r), fallbacks=fallbacks,
                         circuit_breaker=breaker, retry=_retry(r.child("retry", None)),
                         capacity_fallback=r.get("capacity_fallback", bool, False))


def parse_fleet(data: Any, source: str) -> FleetConfig:
    root = Reader(source, data, "")
    root.unknown({"name", "start_time", "seed", "deployments", "workloads", "events", "gateway"})
    start_raw = root.get("start_time", (str, datetime), "2026-01-05T00:00:00Z")
    try:
        start = start_raw if isinstance(start_raw, datetime) else datetime.fromisoformat(start_raw.replace("Z", "+00:00"))
    except ValueError:
        root.fail("start_time", f"not an RFC 3339 time: {start_raw!r}")
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    deps: dict[str, DeploymentConfig] = {}
    for d in root.items("deployments"):
        dep = _deployment(d)
        if dep.name in deps:
            d.fail("name", f"duplicate deployment {dep.name!r}")
        deps[dep.name] = dep
    if not deps:
        root.fail("deployments", "at least one deployment is required")
    wls: dict[str, WorkloadConfig] = {}
    for w in root.items("workloads"):
        wl = _workload(w, deps)
        if wl.name in wls:
            w.fail("name", f"duplicate workload {wl.name!r}")
        wls[wl.name] = wl
    if not wls:
        root.fail("workloads", "at least one workload is required")
    events = tuple(sorted((_event(e, deps, set(wls)) for e in root.items("events")), key=lambda e: e.at))
    gw = root.child("gateway", None)
    return FleetConfig(
        name=root.get("name", str, Path(source).stem), source=source, start_time=start,
        seed=root.get("seed", int, 0, minimum=0), deployments=tuple(deps.values()), workloads=tuple(wls.values()),
        events=events, gateway=_gateway(gw, deps) if gw is not None else None,
    )


def load_fleet(path: str | Path) -> FleetConfig:
    return parse_fleet(load_mapping(path, "a mapping with deployments and workloads"), str(path))


def check_request_budget(cfg: FleetConfig, duration_s: float, flag: str = "--duration") -> None:
    """``ConfigError`` when the arrivals the fleet's workloads expect over ``duration_s`` (rate integrated over the
    window, plus its batches) exceed ``MAX_REQUESTS``: refused before the run, by arithmetic, not by memory."""
    total = 0.0
    for w in cfg.workloads:
        if w.arrival is None:
            continue  # a trace is as long as its file, which is bounded
        a = w.arrival
        peak = max([a.rate, *(s.rate for s in a.steps)]) * max([1.0, *(b.factor for b in a.bursts)])
        total += peak * duration_s * (1 + (a.diurnal.amplitude if a.diurnal else 0.0))
        total += sum(b.count for b in a.batches if b.at < duration_s)
    if total > MAX_REQUESTS:
        raise ConfigError(cfg.source, flag, f"{duration_s:g} s of this fleet is up to {total:,.0f} requests, over the "
                          f"limit of {MAX_REQUESTS:,} for one run; simulate a shorter window or a lower rate")
