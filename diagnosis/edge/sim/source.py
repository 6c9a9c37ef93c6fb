"""The built-in simulator as a cluster's metrics source: its snapshot at the simulated time
(:mod:`diagnosis.edge.sim.runtime` keeps the simulator and its clock). It reads the cluster's
``scheduler_config`` (the simulator's settings) and takes no settings of its own."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from diagnosis.edge.config import ConfigSpec
from diagnosis.edge.sim.runtime import SimClusterLike, snapshot_document

CONFIG = ConfigSpec((), what="metrics_config")


def collect(
    cluster: SimClusterLike,
    *,
    now: datetime | None = None,
    previous_as_of: datetime | None = None,
) -> dict[str, Any]:
    """The cluster's snapshot document at its current simulated time."""
    return snapshot_document(cluster, now=now, previous_as_of=previous_as_of)
