"""The built-in simulator as a cluster's metrics source: its snapshot at the simulated time
(:mod:`diagnosis.edge.sim.runtime` keeps the simulator and its clock)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from diagnosis.edge.sim.runtime import catch_up_changes, runtime_for, target_time
from diagnosis.edge.sources import ClusterLike, CollectError


def collect(
    cluster: ClusterLike, *, now: datetime | None = None, previous_as_of: datetime | None = None
) -> dict[str, Any]:
    """The cluster's snapshot document at its current simulated time."""
    runtime = runtime_for(cluster)
    with runtime.lock:
        until = target_time(cluster, runtime, now, previous_as_of)
        try:
            catch_up_changes(cluster, runtime, until)
            return runtime.simulator.snapshot(at=until)
        except (ValueError, KeyError) as exc:
            raise CollectError(f"simulator failed: {exc}") from exc
