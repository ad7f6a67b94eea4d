"""The scenarios and protection variants ``goodput plan overload`` replays, as pure functions of a fleet file's mapping.

They rewrite the mapping a user wrote rather than the parsed ``FleetConfig``, so whatever the gateway section holds
(quotas, tier queues, the ``overload:`` ladder, ``fallbacks:`` and ``circuit_breaker:``) travels untouched into the
variant that keeps it and ``goodput.simulator.config.parse_fleet`` judges every result as ``goodput simulate`` would.

Each scenario's disturbance fills the middle third of the run (``window``), so the minutes before show the fleet
settled and the minutes after show it recover; it takes the place of the file's own (its bursts, its primary's
replicas lost and added), which would blur what the variants are compared on:

- ``burst``: every workload's arrivals at ``BURST_FACTOR`` x for the window;
- ``tenant_flood``: one tenant at ``FLOOD_FACTOR`` x its share for the whole run (its share: the mean of the other
  tenants' of its workload), the others' request rates unchanged;
- ``primary_down``: every replica of the primary deployment (the first ``gateway.fallbacks`` key, else the first
  deployment) lost at the window's start and as many added back, serving, at its end.
"""

from __future__ import annotations

import copy
from typing import Any

from goodput.foundation.errors import ConfigError

__all__ = ["BURST_FACTOR", "FLOOD_FACTOR", "OVERLOAD_SCENARIOS", "PROTECTIONS", "VARIANTS", "disturbance", "flooding_tenant",
           "primary_deployment", "scenario", "variants", "window"]

OVERLOAD_SCENARIOS = ("burst", "tenant_flood", "primary_down")
BURST_FACTOR = 3.0
FLOOD_FACTOR = 5.0
# label -> what protects the fleet in that variant
VARIANTS = {"none": "no protection (the gateway section removed)",
            "quotas": "quotas only (the gateway without its overload ladder and circuit breaker)",
            "ladder": "the configured ladder (the fleet file as written)"}
PROTECTIONS = ("overload", "circuit_breaker")  # what the quotas variant takes out of the gateway section


def window(seconds: float) -> tuple[float, float]:
    """A burst's or an outage's time: the run's middle third."""
    return seconds / 3.0, 2.0 * seconds / 3.0


def disturbance(name: str, seconds: float) -> tuple[float, float]:
    """When scenario ``name`` disturbs the fleet: the window, or the whole run for a tenant flood."""
    return (0.0, seconds) if name == "tenant_flood" else window(seconds)


def variants(fleet: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The fleet mapping under each protection of ``VARIANTS``. Quotas only keeps the fallback routes and the clients'
    retries (plumbing and client behaviour, not protection): without the breaker they are a naive failover, retries
    walking to the backup and queueing there, which is what the breaker is to be judged against."""
    none = {k: v for k, v in fleet.items() if k != "gateway"}
    quotas = copy.deepcopy(fleet)
    if isinstance(quotas.get("gateway"), dict):
        for key in PROTECTIONS:
            quotas["gateway"].pop(key, None)
    return {"none": none, "quotas": quotas, "ladder": fleet}


def scenario(name: str, fleet: dict[str, Any], seconds: float, source: str, *, tenant: str | None = None,
             deployment: str | None = None) -> dict[str, Any]:
    """``fleet`` (a parsed-and-valid fleet file's mapping, from ``source``) as scenario ``name`` over ``seconds``;
    ``tenant`` / ``deployment`` choose the flooding tenant / the lost primary."""
    out = copy.deepcopy(fleet)
    if name == "burst":
        start, end = window(seconds)
        for i, w in enumerate(out["workloads"]):
            if "trace" in w:
                raise ConfigError(source, f"workloads[{i}].trace", "a burst scales arrival rates; a replayed trace "
                                  "has none (use a workload with an arrival process)")
            w["arrival"]["bursts"] = [{"at": start, "factor": BURST_FACTOR, "duration": end - start}]
    elif name == "tenant_flood":
        who = flooding_tenant(out, source, tenant)
        for i, w in enumerate(out["workloads"]):
            shares = {str(k): float(v) for k, v in w["tenants"].items()}
            if who not in shares:
                continue
            others = [v for k, v in shares.items() if k != who]
            if not others or "trace" in w:
                raise ConfigError(source, f"workloads[{i}].tenants", f"flooding {who!r} needs other tenants beside it "
                                  "and an arrival process to scale")
            base = sum(others) / len(others)
            scale = (sum(others) + FLOOD_FACTOR * base) / sum(shares.values())  # the others keep their rates
            w["tenants"] = {k: FLOOD_FACTOR * base if str(k) == who else v for k, v in w["tenants"].items()}
            a = w["arrival"]
            a["rate"] = a.get("rate", 0.0) * scale
            a["steps"] = [{**st, "rate": st["rate"] * scale} for st in a.get("steps", [])]
    elif name == "primary_down":
        start, end = window(seconds)
        primary = primary_deployment(out, source, deployment)
        n = next(d for d in out["deployments"] if d["name"] == primary).get("replicas", 1)
        own = [e for e in out.get("events", []) if not (e["kind"] in ("replica_lost", "replica_added")
                                                         and e["deployment"] == primary)]
        out["events"] = [*own,
                         *({"at": start, "kind": "replica_lost", "deployment": primary, "replica": i} for i in range(n)),
                         *({"at": end, "kind": "replica_added", "deployment": primary} for _ in range(n))]
    else:
        raise ConfigError("--scenario", name, f"must be one of {', '.join(OVERLOAD_SCENARIOS)}")
    return out


def flooding_tenant(fleet: dict[str, Any], source: str, tenant: str | None = None) -> str:
    """``tenant`` if a workload has it, else the tenant with the largest share in the first workload."""
    named = {str(k) for w in fleet["workloads"] for k in w["tenants"]}
    if tenant is None:
        shares = fleet["workloads"][0]["tenants"]
        return str(max(shares, key=lambda k: float(shares[k])))
    if tenant not in named:
        raise ConfigError("--tenant", tenant, f"no workload of {source} has this tenant; have {', '.join(sorted(named))}")
    return tenant


def primary_deployment(fleet: dict[str, Any], source: str, deployment: str | None = None) -> str:
    """``deployment`` if the fleet has it, else the first primary of ``gateway.fallbacks``, else the first one."""
    names = [str(d["name"]) for d in fleet["deployments"]]
    if deployment is not None:
        if deployment not in names:
            raise ConfigError("--deployment", deployment, f"not a deployment of {source}; have {', '.join(names)}")
        return deployment
    fallbacks = (fleet.get("gateway") or {}).get("fallbacks")
    if isinstance(fallbacks, dict) and fallbacks:
        return str(next(iter(fallbacks)))
    return names[0]
