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

// a dashboard with _config's tags, its dashboards menu listing those with the first
local tagged(d, tags) = d {
  tags: tags,
  links: [l + (if std.objectHas(l, 'tags') then { tags: tags[0:1] } else {}) for l in d.links],
};

(import 'config.libsonnet') + {
  assert !std.objectHas($._config, 'runbookUrlBase') :
         '_config.runbookUrlBase is gone: set runbookURLPattern, the runbook URL with %s for the alert name '
         + '(runbookUrlBase + "%s.md")',
  // clusterGrouping: the label rules aggregate and join by first, with showMultiCluster
  local params = render.params(knobs, $._config {
    clusterGrouping: if $._config.showMultiCluster then $._config.clusterLabel else '',
  }),

  // every generated rule file, by its name in rules/
  ruleFiles:: render.fill(rules, params),
  prometheusAlerts+:: { groups+: groups(render.fill(rules, params), true) },
  prometheusRules+:: { groups+: groups(render.fill(rules, params), false) },
  // keyed goodput-NAME.json (NAME.json in dashboards/), beside other mixins' dashboards
  grafanaDashboards+::
    local filled = render.fill(dashboards, params);
    { ['goodput-' + name]: tagged(filled[name], $._config.dashboardTags) for name in std.objectFields(filled) },
}
