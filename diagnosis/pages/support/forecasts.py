"""Start-time forecasts as the job, queue and tenant pages show them (docs/forecasts.md): each
page adds one context entry and includes one template (``includes/forecast_*.html``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import F

from diagnosis.access import User, forecasts_for_user
from diagnosis.forecast_text import forecast_view
from diagnosis.models import Cluster, Job, Tenant

FORECASTS_SHOWN = 50


def job_forecast(user: User, cluster: Cluster, job: Job) -> dict[str, Any] | None:
    """The forecast of one pending job, None when it has none (not pending, not yet forecast)."""
    row = forecasts_for_user(user, cluster).filter(job=job).first()
    return None if row is None else forecast_view(user, row, cluster.name)


def forecast_table(
    user: User,
    cluster: Cluster,
    *,
    queues: Iterable[str] | None = None,
    tenant: Tenant | None = None,
) -> dict[str, Any]:
    """The forecasts of a queue's (and its children's) or a tenant's pending jobs, soonest
    first (unknown starts last), at most :data:`FORECASTS_SHOWN`, and how many there are."""
    rows = forecasts_for_user(user, cluster)
    if queues is not None:
        rows = rows.filter(job__queue__name__in=list(queues))
    if tenant is not None:
        rows = rows.filter(job__tenant=tenant)
    rows = rows.order_by(F("start_at").asc(nulls_last=True), "job__submitted_at", "pk")
    shown = [forecast_view(user, r, cluster.name) for r in rows[:FORECASTS_SHOWN]]
    as_of = shown[0]["as_of"] if shown else None
    return {"rows": shown, "total": rows.count() if shown else 0, "as_of": as_of}
