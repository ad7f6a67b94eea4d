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

// with showMultiCluster, a dashboard's cluster variable, after its data source
local clustered(d, c) = if !c.showMultiCluster then d else d {
  templating+: {
    list: [super.list[0], {
      type: 'query',
      name: 'cluster',
      label: c.clusterLabel,
      datasource: { type: 'prometheus', uid: c.datasourceUid },
      query: { query: 'label_values(up{%s}, %s)' % [c.exporterSelector, c.clusterLabel], refId: 'var-cluster' },
      refresh: 2,
      sort: 1,
      multi: false,
      includeAll: false,
    }] + super.list[1:],
  },
};

(import 'config.libsonnet') + {
  assert !std.objectHas($._config, 'runbookUrlBase') :
         '_config.runbookUrlBase is gone: set runbookURLPattern, the runbook URL with %s for the alert name '
         + '(runbookUrlBase + "%s.md")',
  local c = $._config,
  // clusterGrouping: the label rules aggregate and join by first, with showMultiCluster
  local params = render.params(knobs, c {
    clusterGrouping: if c.showMultiCluster then c.clusterLabel else '',
    clusterMatcher: '',
  }),
  // the dashboards': with showMultiCluster, every series selects the cluster variable's cluster
  local matcher = if c.showMultiCluster then c.clusterLabel + '="$cluster"' else '',
  local dashParams = render.params(knobs, c {
    clusterGrouping: '',
    clusterMatcher: matcher,
  } + {
    [k.path[0]]: std.join(',', [v for v in [c[k.path[0]], matcher] if v != ''])
    for k in knobs
    if k.kind == 'selector' && k.param != 'clusterMatcher'
  }),

  // every generated rule file, by its name in rules/
  ruleFiles:: render.fill(rules, params),
  prometheusAlerts+:: { groups+: groups(render.fill(rules, params), true) },
  prometheusRules+:: { groups+: groups(render.fill(rules, params), false) },
  // keyed goodput-NAME.json (NAME.json in dashboards/), beside other mixins' dashboards
  grafanaDashboards+::
    local filled = render.fill(dashboards, dashParams);
    { ['goodput-' + name]: clustered(tagged(filled[name], c.dashboardTags), c) for name in std.objectFields(filled) },
}
