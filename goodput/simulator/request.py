"""One simulated request: what the client asked for, and what happened to it.

A plain ``__slots__`` class rather than a dataclass: the simulator touches millions of these in
its hot loop, and slot attribute access is the cheapest Python has.
"""

from __future__ import annotations

from goodput.contracts.vocabulary import TIER_RANK

__all__ = ["Request", "gateway_meta"]

NAN = float("nan")


class Request:
    __slots__ = (
        "rid", "workload", "tenant", "tier", "tier_rank", "deployment", "replica",
        "arrival", "queue_start", "scheduled", "first_token", "last_token", "completed",
        "prompt_tokens", "output_target", "natural_stop", "cached_tokens", "generated", "preemptions",
        "finish_reason", "reject_reason", "prefix", "prefix_block_tokens",
        # engine bookkeeping for the current attempt
        "prefill_target", "computed", "blocks", "kv_len", "dec_start", "dec_token", "res_idx", "state",
        "cache_checked", "send_s", "max_tokens", "meta",
        # prefill/decode disaggregation: the prefill replica that handed the request off (-1: none), when its KV
        # reached the decode replica and when that replica first scheduled it, the bytes moved and the link's time
        "prefill_replica", "kv_ready", "decode_start", "kv_bytes", "kv_link_s",
    )

    def __init__(self, rid: int, workload: int, tenant: int, tier: str, arrival: float, queue_start: float,
                 prompt_tokens: int, output_target: int, natural_stop: bool, deployment: int,
                 prefix: tuple | None = None, prefix_block_tokens: int = 16, send_s: float = 0.0) -> None:
        self.rid = rid
        self.workload = workload
        self.tenant = tenant
        self.tier = tier
        self.tier_rank = TIER_RANK[tier]
        self.deployment = deployment
        self.replica = -1
        self.arrival = arrival
        self.queue_start = queue_start
        self.scheduled = NAN
        self.first_token = NAN
        self.last_token = NAN
        self.completed = NAN
        self.prompt_tokens = prompt_tokens
        self.output_target = output_target
        self.natural_stop = natural_stop
        self.cached_tokens = 0
        self.generated = 0
        self.preemptions = 0
        self.finish_reason = ""
        self.reject_reason = ""
        self.prefix = prefix
        self.prefix_block_tokens = prefix_block_tokens
        self.prefill_target = prompt_tokens
        self.computed = 0
        self.blocks = 0
        self.kv_len = 0
        self.dec_start = 0
        self.dec_token = 0
        self.res_idx = 0
        self.state = 0  # 0 new, 1 waiting, 2 prefilling, 3 decoding, 4 done
        self.cache_checked = False
        self.send_s = send_s
        self.max_tokens = output_target
        self.meta: dict | None = None  # live requests: tenant / tier / route / scene given by the client
        self.prefill_replica = -1
        self.kv_ready = NAN
        self.decode_start = NAN
        self.kv_bytes = 0
        self.kv_link_s = 0.0

    def __repr__(self) -> str:
        return f"Request(rid={self.rid}, tier={self.tier}, in={self.prompt_tokens}, out={self.output_target})"


def gateway_meta(req: Request) -> dict:
    """``req.meta`` of a request the gateway holds: ``Gateway.arrive`` gives every one a dict before anything else."""
    meta = req.meta
    assert meta is not None, f"{req!r} never reached the gateway"
    return meta
