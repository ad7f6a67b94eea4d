// The overrides of example.jsonnet, also usable on their own: goodput rules mixin --config mixin/example.libsonnet
{
  _config+:: {
    engineSelector: 'namespace="llm"',
    requestSelector: 'namespace="llm"',
    preemptionsPerSecond: 0.02,
    runbookURLPattern: 'https://wiki.example.com/runbooks/%s',  // %s: the alert's name
    datasourceUid: 'prometheus',
  },
}
