"""The built-in simulator as a cluster's metrics source: the GPU statistics the simulator
measured for the state its scheduler adapter just read (:class:`SimScheduler`'s
``SchedulerState.measured``; :mod:`diagnosis.edge.sim.runtime` keeps the simulator and its
clock). It takes no settings of its own, and its snapshots have no ``collection`` section."""

from __future__ import annotations

from diagnosis.edge.config import ConfigSpec
from diagnosis.edge.errors import CollectError
from diagnosis.edge.sources import Measurement, MetricsRequest

CONFIG = ConfigSpec((), what="metrics_config")


def measure(request: MetricsRequest) -> Measurement:
    """The simulator's GPUs with their statistics over its window."""
    if "gpus" not in request.measured:
        raise CollectError("metrics source sim needs the sim scheduler's state", permanent=True)
    return Measurement(
        gpus=list(request.measured["gpus"]),
        window_s=request.measured.get("window_s"),
    )
