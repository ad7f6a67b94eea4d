"""Prefill/decode disaggregation against one aggregated pool, from the roofline and the KV pool: pure arithmetic.

In the spirit of Dynamo's SLA planner and AIConfigurator (prefill replicas from prompt-token throughput under the
TTFT target, decode replicas from concurrent sequences under the TPOT target), with the queueing and interference
of the simulator's own scheduler (``goodput/simulator/replica.py``, vLLM V1's):

* Every step gives every decoding sequence one token and each prompt in prefill its next chunk (at most
  ``prefill_chunk_tokens``) while the step's token budget (``max_num_batched_tokens``) lasts; a step costs what
  the simulator charges for it, ``Roofline.step_time`` of its tokens, attention pairs and KV read (``step_s``).
* One replica's prefill is a processor-sharing queue whose speed depends on how many prompts share it: with ``k``
  prompts in prefill a step carries ``min(k x chunk, budget - B)`` prefill tokens beside the ``B`` decoding
  sequences. Its birth-death chain (Poisson arrivals, state-dependent rates) gives the share of time at each ``k``.
* TTFT: the gateway routes least-outstanding. In a prefill pool every outstanding request is a prompt in prefill,
  so new prompts go to idle lanes first and the pool is one M/G/c queue (Erlang C, Allen-Cunneen's (1 + cs^2) / 2,
  an exponential tail: exact for M/M/c), but with no central queue: a prompt that waits is committed to one
  replica, so it waits at least that replica's mean residual prefill. In an aggregated pool most outstanding
  requests are decoding, so a replica's prompts queue at its share of the rate: the chain's mean (Little) beyond a
  lone prompt's own chunks, with an exponential tail.
* TPOT: a request's TPOT is its mean step, so TPOT = 1 / (sum over k of P(k) / t_k), and the decode batch
  follows from Little's law (B = rate x output tokens x TPOT), solved as a fixed point. Its quantile scales the
  prefill's extra time by the Poisson quantile of the prompts arriving within one request's decode. That is where
  long prompts hurt: their chunks make the step compute-bound and slow every decoding sequence beside them.
* Disaggregated: the prefill pool is the same queue without decodes; the decode pool's batch is the largest
  whose decode-only step meets the TPOT, bounded by ``max_num_seqs`` and the KV cache (blocks for prompt + half
  the output), and which of the three binds is reported.
* KV transfer: the simulator's own (``DisaggConfig.transfer_s``: the link's latency, then one prefill GPU's KV
  shard of the prompt at ``kv_link_gbps`` Gbit/s, every TP rank over its own NIC). vLLM's P/D connectors return
  the first token from the prefill replica and move the KV before the second, so by default it counts in the
  TPOT (spread over the output's gaps); ``transfer_in="ttft"`` counts it before the first token instead.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any

from goodput.simulator.config import MAX_REPLICAS, DisaggConfig  # per pool, as the simulator's deployments
from goodput.simulator.roofline import Roofline

__all__ = [
    "AggregatedPlan",
    "Comparison",
    "DecodePlan",
    "Load",
    "Pool",
    "PrefillPlan",
    "ReplicaState",
    "compare",
    "erlang_c",
    "plan_aggregated",
    "plan_decode_pool",
    "plan_prefill_pool",
    "replica_state",
    "step_s",
]

CHUNK_OPTIONS = (256, 512, 1024, 2048, 4096, 8192, 16384)  # prefill_chunk_tokens the aggregated plan tries
FIXED_POINT_STEPS = 200
# the order in which a failing replica count names what binds
CONSTRAINTS = ("prefill_throughput", "max_num_seqs", "kv", "tpot", "ttft")


@dataclass(frozen=True)
class Load:
    """The demand planned for: the deployment's streams at peak x growth as one mix, and the strictest SLO."""

    rps: float
    input_mean: float
    input_p: float  # the objective's quantile of the prompt length
    input_max: float
    input_cv2: float  # the prompt length's squared coefficient of variation
    output_mean: float
    ttft_s: float
    tpot_s: float
    objective: float  # share of requests that must meet the SLO: its quantiles of TTFT and TPOT are planned for

    @property
    def context(self) -> float:
        """A decoding sequence's mean context: the prompt and half its output."""
        return self.input_mean + self.output_mean / 2.0


@dataclass(frozen=True)
class Pool:
    """One replica set-up: its roofline, KV pool, scheduler limits and price."""

    role: str  # "aggregated", "prefill" or "decode"
    gpu: str
    tp: int
    roofline: Roofline
    kv_tokens: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    prefill_chunk_tokens: int
    usd_per_gpu_hour: float | None


def step_s(pool: Pool, batch: float, context: float, prompts: float = 0.0, tokens: float = 0.0,
           prompt: float = 0.0) -> float:
    """One step: ``batch`` decodes of mean ``context`` and ``tokens`` prefill tokens shared by ``prompts`` prompts of
    ``prompt`` tokens, at the simulator's cost: a chunk of ``c`` tokens after ``m`` computed ones attends
    ``c m + c (c + 1) / 2`` pairs and reads ``m + c`` KV tokens (``m`` averaged over the prompt), and the step takes
    ``Roofline.step_time`` of them all, so a plan and its simulated replay price a mixed step alike."""
    pairs = kv = batch * context
    if prompts > 0 and tokens > 0:
        c = tokens / prompts
        m = max(0.0, (prompt - c) / 2.0)
        pairs += prompts * (c * m + c * (c + 1) / 2.0)
        kv += prompts * (m + c)
    # the simulator annotates ``tokens`` int, but a step's mean tokens are fractional: its .pxd takes a double
    return pool.roofline.step_time(batch + tokens, pairs, kv)


def _kv_need(load: Load, pool: Pool) -> float:
    """KV tokens a decoding sequence holds: its mean context in whole blocks."""
    return math.ceil(load.context / pool.block_size) * pool.block_size


@dataclass(frozen=True)
class ReplicaState:
    """One replica's steady state at ``rate`` req/s: its decode batch, step times, TTFT and TPOT, and what fails."""

    rate: float
    chunk: int
    batch: float = 0.0
    decode_step_s: float = 0.0
    prefill_step_s: float = 0.0  # a step with one prompt's chunk beside the batch
    prefill_busy: float = 0.0  # share of the time some prompt is in prefill
    in_prefill: float = 0.0  # mean prompts in prefill
    ttft_mean_s: float = math.inf
    ttft_s: float = math.inf  # the objective's quantile, the transfer included where it counts
    tpot_mean_s: float = math.inf
    tpot_s: float = math.inf  # the objective's quantile, the transfer included where it counts
    kv_tokens: float = 0.0
    failed: tuple[str, ...] = field(default=())


def _prefill_chain(load: Load, pool: Pool, rate: float, batch: float, chunk: int
                   ) -> tuple[list[float], list[float], float, float, int] | None:
    """(P(k) for k = 0..K, the step time at each k, the mean prompts in prefill, steps per second, prefill lanes)
    of the birth-death chain of one replica's prompts in prefill; K is where the step budget fills, beyond which the
    chain is geometric; the lanes are the prompts a full budget prefills in the time one prompt alone takes. None
    when the prefill cannot keep up with ``rate``."""
    room = pool.max_num_batched_tokens - math.ceil(batch)
    if room < 1:
        return None
    per = min(chunk, load.input_mean, room)
    top = max(1, math.ceil(room / per - 1e-9))
    times = [step_s(pool, batch, load.context)]
    weights = [1.0]
    for k in range(1, top + 1):
        tokens = min(k * per, room)
        t = step_s(pool, batch, load.context, k, tokens, load.input_mean)
        times.append(t)
        weights.append(weights[-1] * rate * t * load.input_mean / tokens)  # x rate / completions per second
    rho = weights[-1] / weights[-2]  # beyond K every step is the same: the tail is geometric in this ratio
    if rho >= 1.0:
        return None
    tail = weights[-1] * rho / (1.0 - rho)
    total = sum(weights) + tail
    probs = [w / total for w in weights]
    probs[-1] += tail / total  # the tail's steps cost what the full step costs
    mean_k = (sum(k * w for k, w in enumerate(weights))
              + weights[-1] * (top * rho / (1.0 - rho) + rho / (1.0 - rho) ** 2)) / total
    steps_per_s = sum(p / t for p, t in zip(probs, times, strict=True))
    full_rate = min(top * per, room) / (times[-1] * load.input_mean)  # prompts a second at a full budget
    lanes = max(1, int(full_rate * _alone_s(load, pool, batch, chunk, load.input_mean) + 1e-9))
    return probs, times, mean_k, steps_per_s, lanes


def _alone_s(load: Load, pool: Pool, batch: float, chunk: int, prompt: float) -> float:
    """A ``prompt``-token prefill with no other prompt beside it: its whole chunks, then the rest."""
    room = min(chunk, pool.max_num_batched_tokens - math.ceil(batch))
    full, rest = divmod(prompt, room)
    t = full * step_s(pool, batch, load.context, 1, room, prompt)
    return t + (step_s(pool, batch, load.context, 1, rest, prompt) if rest >= 1 else 0.0)


def erlang_c(servers: int, offered: float) -> float:
    """The probability an arrival waits in M/M/c with ``offered`` = rate x mean service (1 when unstable)."""
    if offered >= servers:
        return 1.0
    b = 1.0
    for k in range(1, servers + 1):  # Erlang B by its recurrence, then C from B
        b = offered * b / (k + offered * b)
    return b / (1.0 - offered / servers * (1.0 - b))


def replica_state(load: Load, pool: Pool, replicas: int, *, chunk: int | None = None, decodes: bool = True,
                  ttft_extra_s: float = 0.0, kv_held_s: float = 0.0) -> ReplicaState:
    """One of ``replicas`` replicas of ``pool`` sharing the load, prefilling in ``chunk``-token chunks (default the
    pool's), with its decodes (``decodes=False``: a prefill replica). ``ttft_extra_s`` is added to the TTFT (a KV
    transfer there); ``kv_held_s`` is how long a finished prompt keeps its KV (a prefill replica's transfer)."""
    chunk = chunk or pool.prefill_chunk_tokens
    rate = load.rps / replicas
    batch, rounds = 0.0, FIXED_POINT_STEPS if decodes else 1
    while True:  # at least one round: the chain below is the last round's
        chain = _prefill_chain(load, pool, rate, batch, chunk)
        if chain is None:
            return ReplicaState(rate, chunk, batch, failed=("prefill_throughput",))
        new = rate * load.output_mean / chain[3] if decodes else 0.0
        if new > pool.max_num_seqs:
            return ReplicaState(rate, chunk, new, chain[1][0], chain[1][1], failed=("max_num_seqs",))
        done = abs(new - batch) < 1e-6 * max(1.0, new)
        batch, rounds = new, rounds - 1
        if done or rounds == 0:
            break
    probs, times, mean_k, steps_per_s, lanes = chain
    alone = _alone_s(load, pool, batch, chunk, load.input_mean)
    alone_p = _alone_s(load, pool, batch, chunk, load.input_p)
    p = load.objective
    if decodes:
        # least-outstanding routing balances requests, most of them decoding: a replica's prompts queue at its
        # share of the rate, and the chain's mean (Little) beyond a lone prompt's time has an exponential tail
        excess = max(0.0, mean_k / rate - alone)
        ttft_mean, ttft = alone + excess, alone_p + excess * math.log(1.0 / (1.0 - p))
    else:
        # a prefill pool's outstanding requests are its prompts: the routing fills idle lanes first, so the pool is
        # one M/G/c queue (Erlang C's chance of waiting, Allen-Cunneen's mean wait, an exponential tail); but there
        # is no central queue: a prompt that waits is committed to one replica, so it waits at least the mean
        # residual prefill of that replica's lanes, not for the first of all the pool's lanes to free
        servers, offered = replicas * lanes, load.rps * alone
        waits = erlang_c(servers, offered)
        if waits >= 1.0:
            return ReplicaState(rate, chunk, batch, times[0], times[1], failed=("prefill_throughput",))
        given = alone / min(servers - offered, lanes) * (1.0 + load.input_cv2) / 2.0
        ttft_mean = alone + waits * given
        ttft = alone_p + (given * math.log(waits / (1.0 - p)) if waits > 1.0 - p else 0.0)
    ttft_mean += ttft_extra_s
    ttft += ttft_extra_s
    tpot_mean = 1.0 / steps_per_s
    # the prefill a request's decode sees: the prompts arriving within it, Poisson in number
    arrivals = rate * load.output_mean * tpot_mean
    spread = 1.0 + NormalDist().inv_cdf(p) / math.sqrt(arrivals) if arrivals > 0 else 1.0
    tpot = times[0] + (tpot_mean - times[0]) * max(1.0, spread)
    kv = batch * _kv_need(load, pool) + (mean_k + rate * kv_held_s) * load.input_mean
    failed = tuple(name for name, bad in (("kv", kv > pool.kv_tokens), ("tpot", decodes and tpot > load.tpot_s),
                                          ("ttft", ttft > load.ttft_s)) if bad)
    return ReplicaState(rate, chunk, batch, times[0], times[1], 1.0 - probs[0], mean_k, ttft_mean, ttft,
                        tpot_mean, tpot, kv, failed)


def _fewest(judge) -> tuple[int, ReplicaState, ReplicaState | None] | None:
    """The fewest replicas whose state ``judge(replicas)`` fails nothing (more replicas never fail more), and the
    state one fewer; None beyond MAX_REPLICAS."""
    if judge(MAX_REPLICAS).failed:
        return None
    lo, hi = 1, MAX_REPLICAS
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if not judge(mid).failed else (mid + 1, hi)
    return lo, judge(lo), (judge(lo - 1) if lo > 1 else None)


def _binding(below: ReplicaState | None) -> str:
    """What one replica fewer fails first, in CONSTRAINTS' order; "one replica" when one suffices."""
    return "one replica" if below is None else next(c for c in CONSTRAINTS if c in below.failed)


@dataclass(frozen=True)
class PrefillPlan:
    replicas: int
    at: ReplicaState  # one prefill replica at its share of the rate
    below: ReplicaState | None

    @property
    def binding(self) -> str:
        return _binding(self.below)


def plan_prefill_pool(load: Load, pool: Pool, transfer_s: float, transfer_in: str) -> PrefillPlan | str:
    """The fewest prefill replicas whose TTFT quantile meets the SLO; a reason string when none does."""
    extra = transfer_s if transfer_in == "ttft" else 0.0
    found = _fewest(lambda r: replica_state(load, pool, r, decodes=False, ttft_extra_s=extra, kv_held_s=transfer_s))
    if found is None:
        last = replica_state(load, pool, MAX_REPLICAS, decodes=False, ttft_extra_s=extra)
        return f"{', '.join(last.failed)}: no prefill pool of up to {MAX_REPLICAS} replicas meets the SLO"
    return PrefillPlan(*found)


@dataclass(frozen=True)
class DecodePlan:
    replicas: int
    batch: int  # the most sequences one decode replica holds within the SLO
    limit: str  # which of max_num_seqs / kv / tpot sets it
    limits: dict[str, int]
    step_s: float  # the decode step at that batch
    tpot_s: float  # with the transfer where it counts
    tokens_per_s: float  # output tokens/s one decode replica serves at that batch
    work: float  # decode replicas' worth of work at the demand (replicas before rounding up)


def plan_decode_pool(load: Load, pool: Pool, transfer_s: float, transfer_in: str) -> DecodePlan | str:
    extra = transfer_s / max(load.output_mean - 1.0, 1.0) if transfer_in == "tpot" else 0.0

    def fits(b: int) -> bool:
        return step_s(pool, b, load.context) + extra <= load.tpot_s

    if not fits(1):
        return (f"tpot: one sequence's decode step ({step_s(pool, 1, load.context) * 1000:.1f} ms"
                f"{f' + {extra * 1000:.2f} ms of KV transfer' if extra else ''}) exceeds the TPOT "
                f"{load.tpot_s * 1000:.0f} ms")
    lo, hi = 1, pool.max_num_seqs
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    limits = {"max_num_seqs": pool.max_num_seqs, "kv": int(pool.kv_tokens // _kv_need(load, pool)), "tpot": lo}
    limit = min(limits, key=lambda k: (limits[k], k != "max_num_seqs"))
    batch = limits[limit]
    if batch < 1:
        return f"kv: a decode replica's KV cache ({pool.kv_tokens:,} tokens) holds no sequence of {load.context:,.0f}"
    step = step_s(pool, batch, load.context)
    tps = batch / step
    work = load.rps * load.output_mean / tps
    return DecodePlan(max(1, math.ceil(work - 1e-9)), batch, limit, limits, step, step + extra, tps, work)


@dataclass(frozen=True)
class AggregatedPlan:
    replicas: int
    at: ReplicaState  # one replica at its share of the rate, at the planned chunk
    below: ReplicaState | None  # one replica fewer (None: one replica suffices)
    own_chunk: int  # the candidate's prefill_chunk_tokens
    own_chunk_replicas: int | None  # what the candidate's own chunk needs (None: no count up to the limit)

    @property
    def binding(self) -> str:
        return _binding(self.below)


def plan_aggregated(load: Load, pool: Pool) -> AggregatedPlan | str:
    """The fewest aggregated replicas meeting both SLOs, over the prefill chunk sizes up to the step budget (the
    candidate's own among them): a smaller chunk slows decode less, but takes more steps per prompt."""
    own = pool.prefill_chunk_tokens
    options = sorted({own, *(c for c in CHUNK_OPTIONS if c <= pool.max_num_batched_tokens)})
    ok = {}
    for c in options:
        found = _fewest(lambda r, c=c: replica_state(load, pool, r, chunk=c))
        if found is not None:
            ok[c] = found
    if not ok:
        last = replica_state(load, pool, MAX_REPLICAS)
        return f"{', '.join(last.failed)}: no aggregated pool of up to {MAX_REPLICAS} replicas meets the SLO"
    chunk = min(ok, key=lambda c: (ok[c][0], c != own, -c))
    return AggregatedPlan(*ok[chunk], own, ok[own][0] if own in ok else None)


@dataclass(frozen=True)
class Comparison:
    load: Load
    link: DisaggConfig
    transfer_in: str
    transfer_s: float
    aggregated: AggregatedPlan
    prefill: PrefillPlan
    decode: DecodePlan
    pools: dict[str, Pool]
    verdict: str  # "disaggregated" or "aggregated"
    reason: str

    @property
    def aggregated_gpus(self) -> int:
        return self.aggregated.replicas * self.pools["aggregated"].tp

    @property
    def disaggregated_gpus(self) -> int:
        return self.prefill.replicas * self.pools["prefill"].tp + self.decode.replicas * self.pools["decode"].tp

    def usd_per_hour(self, layout: str) -> float | None:
        parts = ([("aggregated", self.aggregated.replicas)] if layout == "aggregated"
                 else [("prefill", self.prefill.replicas), ("decode", self.decode.replicas)])
        total = 0.0
        for role, replicas in parts:
            pool = self.pools[role]
            if pool.usd_per_gpu_hour is None:
                return None
            total += replicas * pool.tp * pool.usd_per_gpu_hour
        return total

    def usd_per_million_tokens(self, layout: str) -> float | None:
        """The layout's hourly cost over the input + output tokens it serves in that hour at the planned demand."""
        usd = self.usd_per_hour(layout)
        tokens = self.load.rps * (self.load.input_mean + self.load.output_mean) * 3600.0
        return None if usd is None else usd / tokens * 1e6

    def as_dict(self) -> dict[str, Any]:
        a, pf, d = self.aggregated, self.prefill, self.decode
        return {
            "verdict": self.verdict, "reason": self.reason,
            "demand": {**asdict(self.load), "context": self.load.context},
            "kv_link": {"gbps": self.link.kv_link_gbps, "latency_ms": self.link.kv_link_latency_ms,
                        "transfer_ms": round(self.transfer_s * 1000.0, 3), "counted_in": self.transfer_in},
            "aggregated": {
                **_pool(self.pools["aggregated"]), "replicas": a.replicas, "gpus": self.aggregated_gpus,
                "planned_prefill_chunk_tokens": a.at.chunk, "own_chunk_replicas": a.own_chunk_replicas,
                "binding": a.binding, "fails_one_fewer": list(a.below.failed) if a.below else [],
                "replica": _state(a.at), "usd_per_hour": _round(self.usd_per_hour("aggregated"), 2),
                "usd_per_million_tokens": _round(self.usd_per_million_tokens("aggregated"), 4)},
            "disaggregated": {
                "replicas": {"prefill": pf.replicas, "decode": d.replicas}, "gpus": self.disaggregated_gpus,
                "ratio": f"{pf.replicas}:{d.replicas}",
                "usd_per_hour": _round(self.usd_per_hour("disaggregated"), 2),
                "usd_per_million_tokens": _round(self.usd_per_million_tokens("disaggregated"), 4),
                "prefill": {**_pool(self.pools["prefill"]), "replicas": pf.replicas, "binding": pf.binding,
                            "fails_one_fewer": list(pf.below.failed) if pf.below else [],
                            "replica": _state(pf.at, decodes=False)},
                "decode": {**_pool(self.pools["decode"]), "replicas": d.replicas, "binding": d.limit,
                           "batch": d.batch, "limits": d.limits, "step_ms": round(d.step_s * 1000.0, 3),
                           "tpot_ms": round(d.tpot_s * 1000.0, 3), "tokens_per_s": round(d.tokens_per_s, 1),
                           "work_replicas": round(d.work, 3)}},
        }


def _pool(p: Pool) -> dict[str, Any]:
    return {"gpu": p.gpu, "tp": p.tp, "kv_tokens": p.kv_tokens, "max_num_seqs": p.max_num_seqs,
            "max_num_batched_tokens": p.max_num_batched_tokens, "prefill_chunk_tokens": p.prefill_chunk_tokens}


def _state(s: ReplicaState, decodes: bool = True) -> dict[str, Any]:
    ms = 1000.0
    out = {"rate_rps": round(s.rate, 4), "prefill_chunk_tokens": s.chunk, "prefill_step_ms": round(s.prefill_step_s * ms, 3),
           "prefill_busy": round(s.prefill_busy, 4), "in_prefill": round(s.in_prefill, 3),
           "ttft_mean_ms": round(s.ttft_mean_s * ms, 1), "ttft_ms": round(s.ttft_s * ms, 1), "kv_tokens": round(s.kv_tokens)}
    if decodes:
        out.update({"batch": round(s.batch, 2), "decode_step_ms": round(s.decode_step_s * ms, 3),
                    "tpot_mean_ms": round(s.tpot_mean_s * ms, 3), "tpot_ms": round(s.tpot_s * ms, 3)})
    return out


def _round(v: float | None, digits: int) -> float | None:
    return None if v is None else round(v, digits)


def _binds(binding: str) -> str:
    return "one replica suffices" if binding == "one replica" else f"{binding} binds one replica fewer"


def _reason(load: Load, a: AggregatedPlan, pf: PrefillPlan, d: DecodePlan, transfer_s: float, transfer_in: str,
            agg_gpus: int, dis_gpus: int) -> tuple[str, str]:
    """The verdict and why, in the figures that decide it: how much a prefill chunk slows the aggregated
    replica's decode steps, what binds each pool, and what the split costs (rounding, the transfer)."""
    at = a.at
    slow = at.prefill_step_s / at.decode_step_s - 1.0
    q = f"p{load.objective * 100:g}"
    prompts = f"{load.input_mean:,.0f} tokens mean against {load.output_mean:,.0f} out"
    interference = (f"on the aggregated replica a step with a {at.chunk:,}-token prefill chunk takes "
                    f"{at.prefill_step_s * 1000:.1f} ms against {at.decode_step_s * 1000:.1f} ms decode-only "
                    f"(+{slow:.0%}), prefill in flight {at.prefill_busy:.0%} of the time")
    apart = (f"apart, a decode replica holds {d.batch} sequences ({d.limit} binds) and the prefill pool is "
             f"{pf.at.prefill_busy:.0%} busy ({_binds(pf.binding)})")
    if dis_gpus < agg_gpus:
        return "disaggregated", (
            f"disaggregated saves {agg_gpus - dis_gpus} GPUs ({dis_gpus} vs {agg_gpus}): the prompts' prefill "
            f"({prompts}) interferes with decode: {interference}, so a replica holds {at.batch:.1f} sequences at "
            f"{q} TPOT {at.tpot_s * 1000:.1f} ms and {q} TTFT {at.ttft_s * 1000:.0f} ms ({_binds(a.binding)}); "
            f"{apart}")
    lead = (f"aggregated wins by {dis_gpus - agg_gpus} GPUs ({agg_gpus} vs {dis_gpus})" if agg_gpus < dis_gpus
            else f"a tie at {agg_gpus} GPUs goes to the simpler aggregated deployment")
    return "aggregated", (
        f"{lead}: the prompts' prefill ({prompts}) fits beside decode: {interference}, within the {q} TPOT "
        f"({at.tpot_s * 1000:.1f} ms; {_binds(a.binding)}); the disaggregated plan pays two pools' rounding "
        f"(prefill {pf.replicas} replica(s) {pf.at.prefill_busy:.0%} busy, decode {d.replicas} for {d.work:.2f} "
        f"replicas of work) and the KV transfer ({transfer_s * 1000:.2f} ms a request, in the "
        f"{transfer_in.upper()}); {apart}")


def compare(load: Load, aggregated: Pool, prefill: Pool, decode: Pool, link: DisaggConfig,
            transfer_in: str = "tpot") -> Comparison | str:
    """Both layouts planned for ``load``, and which needs fewer GPUs (a tie goes to the aggregated one), with why;
    a reason string naming the SLO term when a layout cannot meet it at all."""
    # the simulator annotates the prompt's tokens int; the link time is linear in them, and the mean is fractional
    transfer = link.transfer_s(load.input_mean)
    a = plan_aggregated(load, aggregated)
    if isinstance(a, str):
        return f"aggregated: {a}"
    pf = plan_prefill_pool(load, prefill, transfer, transfer_in)
    if isinstance(pf, str):
        return f"prefill pool: {pf}"
    d = plan_decode_pool(load, decode, transfer, transfer_in)
    if isinstance(d, str):
        return f"decode pool: {d}"
    pools = {"aggregated": aggregated, "prefill": prefill, "decode": decode}
    agg_gpus = a.replicas * aggregated.tp
    dis_gpus = pf.replicas * prefill.tp + d.replicas * decode.tp
    verdict, reason = _reason(load, a, pf, d, transfer, transfer_in, agg_gpus, dis_gpus)
    return Comparison(load, link, transfer_in, transfer, a, pf, d, pools, verdict, reason)
