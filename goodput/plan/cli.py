"""``goodput plan``: ``replicas`` (a capacity plan), ``autoscale`` (a policy and its KEDA / HPA manifests) and
``evaluate`` (the policy replayed in the simulator against static and utilisation policies), ``overload`` (a scenario
without protection, with quotas, with the ladder), ``disagg`` (prefill/decode disaggregation against an aggregated
pool); ``memory`` (the memory budget) adds its own parser from
``goodput.plan.memory_cli``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from goodput.foundation import promendpoint
from goodput.foundation.args import (
    duration,
    int_in,
    non_negative_int,
    output_dir,
    output_file,
    positive_int,
    positive_number_at_most,
    seed,
)
from goodput.plan import memory_cli
from goodput.plan.demand import MAX_GROWTH
from goodput.plan.overload_scenarios import OVERLOAD_SCENARIOS
from goodput.plan.prices import ON_DEMAND, PRICINGS
from goodput.plan.scenarios import SCENARIOS

__all__ = ["register"]

MAX_JOBS = 256
MAX_SIM_DURATION_S = 3600.0  # per knee probe: each probe simulates this long at one rate
MAX_EVALUATE_S = 172800.0  # per policy of `plan evaluate`: two days, the diurnal scenario twice over
MAX_OVERLOAD_S = 7200.0  # per variant of `plan overload`: three replays of up to two hours (900 s take ~4 s)


def register(sub: argparse._SubParsersAction) -> None:
    plan = sub.add_parser("plan", help="capacity plans: memory budget, replicas and autoscaling policies",
                          description="Capacity plans: the memory budget, replicas from measured SLO goodput, an "
                                      "autoscaling policy, and that policy replayed in the simulator.")
    psub = plan.add_subparsers(dest="plan_command", metavar="COMMAND")
    psub.required = True
    memory_cli.add_parser(psub)

    r = psub.add_parser(
        "replicas", help="replicas per deployment from demand and per-replica SLO goodput; writes plan.yaml",
        description="Size every candidate configuration of every deployment in DEMAND.yaml: replicas = ceil(peak "
                    "tokens/s / per-replica SLO goodput), prefill and decode checked apart, then each headroom term "
                    "(growth, N+k, release surge, cold-start buffer); cost from GPU prices. The cheapest candidate "
                    "goes into plan.yaml, which the engine exporter reads with --plan.")
    r.add_argument("--demand", type=Path, required=True, metavar="DEMAND.yaml",
                   help="demand file (docs/capacity.md); with --demand-from, the template of SLOs, headroom and "
                        "candidates whose stream figures the measurement replaces")
    r.add_argument("--demand-from", default=None, metavar="prometheus:URL|duckdb:TRACES.duckdb",
                   help="measure each stream's peak hourly req/s and token mix from Prometheus or the trace store")
    r.add_argument("--weeks", type=positive_int, default=4, help="--demand-from: weeks measured (default 4)")
    r.add_argument("--until", default=None, metavar="ISO_TIME",
                   help="--demand-from: end of the window, e.g. 2026-11-30T00:00:00Z (default: now, to the hour)")
    promendpoint.add_arguments(r, "--demand-from prometheus:URL")
    _cold_start_from(r, "the demand file's headroom cold_start_s of each deployment measured")
    r.add_argument("--growth", type=positive_number_at_most(MAX_GROWTH), default=None, metavar="G",
                   help="growth multiplier applied to the peaks (default: the demand file's growth)")
    src = r.add_mutually_exclusive_group(required=True)
    src.add_argument("--runs", nargs="+", metavar="CANDIDATE=RUN_DIR",
                     help="load-test run directories, each of one replica of the named candidate")
    src.add_argument("--simulate", action="store_true", help="measure each candidate with a simulator knee search")
    r.add_argument("--out", type=output_file, required=True, metavar="plan.yaml", help="the plan to write")
    r.add_argument("--format", choices=("table", "json"), default="table", help="what to print (default table)")
    r.add_argument("--prices", type=Path, default=None, metavar="FILE", help="GPU prices overriding the defaults")
    r.add_argument("--pricing", choices=PRICINGS, default=ON_DEMAND,
                   help="the pricing the dollars are at (default on_demand; docs/cost.md)")
    r.add_argument("--allow-mixed", action="store_true", help="plan with runs whose workloads differ")
    r.add_argument("--jobs", type=int_in(0, MAX_JOBS), default=0,
                   help="--simulate: processes (default: all cores; at most 256)")
    r.add_argument("--sim-duration", type=positive_number_at_most(MAX_SIM_DURATION_S), default=120.0, metavar="SECONDS",
                   help="--simulate: virtual seconds per knee probe (default 120, at most 3600)")
    r.add_argument("--seed", type=seed, default=0, help="--simulate: random seed (default 0)")
    r.add_argument("--report", type=Path, default=None, metavar="FILE.html", help="also write an HTML report")
    r.set_defaults(func=_replicas)

    a = psub.add_parser(
        "autoscale", help="an autoscaling policy from a plan: policy.yaml, KEDA ScaledObject, HPA v2",
        description="From plan.yaml and the cold-start time: min/max replicas, the scale-up signal (the recorded "
                    "rules' desired-replica series), thresholds, stabilisation windows, scale-down cooldown and "
                    "drain, warm-pool size; written as policy.yaml, a KEDA ScaledObject and an HPA v2 manifest.")
    a.add_argument("--plan", type=Path, required=True, metavar="plan.yaml")
    a.add_argument("--cold-start", type=duration, default=None, metavar="DURATION",
                   help="time from scale-up to a serving replica, e.g. 180s (default: the one the plan was sized on)")
    _cold_start_from(a, "--cold-start for each deployment measured")
    a.add_argument("--until", default=None, metavar="ISO_TIME",
                   help="--cold-start-from: end of the window (default: now, to the hour)")
    promendpoint.add_arguments(a, "--cold-start-from prometheus:URL")
    a.add_argument("--out", type=output_dir, default=Path("autoscale"), metavar="DIR",
                   help="output directory (default autoscale/)")
    a.add_argument("--namespace", default="llm-serving", help="Kubernetes namespace of the manifests")
    a.add_argument("--prometheus", default="http://prometheus.monitoring.svc:9090", metavar="URL",
                   help="the Prometheus KEDA queries")
    a.add_argument("--format", choices=("table", "json"), default="table")
    a.set_defaults(func=_autoscale)

    e = psub.add_parser(
        "evaluate", help="replay a scenario: static peak vs the policy vs GPU_UTIL and SM_ACTIVE policies",
        description="Replay a scenario in the simulator with the autoscaler in the loop and report, per policy, "
                    "SLO attainment per tier, time to recover, GPU-hours, rejected requests, its Pareto position "
                    "(attainment per tier against GPU-hours) and the minutes whose attainment fell below the "
                    "objective.")
    e.add_argument("--plan", type=Path, required=True, metavar="plan.yaml")
    e.add_argument("--policy", type=Path, required=True, metavar="policy.yaml", help="from `goodput plan autoscale`")
    e.add_argument("--scenario", required=True, choices=SCENARIOS,
                   help="burst, diurnal (24 h), diurnal_peak (the 2 h ramp), release, replica_loss, prefill_surge "
                        "(long prompts), cold_start_10m (the burst with 10-minute cold starts)")
    e.add_argument("--deployment", default=None, help="which deployment of the plan (default: the first)")
    e.add_argument("--duration", type=positive_number_at_most(MAX_EVALUATE_S), default=None, metavar="SECONDS",
                   help=f"scenario length (default: 2 h; diurnal 24 h; at most {MAX_EVALUATE_S:g})")
    e.add_argument("--seed", type=seed, default=0)
    e.add_argument("--format", choices=("table", "json"), default="table")
    e.add_argument("--report", type=Path, default=None, metavar="FILE.html", help="write the HTML report")
    e.add_argument("--max-replicas", type=positive_int, default=None, help="override the policy's maximum")
    e.add_argument("--jobs", type=non_negative_int, default=0,
                   help="processes: the four policies replay in parallel (default 0: up to the cores; 1: in turn)")
    e.add_argument("--prices", type=Path, default=None, metavar="FILE", help="GPU prices overriding the defaults")
    e.add_argument("--pricing", choices=PRICINGS, default=ON_DEMAND,
                   help="the pricing the dollars are at (default on_demand; docs/cost.md)")
    e.set_defaults(func=_evaluate)

    o = psub.add_parser(
        "overload", help="replay burst, tenant_flood or primary_down without protection, with quotas, with the ladder",
        description="Replay a scenario in virtual time, on the same arrivals, under no protection (the fleet file's "
                    "gateway section removed), quotas only (the gateway without its overload ladder) and the fleet "
                    "file as written, and report per tier and tenant: SLO and TTFT attainment, goodput, rejects by "
                    "reason, degraded and fallback shares, and cost. The disturbance fills the run's middle third "
                    "(tenant_flood: the whole run).")
    o.add_argument("--fleet", type=Path, required=True, metavar="FLEET.yaml", help="fleet file (docs/simulator.md)")
    o.add_argument("--scenario", required=True, choices=OVERLOAD_SCENARIOS,
                   help="burst (3x arrivals), tenant_flood (one tenant at 5x its share), primary_down (the primary "
                        "deployment's replicas lost, then back)")
    o.add_argument("--seconds", type=positive_number_at_most(MAX_OVERLOAD_S), default=900.0, metavar="N",
                   help=f"virtual seconds replayed per variant (default 900, at most {MAX_OVERLOAD_S:g})")
    o.add_argument("--slos", type=Path, default=None, metavar="DEMAND.yaml",
                   help="the SLOs per tier from this file's slos: section (a demand file's; default: the plan's, "
                        "rules/slos.yaml's chat objectives)")
    o.add_argument("--prices", type=Path, default=None, metavar="FILE", help="GPU prices overriding the defaults")
    o.add_argument("--pricing", choices=PRICINGS, default=ON_DEMAND,
                   help="the pricing the dollars are at (default on_demand; docs/cost.md)")
    o.add_argument("--tenant", default=None, help="tenant_flood: the tenant that floods (default: the largest share "
                                                  "of the first workload)")
    o.add_argument("--deployment", default=None, help="primary_down: the deployment lost (default: the first "
                                                      "gateway.fallbacks primary, else the first deployment)")
    o.add_argument("--seed", type=seed, default=None, help="random seed (default: the fleet file's)")
    o.add_argument("--format", choices=("text", "json"), default="text", help="what to print (default text)")
    o.add_argument("--html", type=output_file, default=None, metavar="FILE.html", help="also write the HTML report")
    o.set_defaults(func=_overload)

    g = psub.add_parser(
        "disagg", help="prefill/decode disaggregation against one aggregated pool: P:D replicas, GPUs, $ and why",
        description="For each candidate of each deployment in DISAGG.yaml (a demand file whose deployments add "
                    "`disaggregation`: the prefill and decode pools and the KV link), the fewest aggregated replicas "
                    "and the fewest prefill and decode replicas that meet the strictest tier's TTFT and TPOT at the "
                    "objective's quantile, from the roofline, the KV cache and the queueing of prompts in prefill; "
                    "GPUs, $/hour and $/M tokens side by side, and a verdict naming what binds.")
    g.add_argument("--demand", type=Path, required=True, metavar="DISAGG.yaml",
                   help="demand file with a `disaggregation` block per deployment (docs/capacity.md, "
                        "examples/disagg_long.yaml)")
    g.add_argument("--deployment", default=None, help="plan only this deployment (default: every one)")
    g.add_argument("--prices", type=Path, default=None, metavar="FILE", help="GPU prices overriding the defaults")
    g.add_argument("--pricing", choices=PRICINGS, default=ON_DEMAND,
                   help="the pricing the dollars are at (default on_demand; docs/cost.md)")
    g.add_argument("--transfer-in", choices=("tpot", "ttft"), default="tpot",
                   help="where the KV transfer's time counts: tpot (default; vLLM's P/D connectors send the first "
                        "token from the prefill replica and move the KV before the second) or ttft")
    g.add_argument("--format", choices=("table", "json"), default="table", help="what to print (default table)")
    g.add_argument("--fleet-out", type=output_file, default=None, metavar="FLEET.yaml",
                   help="also write both planned layouts as one fleet file, each sent the demand at peak x growth, "
                        "to replay with `goodput simulate FLEET.yaml`")
    g.set_defaults(func=_disagg)


def _cold_start_from(p: argparse.ArgumentParser, replaces: str) -> None:
    p.add_argument("--cold-start-from", default=None, metavar="prometheus:URL",
                   help=f"the p90 measured cold start per deployment (llm_replica_pod_cold_start_seconds where "
                        f"kube-state-metrics gives it, else llm_replica_cold_start_seconds) replaces {replaces}")
    p.add_argument("--cold-start-window", type=duration, default="7d", metavar="DURATION",
                   help="--cold-start-from: the window measured (default 7d)")


def _measured_cold_starts(args: argparse.Namespace) -> dict:
    """The measured cold starts ``--cold-start-from`` names (empty without it), printed to stderr as they replace."""
    if args.cold_start_from is None:
        return {}
    from goodput.foundation.errors import ConfigError
    from goodput.plan.cold_start import measure_cold_starts
    from goodput.plan.measured import parse_until

    if args.cold_start_window < 1:
        raise ConfigError("--cold-start-window", f"{args.cold_start_window:g} s", "must be at least 1 s")
    got = measure_cold_starts(args.cold_start_from, f"{int(args.cold_start_window)}s", parse_until(args.until),
                              lambda url: promendpoint.from_args(url, args))
    for m in got.values():
        print(f"{m.deployment}: cold start p90 {m.p90_s:.0f} s measured over {m.replicas} replica starts in the "
              f"{args.cold_start_window:g} s before the window's end ({m.measured.replace('_', ' ')})",
              file=sys.stderr)
    return got


def _replicas(args: argparse.Namespace) -> int:
    import yaml

    from goodput.foundation.progress import progress_bar
    from goodput.plan.demand import load_demand
    from goodput.plan.planner import build_plan, plan_dict
    from goodput.plan.prices import load_prices
    from goodput.plan.runs import load_runs, parse_run_args
    from goodput.plan.tables import render_plan

    demand = load_demand(args.demand)
    measured = None
    if args.demand_from is not None:
        from goodput.plan.measured import apply_measurement, measure
        demand, measured = apply_measurement(
            demand, measure(args.demand_from, args.weeks, args.until, lambda url: promendpoint.from_args(url, args)),
            args.growth)
    elif args.growth is not None:
        demand = dataclasses.replace(demand, growth=args.growth)
    cold = _measured_cold_starts(args)
    if cold:
        from goodput.plan.cold_start import apply_cold_starts
        demand = apply_cold_starts(demand, cold)
    prices = load_prices(args.prices, args.pricing)
    runs = load_runs(parse_run_args(args.runs), args.allow_mixed) if args.runs else None
    n = sum(len(d.candidates) for d in demand.deployments)
    with progress_bar("knee search", n, unit="candidates", enabled=None if args.simulate else False) as update:
        plans = build_plan(demand, prices, runs=runs, jobs=args.jobs, sim_duration_s=args.sim_duration,
                           progress=update, seed=args.seed)
    plan = plan_dict(demand, plans, prices.pricing)
    if measured is not None:
        plan["measured_demand"] = measured
    if cold:
        plan["measured_cold_start"] = {"source": args.cold_start_from, "window_s": args.cold_start_window,
                                       "deployments": {d: m.as_dict() for d, m in cold.items()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("# written by `goodput plan replicas`; the engine exporter reads it with --plan\n"
                        + yaml.safe_dump(plan, sort_keys=False), encoding="utf-8")
    if args.report:
        from goodput.plan.report import write_plan_report
        write_plan_report(args.report, plan)
    if args.format == "json":
        print(json.dumps(plan, indent=2))
    else:
        if measured is not None:
            from goodput.plan.measured import render_measurement
            print(render_measurement(measured) + "\n")
        print(render_plan(plan))
    return 0


def _autoscale(args: argparse.Namespace) -> int:
    from goodput.plan.autoscale import derive_policies, write_outputs
    from goodput.plan.planfile import load_plan_file

    planned = load_plan_file(args.plan)
    cold = _measured_cold_starts(args)
    policies = derive_policies(planned, args.cold_start, {d: m.p90_s for d, m in cold.items()})
    paths = write_outputs(policies, args.out, namespace=args.namespace, prometheus=args.prometheus)
    if args.format == "json":
        print(json.dumps({"policies": [p.as_dict() for p in policies], "files": [str(p) for p in paths]}, indent=2))
    else:
        from goodput.plan.tables import table
        rows = [p.summary_row() for p in policies]
        print(table(rows, list(rows[0])))
        for p in paths:
            print(f"wrote {p}")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from goodput.foundation.progress import progress_bar
    from goodput.plan.evaluate import evaluate
    from goodput.plan.planfile import load_plan_file
    from goodput.plan.policyfile import load_policy_file
    from goodput.plan.prices import load_prices
    from goodput.plan.tables import render_evaluation

    planned = load_plan_file(args.plan)
    policies = load_policy_file(args.policy)
    with progress_bar(f"evaluate {args.scenario}", 4, unit="policies") as update:
        result = evaluate(planned, policies, args.scenario, deployment=args.deployment, duration_s=args.duration,
                          seed=args.seed, max_replicas=args.max_replicas, progress=update, jobs=args.jobs,
                          prices=load_prices(args.prices, args.pricing))
    if args.report:
        from goodput.plan.report import write_evaluation_report
        write_evaluation_report(args.report, result)
    out = dict(result)
    out.pop("timelines", None)
    print(json.dumps(out, indent=2) if args.format == "json" else render_evaluation(result), file=sys.stdout)
    return 0


def _overload(args: argparse.Namespace) -> int:
    from goodput.foundation.progress import progress_bar
    from goodput.foundation.yamlfile import load_mapping
    from goodput.plan.demand import parse_slos
    from goodput.plan.overload import plan_overload
    from goodput.plan.prices import load_prices
    from goodput.plan.tables import render_overload

    fleet = load_mapping(args.fleet, "a mapping with deployments and workloads")
    slos = parse_slos(load_mapping(args.slos, "a mapping with slos").get("slos") if args.slos else None,
                      str(args.slos or ""))
    prices = load_prices(args.prices, args.pricing)
    with progress_bar(f"overload {args.scenario}", 3 * args.seconds, unit="virtual s") as update:
        result = plan_overload(fleet, str(args.fleet), args.scenario, args.seconds, slos, prices, seed=args.seed,
                               tenant=args.tenant, deployment=args.deployment, progress=update)
    if args.html:
        from goodput.plan.report import write_overload_report
        write_overload_report(args.html, result)
    print(json.dumps(result, indent=2) if args.format == "json" else render_overload(result))
    return 0
def _disagg(args: argparse.Namespace) -> int:
    from goodput.foundation.errors import ConfigError
    from goodput.plan.disagg import compare
    from goodput.plan.disaggfile import load_disagg, planned_fleet
    from goodput.plan.prices import load_prices
    from goodput.plan.tables import render_disagg

    plans, planned = [], []
    for case in load_disagg(args.demand, load_prices(args.prices, args.pricing), args.deployment):
        result = compare(case.load, case.aggregated, case.prefill, case.decode, case.link, args.transfer_in)
        if isinstance(result, str):
            raise ConfigError(str(args.demand), f"deployments.{case.deployment}",
                              f"candidate {case.candidate}: {result}")
        plans.append({"deployment": case.deployment, "candidate": case.candidate, "model": case.model,
                      **result.as_dict()})
        planned.append((case, result))
    if args.fleet_out:
        import yaml

        args.fleet_out.write_text(f"# written by `goodput plan disagg --demand {args.demand}`; replay: goodput simulate "
                                  f"{args.fleet_out} --duration 900 --out DIR\n"
                                  + yaml.safe_dump(planned_fleet(planned), sort_keys=False), encoding="utf-8")
    doc = {"generated_by": "goodput plan disagg", "demand": str(args.demand), "pricing": args.pricing, "plans": plans}
    print(json.dumps(doc, indent=2) if args.format == "json" else render_disagg(doc))
    return 0
