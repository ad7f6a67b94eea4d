"""What Prometheus, Alertmanager and Grafana load, generated: the rule files and routes of ``rules/``
(``rulegen``, ``dcgmrules``, ``normrules``; ``rules_cli``), the dashboards of ``dashboards/`` (``dashgen``;
``dashboards_cli``) and the monitoring mixin of ``mixin/`` (``mixingen``), with the configurable values of all of
them in one place (``placeholders``). The generated files are data, committed, each folder with a README naming
its generator."""

__all__: list[str] = []
