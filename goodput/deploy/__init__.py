"""``goodput deploy kubernetes``: the stack as Kubernetes objects for kube-prometheus-stack (``kubernetes``: pure
functions from the rules, dashboards and plan to objects; ``cli``: the command)."""

__all__: list[str] = []
