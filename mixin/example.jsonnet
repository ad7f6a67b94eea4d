// Overriding the mixin's _config: a Prometheus that scrapes the engines and request exporters in namespace "llm",
// a stricter KV preemption alert, runbooks on an internal wiki, and one fixed Grafana data source.
//   jsonnet -J mixin -m out/ mixin/example.jsonnet    (or: goodput rules mixin --out out/ --config mixin/example.libsonnet)
// Each file is JSON, which Prometheus reads as YAML and Grafana as a dashboard.
local mixin = (import 'mixin.libsonnet') + (import 'example.libsonnet');

{
  'prometheus_alerts.yaml': mixin.prometheusAlerts,
  'prometheus_rules.yaml': mixin.prometheusRules,
} + {
  ['dashboards/' + name]: mixin.grafanaDashboards[name]
  for name in std.objectFields(mixin.grafanaDashboards)
}
