"""``goodput deploy kubernetes``: the manifests of a goodput install beside kube-prometheus-stack, written to a
directory that ``kubectl apply -k`` takes (docs/kubernetes.md). The objects are built in goodput/deploy/kubernetes.py;
this module reads the inputs (rule files, alertmanager.yaml, dashboards, targets, policy) and writes YAML."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

from goodput import __version__
from goodput.foundation.args import http_url, output_dir
from goodput.foundation.errors import ConfigError

__all__ = ["register"]

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # RFC 1123 label: a namespace name
# Helm's release names: a DNS-1123 subdomain of at most 53 characters (Helm derives 63-character names from it)
_RELEASE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# the image reference grammar (distribution/reference): [domain[:port]/]path-component(/path-component)*[:tag][@digest]
_HOST_PART = r"(?:[A-Za-z0-9]|[A-Za-z0-9][-A-Za-z0-9]*[A-Za-z0-9])"
_DOMAIN = rf"{_HOST_PART}(?:\.{_HOST_PART})*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = re.compile(rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
                    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")
MAX_LABEL = 63  # Kubernetes' limit on a namespace name
MAX_RELEASE = 53  # Helm's limit on a release name
MAX_IMAGE = 255


def _checked(pattern: re.Pattern, limit: int, what: str):
    """The whole value matches (``fullmatch``: a trailing newline is refused, which ``$`` would let through)."""
    def parse(text: str) -> str:
        if len(text) > limit or not pattern.fullmatch(text):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} (at most {limit} characters)")
        return text
    return parse


namespace = _checked(_DNS_LABEL, MAX_LABEL, "a namespace name (lower-case letters, digits and '-')")
release = _checked(_RELEASE, MAX_RELEASE, "a Helm release name (lower-case letters, digits, '-' and '.')")
image = _checked(_IMAGE, MAX_IMAGE, "a container image reference ([registry[:port]/]name[:tag][@digest])")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("deploy", help="Kubernetes manifests for kube-prometheus-stack",
                       description="Deployment manifests for goodput's rules, dashboards and exporters.")
    dsub = p.add_subparsers(dest="deploy_command", metavar="TARGET")
    dsub.required = True
    k = dsub.add_parser(
        "kubernetes", help="PrometheusRules, PodMonitors, ServiceMonitors, AlertmanagerConfig, dashboards, exporters",
        description="Write the manifests of a goodput install beside kube-prometheus-stack to DIR, with a "
                    "kustomization.yaml: apply them with `kubectl apply -k DIR` (docs/kubernetes.md).")
    k.add_argument("--out", type=output_dir, required=True, metavar="DIR", help="directory to write the manifests to")
    k.add_argument("--namespace", type=namespace, default="goodput",
                   help="namespace of goodput's objects (default goodput)")
    k.add_argument("--serving-namespace", type=namespace, default=None, metavar="NAMESPACE",
                   help="namespace of the engines' Deployments, where KEDA's ScaledObjects go (default: --namespace)")
    k.add_argument("--image", type=image, required=True,
                   help=f"the goodput image the exporters run, in a registry the cluster pulls from (required: no "
                        f"image is published; docs/kubernetes.md builds one, e.g. REGISTRY/goodput:{__version__})")
    k.add_argument("--release", type=release, default="kube-prometheus-stack", metavar="NAME",
                   help="kube-prometheus-stack's Helm release name: the `release` label its selectors match "
                        "(default kube-prometheus-stack)")
    k.add_argument("--rules", type=Path, default=Path("rules"), metavar="DIR",
                   help="directory of rule files: every *.yaml there with rule `groups` becomes a PrometheusRule "
                        "(default rules/: the generated *.rules.yaml; or `goodput rules mixin`'s output)")
    k.add_argument("--alertmanager", type=Path, default=None, metavar="FILE",
                   help="the Alertmanager configuration to convert (default: alertmanager.yaml in --rules)")
    k.add_argument("--dashboards", type=Path, default=Path("dashboards"), metavar="DIR",
                   help="directory of the generated dashboard *.json (default dashboards/)")
    k.add_argument("--targets", type=Path, default=None, metavar="FILE",
                   help="engine exporter targets in Prometheus file_sd format, for its ConfigMap (default: none)")
    k.add_argument("--plan", type=Path, default=None, metavar="plan.yaml",
                   help="the capacity plan (`goodput plan replicas`) as a PrometheusRule recording each deployment's "
                        "per-replica goodput: without it the replicas-short page cannot fire")
    k.add_argument("--allow-loopback-receivers", action="store_true",
                   help="write the AlertmanagerConfig even though its webhook receivers are loopback (which in the "
                        "cluster is the Alertmanager pod itself: no notification leaves it)")
    k.add_argument("--policy", type=Path, default=None, metavar="policy.yaml",
                   help="write KEDA ScaledObjects for this policy (from `goodput plan autoscale`)")
    k.add_argument("--prometheus", type=http_url, default="http://prometheus-operated.monitoring.svc:9090", metavar="URL",
                   help="the Prometheus KEDA queries (default http://prometheus-operated.monitoring.svc:9090)")
    k.add_argument("--format", choices=("table", "json"), default="table",
                   help="table: one line per file written; json: files and object counts")
    k.set_defaults(func=_kubernetes)


def _rule_files(rules: Path) -> dict[str, dict]:
    """Every rule file in the directory (a YAML mapping with ``groups``; the spec and alertmanager.yaml beside
    them have none): a new generator's file, or the mixin's rendering, joins with no change here."""
    from goodput.foundation.yamlfile import load_yaml

    if not rules.is_dir():
        raise ConfigError(str(rules), "", "not a directory of rule files (see --rules)")
    found = {}
    for path in sorted(rules.glob("*.yaml")):
        doc = load_yaml(path)
        if path.name.endswith(".rules.yaml") or (isinstance(doc, dict) and "groups" in doc):
            if not isinstance(doc, dict) or not isinstance(doc.get("groups"), list) or not doc["groups"]:
                raise ConfigError(str(path), "groups", "expected a non-empty list of rule groups")
            found[path.name] = doc
    if not found:
        raise ConfigError(str(rules), "", "no rule files here; run `goodput rules generate` first")
    return found


def _dashboards(directory: Path) -> dict[str, str]:
    from goodput.foundation.jsonfile import load_json
    from goodput.foundation.yamlfile import read_text

    if not directory.is_dir():
        raise ConfigError(str(directory), "", "not a directory of dashboards (see --dashboards)")
    found = {}
    for path in sorted(directory.glob("*.json")):
        load_json(path)  # a broken dashboard is refused here, not by Grafana's sidecar later
        found[path.name] = read_text(path)
    if not found:
        raise ConfigError(str(directory), "", "no dashboard *.json here; run `goodput dashboards generate` first")
    return found


def _targets(path: Path | None) -> list:
    """The file_sd groups for the engine exporter's ConfigMap, checked by the exporter's own reader (what it
    refuses at start is refused here, before anything is written)."""
    from goodput.exporters.config import targets_document, targets_of
    from goodput.foundation.yamlfile import MAX_YAML_BYTES, read_bytes

    if path is None:
        return []
    data = targets_document(read_bytes(path, MAX_YAML_BYTES), str(path))
    if not isinstance(data, list):
        raise ConfigError(str(path), "", "expected a file_sd list: [{targets: [host:port, ...], labels: {...}}]")
    targets_of(data, str(path))
    return data


def _dump(objects: list[dict]) -> str:
    """YAML without anchors and aliases (an object used twice is written twice), as kubectl users read it."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data) -> bool:
            return True

    return yaml.dump_all(objects, Dumper=Dumper, sort_keys=False, width=120)


def _loopback_receivers(am: dict) -> list[str]:
    """Receivers whose webhook points at loopback: in a cluster that is Alertmanager's own pod."""
    out = []
    for r in am.get("receivers") or []:
        for h in r.get("webhook_configs") or []:
            host = urlsplit(str(h.get("url", ""))).hostname or ""
            if host in ("localhost", "::1") or host.startswith("127."):
                out.append(f"{r.get('name')} ({h['url']})")
    return out


def _kubernetes(args: argparse.Namespace) -> int:
    from goodput.deploy.kubernetes import Settings, manifests
    from goodput.foundation.yamlfile import load_mapping

    settings = Settings(namespace=args.namespace, image=args.image, release=args.release,
                        serving_namespace=args.serving_namespace or args.namespace, prometheus=args.prometheus)
    rule_files = _rule_files(args.rules)
    am_path = args.alertmanager or args.rules / "alertmanager.yaml"
    am = load_mapping(am_path, "an Alertmanager configuration")
    policies = []
    if args.policy is not None:
        from goodput.plan.autoscale import DeploymentPolicy
        from goodput.plan.policyfile import load_policy_file
        policies = [DeploymentPolicy(name, p) for name, p in load_policy_file(args.policy).items()]
    loopback = _loopback_receivers(am)
    if loopback and not args.allow_loopback_receivers:
        raise ConfigError(str(am_path), "receivers", f"{', '.join(loopback)} are loopback, which in the cluster is the "
                                                     f"Alertmanager pod itself: point them at your pager in "
                                                     f"rules/slos.yaml and regenerate (or --allow-loopback-receivers)")
    plan = None
    if args.plan is not None:
        from goodput.exporters.config import read_plan
        plan = read_plan(args.plan)
    files = manifests(settings, rule_files, am, str(am_path), _dashboards(args.dashboards),
                      _targets(args.targets), policies, plan)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, objects in files.items():
        (args.out / name).write_text(_dump(objects), encoding="utf-8")
    if plan is None:
        print("goodput: warning: no --plan: nothing in the cluster records llm_capacity_replica_goodput_tokens_per_second"
              ", so deployment:llm_replicas_required:ceil is empty and LLMQueueWaitRisingReplicasShort cannot fire",
              file=sys.stderr)
    kinds = Counter(o["kind"] for objects in files.values() for o in objects)
    if args.format == "json":
        print(json.dumps({"out": str(args.out), "files": list(files), "objects": dict(sorted(kinds.items()))},
                         indent=2))
    else:
        for name, objects in files.items():
            print(f"wrote {args.out / name} ({', '.join(sorted({o['kind'] for o in objects}))})")
    return 0
