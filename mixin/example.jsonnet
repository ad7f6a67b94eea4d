// Overriding the mixin's _config: a Prometheus that scrapes the engines in namespace "llm", a stricter KV
// preemption alert, runbooks on an internal wiki, and one fixed Grafana data source.
//   jsonnet -J mixin mixin/example.jsonnet        or   goodput rules mixin --out out/ --config mixin/example.libsonnet
local mixin = (import 'mixin.libsonnet') + (import 'example.libsonnet');

{
  'prometheus_alerts.yaml': std.manifestYamlDoc(mixin.prometheusAlerts),
  'prometheus_rules.yaml': std.manifestYamlDoc(mixin.prometheusRules),
} + {
  ['dashboards/' + name]: std.manifestJsonEx(mixin.grafanaDashboards[name], '  ')
  for name in std.objectFields(mixin.grafanaDashboards)
}
