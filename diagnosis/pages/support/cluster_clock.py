"""One clock per cluster page (docs/ui.md "Clocks and time zones"): the **cluster's**.

What a cycle records is on the cluster's clock: snapshot times, findings, Xids, scheduler
events. What people do (acknowledge, approve, note) and what the server does for them (an
apply, an audit row) is on the wall clock. For a real cluster the two are one clock (a snapshot
is taken now); a simulated cluster runs its own: 60 times the wall clock in the demo, a fixed
step per cycle in tests and scripts. There a wall-clock moment is shown at the cluster time
of the latest cycle before it plus the wall time since that cycle (never at or past the next
cycle's snapshot), so a timeline reads in the order things happened, and the page says which
clock it shows; the wall time stays in each time's tooltip.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import DateTimeField, Subquery, Value
from django.db.models.functions import Coalesce

from diagnosis.choices import SchedulerKind
from diagnosis.models import Cluster, ClusterCycle

DEFAULT_SPEED = 60.0  # the sim adapter's own default (diagnosis/edge/sim/runtime.py)
ONE_MICROSECOND = timedelta(microseconds=1)


def simulated_clock(cluster: Cluster) -> Mapping[str, Any] | None:
    """How a simulated cluster's clock runs, None when it is the wall clock: ``{"speed": 60}``
    (simulated seconds per wall second) or ``{"step_s": 600}`` (per cycle)."""
    if cluster.scheduler_kind != SchedulerKind.SIM:
        return None
    config = cluster.scheduler_config or {}
    if config.get("clock", "wall") == "step":
        return {"step_s": config.get("step_s", 60)}
    try:
        speed = float(config.get("speed", DEFAULT_SPEED))
    except (TypeError, ValueError):
        return None  # a setting the cycle refuses: no clock of its own was ever run
    return None if speed == 1.0 else {"speed": speed}


@dataclass(frozen=True)
class ClusterClock:
    """A page's clock: the cluster's. ``cycles`` are ``(ran_at, as_of)`` of the good cycles
    around the wall times the page shows, by ``ran_at``; empty for a cluster on the wall
    clock."""

    simulated: Mapping[str, Any] | None = None
    cycles: tuple[tuple[datetime, datetime], ...] = ()

    @classmethod
    def around(cls, cluster: Cluster, walls: Iterable[datetime | None]) -> ClusterClock:
        """The clock of ``cluster`` for the wall-clock moments ``walls`` a page shows: no query
        for a cluster on the wall clock, one for a simulated one (the cycles from the last
        before the first moment to the first after the last)."""
        simulated = simulated_clock(cluster)
        moments = [w for w in walls if w is not None]
        if simulated is None or not moments:
            return cls(simulated)
        good = ClusterCycle.objects.filter(cluster=cluster, ok=True, as_of__isnull=False)
        low, high = min(moments), max(moments)
        before = good.filter(ran_at__lte=low).order_by("-ran_at").values("ran_at")[:1]
        after = good.filter(ran_at__gt=high).order_by("ran_at").values("ran_at")[:1]
        rows = (
            good.filter(
                ran_at__gte=Coalesce(Subquery(before), Value(low, output_field=DateTimeField())),
                ran_at__lte=Coalesce(Subquery(after), Value(high, output_field=DateTimeField())),
            )
            .order_by("ran_at")
            .values_list("ran_at", "as_of")
        )
        return cls(simulated, tuple(rows))

    def at(self, wall: datetime) -> datetime:
        """``wall`` on the cluster's clock."""
        if self.simulated is None or not self.cycles:
            return wall
        index = bisect_right([ran for ran, _ in self.cycles], wall)
        if index == 0:  # before the first cycle we know of: as far before its snapshot
            ran, as_of = self.cycles[0]
            return as_of - (ran - wall)
        ran, as_of = self.cycles[index - 1]
        moment = as_of + (wall - ran)
        if index < len(self.cycles):  # never at or past the next cycle's snapshot
            moment = min(moment, self.cycles[index][1] - ONE_MICROSECOND)
        return moment
