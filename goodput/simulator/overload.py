"""The overload ladder (the seed's section 8): protective steps a deployment's gateway engages one at a time, in the
order the fleet file lists them, as its overload signal rises, and releases in reverse order once it has calmed.

Each step has its own trigger: a gateway-observable signal of its deployment (``p0_wait_s``: the oldest P0 request's
wait at the gateway; ``queue_per_slot``: requests waiting there per gateway slot; ``kv_usage``: the ready engines'
mean KV-cache usage), a level ``above`` which it engages, and a level ``below`` which the signal must stay for
``hold_s`` before it releases: hysteresis, so a signal hovering near one level does not flap the step. Step k engages
only while steps 0..k-1 are engaged and releases only after k+1.. have; its hold counts from when it became the top
step, so recovery is staggered by at least each step's ``hold_s``. One change at most per observation.

What a step does while engaged (the gateway asks: ``defers``, ``refuses``, ``tpm_scale``, ``degrade``):
``defer_p2`` holds P2 lanes (they wait, up to their ``max_wait_s``); ``degrade_p1`` caps a P1 request's output at
``max_tokens`` and trims its prompt to ``context_tokens`` when the gateway sends it; ``tpm_limit`` scales non-core
tenants' TPM quotas by ``limit``; ``fail_fast`` refuses its ``tiers`` at once with reason ``busy``. The kinds are the
catalog's ``OVERLOAD_STEPS`` (the numbering of ``llm_gateway_overload_step``); a further kind joins that one list, takes
its keys in goodput/simulator/config.py and asks ``engaged(d, kind)``. Fallback routes are no step (fallback.py).

No I/O and no clock of its own: the gateway measures the signals and calls ``observe``; ``log`` is the timeline
(``LadderChange`` rows) a report draws the ladder stepping in and out from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import inf
from typing import NamedTuple

from goodput.contracts.vocabulary import TIER_RANK
from goodput.simulator.config import OverloadStep
from goodput.simulator.request import Request

__all__ = ["Ladder", "LadderChange", "degrade"]

P1, P2 = TIER_RANK["P1"], TIER_RANK["P2"]


class LadderChange(NamedTuple):
    """A step of deployment ``deployment`` engaged (``on``) or released at ``t``, with the signal value that did it."""

    t: float
    deployment: str
    step: str
    on: bool
    signal: str
    value: float


class Ladder:
    """The ladder's state at each deployment (how many of its steps are engaged) and the timeline of changes."""

    def __init__(self, steps: Sequence[OverloadStep], deployments: Sequence[str]) -> None:
        self.steps = tuple(steps)
        self.deployments = tuple(deployments)
        self.signals = tuple(dict.fromkeys(s.signal for s in self.steps))  # what the gateway has to measure
        self.index = {s.step: i for i, s in enumerate(self.steps)}
        self.level = [0] * len(self.deployments)  # steps engaged, from the first
        self.calm_since = [inf] * len(self.deployments)  # since when the top step's signal is below its `below`
        self.log: list[LadderChange] = []

    def observe(self, d: int, t: float, signals: Mapping[str, float]) -> LadderChange | None:
        """Deployment ``d``'s signals at ``t``: engage the next step, release the top one, or neither."""
        level, steps = self.level[d], self.steps
        if level < len(steps) and signals[steps[level].signal] > steps[level].above:
            self.level[d] = level + 1
            self.calm_since[d] = inf
            return self._change(d, t, steps[level], True, signals)
        if not level:
            return None
        top = steps[level - 1]
        if signals[top.signal] >= top.below:
            self.calm_since[d] = inf
            return None
        if self.calm_since[d] == inf:
            self.calm_since[d] = t
        if t - self.calm_since[d] < top.hold_s:
            return None
        self.level[d] = level - 1
        below = steps[level - 2] if level > 1 else None  # the new top step's hold starts now, if it is calm too
        self.calm_since[d] = t if below is not None and signals[below.signal] < below.below else inf
        return self._change(d, t, top, False, signals)

    def _change(self, d: int, t: float, step: OverloadStep, on: bool, signals: Mapping[str, float]) -> LadderChange:
        change = LadderChange(t, self.deployments[d], step.step, on, step.signal, signals[step.signal])
        self.log.append(change)
        return change

    # ------------------------------------------------------------------ what the engaged steps ask of the gateway

    def engaged(self, d: int, kind: str) -> OverloadStep | None:
        i = self.index.get(kind)
        return self.steps[i] if i is not None and i < self.level[d] else None

    def top(self, d: int) -> str:
        """The highest step engaged at deployment ``d``; "" when none."""
        level = self.level[d]
        return self.steps[level - 1].step if level else ""

    def defers(self, d: int, tier_rank: int) -> bool:
        return tier_rank == P2 and self.engaged(d, "defer_p2") is not None

    def refuses(self, d: int, tier: str) -> bool:
        step = self.engaged(d, "fail_fast")
        return step is not None and tier in step.tiers

    def tpm_scale(self, d: int) -> float | None:
        """The share of their TPM quota non-core tenants keep at ``d`` now; None when ``tpm_limit`` is not engaged."""
        step = self.engaged(d, "tpm_limit")
        return step.limit if step is not None else None

    def degrade(self, d: int, req: Request, max_tokens: int) -> str:
        """Apply ``degrade_p1`` to P1 request ``req`` (whose output limit is ``max_tokens``) as it is sent."""
        step = self.engaged(d, "degrade_p1") if req.tier_rank == P1 else None
        return degrade(req, step, max_tokens) if step is not None else ""


def degrade(req: Request, step: OverloadStep, max_tokens: int) -> str:
    """Cap ``req``'s output and trim its prompt to ``step``'s limits; what it changed (``output_cap``,
    ``context_trim``, both joined by ``+``, "" nothing). The trim keeps the prompt's start (its shared prefix)."""
    done = []
    if step.max_tokens is not None and max_tokens > step.max_tokens:
        req.max_tokens = step.max_tokens
        if req.output_target > step.max_tokens:
            req.output_target, req.natural_stop = step.max_tokens, False
        done.append("output_cap")
    if step.context_tokens is not None and req.prompt_tokens > step.context_tokens:
        req.prompt_tokens = req.prefill_target = step.context_tokens
        if req.prefix:
            req.prefix = req.prefix[:step.context_tokens // req.prefix_block_tokens]
        done.append("context_trim")
    return "+".join(done)
