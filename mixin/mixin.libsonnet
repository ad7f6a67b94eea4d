// goodput's monitoring mixin: the alerts, recording rules and Grafana dashboards of an LLM inference fleet.
// Import it, override _config (config.libsonnet lists every field) and render prometheusAlerts, prometheusRules and
// grafanaDashboards; docs/mixin.md. The data in generated/ comes from rules/slos.yaml and the metric catalog
// (`goodput rules mixin-data`); with the default _config the output equals rules/*.rules.yaml and dashboards/*.json.
local render = import 'lib/render.libsonnet';
local rules = importstr 'generated/rules.json';
local dashboards = importstr 'generated/dashboards.json';
local knobs = import 'generated/knobs.json';

// the groups of every rule file, in file-name order: those with alerts, or those without
local groups(files, alerts) = [
  g
  for name in std.objectFields(files)
  for g in files[name].groups
  if (std.length([r for r in g.rules if std.objectHas(r, 'alert')]) > 0) == alerts
];

(import 'config.libsonnet') + {
  local params = render.params(knobs, $._config),

  // every generated rule file, by its name in rules/
  ruleFiles:: render.fill(rules, params),
  prometheusAlerts+:: { groups+: groups(render.fill(rules, params), true) },
  prometheusRules+:: { groups+: groups(render.fill(rules, params), false) },
  grafanaDashboards+:: render.fill(dashboards, params),
}
