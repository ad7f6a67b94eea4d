"""``goodput plan``: capacity plans from measured SLO goodput, autoscaling policies, and their proof in the simulator."""

__all__: list[str] = []
