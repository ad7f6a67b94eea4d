"""The addresses of the generated Grafana dashboards: uids, titles (hence slugs), variables and panel ids.

Alerts link to ``/d/<uid>/<slug>?viewPanel=<id>``, so these never change once published: the rule generator
(the ``dashboard`` annotation) and the dashboard generator both read them from here, and
``tests/monitoring`` checks that every link names a panel that exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ALERT_PANELS", "BOARDS", "CAPACITY", "DEPLOYMENT", "FLEET", "GPUS", "TENANTS", "Board", "alert_link"]


@dataclass(frozen=True)
class Board:
    uid: str
    title: str
    variables: tuple[str, ...]  # template variables besides ``datasource``, in the order Grafana shows them

    @property
    def slug(self) -> str:
        """Grafana's URL slug of the title (lower case, runs of other characters become one ``-``)."""
        return re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-")

    @property
    def file(self) -> str:
        """Its file in dashboards/."""
        return f"{self.uid.removeprefix('goodput-')}.json"


FLEET = Board("goodput-fleet", "LLM fleet", ("model", "deployment", "tier", "route"))
DEPLOYMENT = Board("goodput-deployment", "LLM deployment", ("model", "deployment", "tier"))
TENANTS = Board("goodput-tenants", "LLM tenants and routes", ("model", "deployment", "tier", "tenant", "route"))
GPUS = Board("goodput-gpus", "LLM GPUs", ("model", "deployment"))
CAPACITY = Board("goodput-capacity", "LLM capacity", ("model", "deployment"))
BOARDS = (FLEET, DEPLOYMENT, TENANTS, GPUS, CAPACITY)

# panel ids alerts link to (the generator gives every other panel its own fixed id too)
FLEET_FIRING_ALERTS = 6
FLEET_EXPORTERS_UP = 7
FLEET_BURN_RATE = 3
DEPLOYMENT_QUEUE_WAIT = 1
DEPLOYMENT_TTFT = 2
DEPLOYMENT_KV_FAILURES = 7
DEPLOYMENT_ENGINES_UP = 11
TENANTS_QUOTA_REJECTIONS = 9
TENANTS_OVERLOAD_ACTIONS = 10
TENANTS_FALLBACK_PATHS = 11
GPUS_LOST = 1
GPUS_XID = 6
CAPACITY_COLD_START = 20  # apart from the capacity board's other panels, which may grow
CAPACITY_COLD_START_PHASES = 21

# alert -> (dashboard, panel, the alert labels passed on as template variables when the alert has them)
ALERT_PANELS: dict[str, tuple[Board, int, tuple[str, ...]]] = {
    "LLMQueueWaitRisingReplicasShort": (DEPLOYMENT, DEPLOYMENT_QUEUE_WAIT, ("deployment", "tier")),
    "LLMKVCacheAllocationFailures": (DEPLOYMENT, DEPLOYMENT_KV_FAILURES, ("deployment",)),
    "LLMTTFTSLOBreachWithRejects": (DEPLOYMENT, DEPLOYMENT_TTFT, ("deployment", "tier")),
    "LLMSLOBurnRateFast": (FLEET, FLEET_BURN_RATE, ("deployment", "tier", "route")),
    "LLMSLOBurnRateSlow": (FLEET, FLEET_BURN_RATE, ("deployment", "tier", "route")),
    "LLMEngineDown": (DEPLOYMENT, DEPLOYMENT_ENGINES_UP, ("deployment",)),
    "LLMExporterDown": (FLEET, FLEET_EXPORTERS_UP, ()),
    "LLMGPULost": (GPUS, GPUS_LOST, ("deployment",)),
    "LLMGPUXidErrors": (GPUS, GPUS_XID, ("deployment",)),
    "LLMTenantAtQuota": (TENANTS, TENANTS_QUOTA_REJECTIONS, ("deployment", "tenant")),
    "LLMOverloadProtectionNotHoldingP0": (TENANTS, TENANTS_OVERLOAD_ACTIONS, ("deployment",)),
    "LLMOverloadProtectionEngaged": (TENANTS, TENANTS_OVERLOAD_ACTIONS, ("deployment",)),
    "LLMCircuitOpen": (TENANTS, TENANTS_FALLBACK_PATHS, ()),
    "LLMColdStartAbovePlan": (CAPACITY, CAPACITY_COLD_START, ("deployment",)),
    "GoodputWatchdog": (FLEET, FLEET_FIRING_ALERTS, ()),
}


def alert_link(base: str, alert: str) -> str:
    """The ``dashboard`` annotation of ``alert``: its panel, with a ``var-X`` for each label the firing alert has
    (an alert without the label, e.g. a GPU no deployment owns, links without it rather than to an empty value)."""
    board, panel, labels = ALERT_PANELS[alert]
    vars_ = "".join(f"{{{{ with $labels.{x} }}}}&var-{x}={{{{ . }}}}{{{{ end }}}}" for x in labels)
    return f"{base.rstrip('/')}/d/{board.uid}/{board.slug}?viewPanel={panel}{vars_}"
