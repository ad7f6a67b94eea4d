"""``goodput demo``: the whole stack on the simulated fleet (``cli``), the child servers it starts (``stack``), its
scripted incident (``incident``), the timeline it narrates (``timeline``), the headless run that checks the story
(``headless``), the webhook that receives Alertmanager's notifications (``webhook``), the analyzer database kept
current (``ingest_loop``) and the fake GPUs that follow the fleet's load (``fleet_gpus``)."""

__all__: list[str] = []
