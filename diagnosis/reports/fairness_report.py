"""The tenant fairness report of one cluster and period, assembled from the stored rollups
(``TenantRollup``, ``PoolRollup``), the job records and the findings, for one reader.

:func:`build_fairness_report` is the one function the page, the API, the CSV and PDF exports,
the ``report`` command and the emailed subscription all call, so they show the same numbers.
Reads go through ``diagnosis.access``: a tenant-scoped manager gets only their tenants' rows
(Jain's index is always over every tenant with demand: one number about the whole cluster).

Cost: grouped queries over the period's rollups (per time bin and tenant, per time bin for the
cluster: over hours and days the whole hours read the hourly rows written at cycle time, one per
tenant and hour, and only the partial first and last hours the per-cycle rows), the starvation
findings, and one over the jobs that started in the period; the rows read grow with the hours
in the period, not with the cycles stored in it (tests/app/pages/test_pages_rollups_fairness.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
from django.db import connection, transaction
from django.db.models import (
    Count,
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    F,
    FloatField,
    Func,
    Max,
    Q,
    Sum,
    Value,
)
from django.db.models.functions import Trunc
from django.utils import timezone
from django.utils.translation import gettext_noop

from diagnosis.access import (
    findings_for_user,
    get_tenant_for_user,
    jobs_for_user,
    tenants_for_user,
)
from diagnosis.actions.records.rollups_hourly import hour_of
from diagnosis.core import fairness
from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.cost import NO_PRICES, Money, Pricing, TenantCost, tenant_cost, total
from diagnosis.core.productive_share import ProductiveFairness, productive_fairness
from diagnosis.core.vocabulary import format_time
from diagnosis.edge.schedulers.registry import capabilities_of
from diagnosis.models import (
    Cluster,
    PoolRollup,
    PoolRollupHour,
    RollupFigures,
    Snapshot,
    Tenant,
    TenantRollup,
    TenantRollupHour,
)
from diagnosis.reports.period import ReportPeriod
from diagnosis.reports.pricing import pricing_for
from diagnosis.roles import User, is_tenant_scoped

REPORT_FORMAT = "gpuobs.fairness-report/v1"


def series_bin(period: ReportPeriod) -> str:
    """The time bin of the report's charts: minutes up to 6 hours, hours up to 8 days, else
    days (at most a few hundred points)."""
    if period.seconds <= 6 * 3600:
        return "minute"
    if period.seconds <= 8 * 86400:
        return "hour"
    return "day"


@dataclass(frozen=True)
class FairnessReportData:
    """A cluster's report for one reader: the core report plus what the charts need."""

    cluster: Cluster
    period: ReportPeriod
    generated_at: datetime
    tenant_scoped: bool
    visible_tenants: tuple[str, ...] | None  # None: every tenant
    cycles: int
    entitlement_basis: str  # "deserved", "weight", "mixed" or "" (no data)
    report: fairness.FairnessReport
    series: pd.DataFrame  # bin, tenant, usage, fair_share, entitlement (visible tenants)
    bin: str
    productive: ProductiveFairness  # the same sums counting only useful GPU-hours (issue #20)
    # the scheduler's queue hierarchy with each node's share, from the period's newest snapshot
    # (Volcano/KAI parent queues, Kueue cohorts and their weights); () without a hierarchy
    tree: tuple[fairness.TreeNode, ...] = ()
    tree_as_of: datetime | None = None
    # the cluster's price per GPU-hour (diagnosis/reports/pricing.py); None or unpriced: no cost
    pricing: Pricing | None = None

    @property
    def priced(self) -> bool:
        return self.pricing is not None and self.pricing.priced

    def cost_of(self, row: fairness.TenantRow) -> TenantCost | None:
        """What the tenant's GPU-hours cost (None when the cluster is not priced)."""
        if self.pricing is None:
            return None
        return tenant_cost(self.pricing, row.allocated_gpu_hours, row.buckets)

    def costs(self) -> list[tuple[fairness.TenantRow, TenantCost | None]]:
        return [(row, self.cost_of(row)) for row in self.tenants]

    def total_cost(self) -> Money | None:
        """The shown tenants' held GPU-hours priced, summed unrounded and rounded once."""
        pricing = self.pricing
        if pricing is None or not pricing.priced:
            return None
        exact = [pricing.exact(row.allocated_gpu_hours) for row in self.tenants]
        return total(exact, pricing.currency)

    @property
    def tenants(self) -> tuple[fairness.TenantRow, ...]:
        return self.report.tenants

    @property
    def has_data(self) -> bool:
        return self.cycles > 0

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (the API answer, ``manage.py report --format json``)."""
        report = self.report
        return {
            "format": REPORT_FORMAT,
            "cluster": self.cluster.name,
            **self.period.as_dict(),
            "generated_at": format_time(self.generated_at),
            "scope": {
                "tenant_scoped": self.tenant_scoped,
                "tenants": list(self.visible_tenants) if self.visible_tenants is not None else None,
            },
            "cycles": self.cycles,
            "covered_s": fairness.json_number(report.covered_s),
            "capacity_gpu_hours": fairness.json_number(report.capacity_gpu_hours),
            "usable_gpu_hours": fairness.json_number(report.usable_gpu_hours),
            "entitlement_basis": self.entitlement_basis,
            "jain_index": fairness.json_number(report.jain_index),
            "waits": {
                "all": report.wait.as_dict(),
                **{name: stats.as_dict() for name, stats in report.waits.items()},
            },
            "tenants": [
                {**row.as_dict(), "cost": cost.as_dict() if cost else None}
                for row, cost in self.costs()
            ],
            "pricing": (self.pricing or Pricing("", None, NO_PRICES)).as_dict(),
            "cost": _money_text(self.total_cost()),
            "productive": self.productive.as_dict(),
            "tree": {
                "as_of": format_time(self.tree_as_of) if self.tree_as_of else None,
                "nodes": [_tree_node(node) for node in self.tree],
            },
        }


def _money_text(money: Money | None) -> str | None:
    return money.as_text() if money is not None else None


def _tree_node(node: fairness.TreeNode) -> dict[str, Any]:
    number = fairness.json_number
    return {
        "name": node.name,
        "kind": node.kind,
        "parent": node.parent,
        "depth": node.depth,
        "weight": number(node.weight),
        "tenant": node.tenant,
        "demand_gpus": number(node.demand_gpus),
        "fair_gpus": number(node.fair_gpus),
        "held_gpus": number(node.held_gpus),
        "ratio": number(node.ratio),
    }


# The words of the productive verdict (diagnosis.core.productive_share.HEADLINES, which the
# pure core cannot mark), here for makemessages; the page renders them with gettext
# (ProductiveFairness.headline_in). tests/app/reports/test_fairness_scoped.py checks the two agree.
VERDICT_WORDS = (
    gettext_noop("No tenant had demand in this period."),
    gettext_noop("Not fair in useful GPU-hours: %(who)s (%(indices)s)."),
    gettext_noop("Fair: %(indices)s."),
    gettext_noop("Unequal shares: %(indices)s."),
    gettext_noop(
        "Jain's index %(allocated)s on allocated GPU-hours, %(productive)s on productive ones"
    ),
    gettext_noop(
        "%(tenant)s was allocated %(allocated)s of its fair share but got only "
        "%(productive)s of it in useful GPU-hours"
    ),
    gettext_noop("None of the tenants shown had demand in this period."),
    gettext_noop("Not fair in useful GPU-hours: %(who)s."),
    gettext_noop("Below its fair share: %(who)s."),
    gettext_noop("%(tenant)s got %(allocated)s of its fair share"),
    gettext_noop("Fair to the tenants shown: each got at least %(fair)s of its fair share."),
)


def latest_rollup_time(cluster: Cluster) -> datetime | None:
    """The newest snapshot time rolled up for the cluster (None before the first cycle)."""
    return PoolRollup.objects.filter(cluster=cluster, pool="").aggregate(m=Max("as_of"))["m"]


def default_end(cluster: Cluster, now: datetime | None = None) -> datetime:
    """Where a preset period ends: at the newest rollup when it is recent (within
    ``RECENT_DATA`` of now) or ahead of our clock (a simulated cluster stepping faster than the
    wall clock) -- "the last 24 hours" of the data, which changes only when a cycle lands, so
    the page is cached per cycle (issue #17) -- else now: a cluster gone quiet shows its gap."""
    now = now or timezone.now()
    latest = latest_rollup_time(cluster)
    if latest is not None and latest >= now - RECENT_DATA:
        return latest
    return now


RECENT_DATA = timedelta(minutes=10)


def requested_tenants(user: User, cluster: Cluster, names: Iterable[str]) -> tuple[str, ...]:
    """The tenants a reader asked to narrow a report to (``?tenant=``), each checked: a name
    the reader may not see (or that does not exist) is a 404, never an empty report."""
    wanted = sorted({name for name in names if name})
    return tuple(get_tenant_for_user(user, cluster, name).name for name in wanted)


def build_fairness_report(
    user: User,
    cluster: Cluster,
    period: ReportPeriod,
    *,
    tenants: Iterable[str] = (),
    now: datetime | None = None,
) -> FairnessReportData:
    """The fairness report of ``cluster`` over ``period`` as ``user`` may see it, narrowed to
    ``tenants`` when given (checked with :func:`requested_tenants`). ``cluster`` must come
    from :func:`diagnosis.access.get_cluster_for_user`."""
    scoped = is_tenant_scoped(user)
    narrowed = requested_tenants(user, cluster, tenants)
    visible: tuple[str, ...] | None = narrowed or None
    if scoped and visible is None:
        visible = tuple(sorted(tenants_for_user(user, cluster).values_list("name", flat=True)))
    bin_kind = series_bin(period)

    with transaction.atomic():
        _aggregate_in_memory()
        tenant_bins = pd.DataFrame.from_records(
            _binned(TenantRollup, TenantRollupHour, cluster, period, bin_kind, ("tenant_name",)),
            columns=["bin", "tenant_name", *fairness.TENANT_SUMS],
        )
        cluster_rows = _binned(
            PoolRollup,
            PoolRollupHour,
            cluster,
            period,
            bin_kind,
            ("entitlement_basis",),
            counted=True,
            pool="",
        )
    cluster_bins = pd.DataFrame.from_records(
        cluster_rows, columns=["bin", "entitlement_basis", "cycles", *fairness.CLUSTER_SUMS]
    )
    bases = sorted(set(cluster_bins["entitlement_basis"]) - {""})
    basis = bases[0] if len(bases) == 1 else ("mixed" if bases else "")
    cluster_bins = cluster_bins.groupby("bin", sort=True)[["cycles", *fairness.CLUSTER_SUMS]].sum()

    tenant_sums = {
        str(name): group[list(fairness.TENANT_SUMS)].sum().to_dict()
        for name, group in tenant_bins.groupby("tenant_name", sort=True)
    }
    cluster_sums = cluster_bins[list(fairness.CLUSTER_SUMS)].sum().to_dict()
    report = fairness.fairness_report(
        tenant_sums,
        cluster_sums,
        waits=_job_waits(user, cluster, period, visible),
        starvation_findings=_starvation_findings(user, cluster, period, visible),
        visible=visible,
    )
    tree, tree_as_of = _queue_tree(cluster, period, visible)
    return FairnessReportData(
        cluster=cluster,
        period=period,
        generated_at=now or timezone.now(),
        tenant_scoped=scoped,
        visible_tenants=visible,
        cycles=int(cluster_bins["cycles"].sum()) if len(cluster_bins) else 0,
        entitlement_basis=basis,
        report=report,
        series=_share_series(tenant_bins, cluster_bins, visible),
        bin=bin_kind,
        productive=productive_fairness(tenant_sums, cluster_sums, visible=visible, report=report),
        tree=tree,
        tree_as_of=tree_as_of,
        pricing=pricing_for(cluster),
    )


def whole_hours(period: ReportPeriod) -> tuple[datetime, datetime] | None:
    """The clock hours wholly inside ``period`` (snapshot times in ``(start, end]``), as
    ``[first, last)`` hour starts, or None when there is none."""
    first = hour_of(period.start) + timedelta(hours=1)
    last = hour_of(period.end)
    return (first, last) if first < last else None


def _binned(
    per_cycle: type[RollupFigures],
    hourly: type[RollupFigures],
    cluster: Cluster,
    period: ReportPeriod,
    bin_kind: str,
    keys: tuple[str, ...],
    *,
    counted: bool = False,
    **scope: str,
) -> list[dict[str, Any]]:
    """Per time bin and ``keys``: the sums of the period's rollups (``cycles`` too when
    ``counted``). Binned per hour or day, the whole hours come from the hourly rows written at
    cycle time (one per scope and hour: issue #17) and only the period's partial first and last
    hours from the per-cycle rows; binned per minute, everything comes from the per-cycle rows.
    Rows of one bin from both are added up."""
    sums = fairness.TENANT_SUMS if per_cycle is TenantRollup else fairness.CLUSTER_SUMS
    hours = None if bin_kind == "minute" else whole_hours(period)
    in_period = Q(as_of__gt=period.start, as_of__lte=period.end)
    if hours is not None:
        in_period &= Q(as_of__lt=hours[0]) | Q(as_of__gte=hours[1])

    def grouped(model: type[RollupFigures], where: Q, cycles: Any) -> list[dict[str, Any]]:
        counts = {"cycles": cycles} if counted else {}
        return list(
            model.objects.filter(where, cluster=cluster, **scope)
            .annotate(bin=Trunc("as_of", bin_kind, tzinfo=UTC))
            .values("bin", *keys)
            .annotate(**counts, **{column: Sum(column) for column in sums})
            .order_by()
        )

    rows = grouped(per_cycle, in_period, Count("id"))
    if hours is None:
        return rows
    rows += grouped(hourly, Q(as_of__gte=hours[0], as_of__lt=hours[1]), Sum("cycles"))
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = (row["bin"], *(row[k] for k in keys))
        if key not in merged:
            merged[key] = row
            continue
        for column in (*(("cycles",) if counted else ()), *sums):
            merged[key][column] = (merged[key][column] or 0) + (row[column] or 0)
    return list(merged.values())


def _queue_tree(
    cluster: Cluster, period: ReportPeriod, visible: tuple[str, ...] | None
) -> tuple[tuple[fairness.TreeNode, ...], datetime | None]:
    """The hierarchy of the period's newest snapshot (one snapshot read, only for a scheduler
    that has hierarchies). A tenant-scoped reader sees the groups and their own leaf queues,
    never another tenant's queue."""
    if not capabilities_of(cluster.scheduler_kind).queue_tree:
        return (), None
    newest = (
        Snapshot.objects.filter(cluster=cluster, as_of__gt=period.start, as_of__lte=period.end)
        .order_by("-as_of")
        .first()
    )
    if newest is None:
        return (), None
    document = newest.load_document()
    scheduler = document.get("scheduler") or {}
    if not (scheduler.get("queue_parents") or scheduler.get("cohorts")):
        return (), None
    nodes = fairness.snapshot_tree(snapshot_format.load(document))
    if visible is not None:
        nodes = tuple(n for n in nodes if n.tenant is None or n.tenant in visible)
    return nodes, newest.as_of


class _Seconds(Func):
    """A duration expression in seconds, as a float computed by the database (so 100,000s of
    jobs cost one float each, not two timestamps parsed in Python)."""

    output_field = FloatField()

    def as_postgresql(self, compiler, connection, **extra):
        template = "EXTRACT(EPOCH FROM (%(expressions)s))::float8"
        return self.as_sql(compiler, connection, template=template, **extra)

    def as_sqlite(self, compiler, connection, **extra):
        # Django's SQLite datetime difference is in microseconds.
        template = "((%(expressions)s) / 1000000.0)"
        return self.as_sql(compiler, connection, template=template, **extra)


# Memory PostgreSQL may use for the report's grouped sums (for this transaction only): enough
# for a hash aggregate of a month of minute rollups; with the default 4 MB it sorts millions of
# rows on disk instead, two to three times slower (bench/reports.py).
AGGREGATE_WORK_MEM = "64MB"


def _aggregate_in_memory() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL work_mem = %s", [AGGREGATE_WORK_MEM])


def _job_waits(
    user: User, cluster: Cluster, period: ReportPeriod, visible: tuple[str, ...] | None
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per tenant: GPUs asked, wait in seconds and whether still waiting, from the job records
    the reader may see: the jobs that started in the period (start - submission) and those
    submitted but not started, ended or gone from the scheduler by its end (the wait so far, up
    to the period's end or the newest data before it) -- docs/fairness.md "Waits"."""
    jobs = jobs_for_user(user, cluster).annotate(asked=F("pods") * F("gpus_per_pod"))
    if visible is not None:
        jobs = jobs.filter(tenant__name__in=visible)
    latest = latest_rollup_time(cluster)
    as_of = min(period.end, latest) if latest is not None else period.end
    waited = ExpressionWrapper(F("started_at") - F("submitted_at"), output_field=DurationField())
    so_far = ExpressionWrapper(
        Value(as_of, output_field=DateTimeField()) - F("submitted_at"),
        output_field=DurationField(),
    )
    not_by = (  # not started, ended or unlisted by as_of
        Q(started_at__isnull=True) | Q(started_at__gt=as_of),
        Q(ended_at__isnull=True) | Q(ended_at__gt=as_of),
        Q(unlisted_since__isnull=True) | Q(unlisted_since__gt=as_of),
    )
    started = (
        jobs.filter(started_at__gt=period.start, started_at__lte=period.end)
        .annotate(wait_s=_Seconds(waited), waiting=Value(False))
        .values_list("tenant_id", "asked", "wait_s", "waiting")
        .order_by()
    )
    pending = (
        jobs.filter(*not_by, submitted_at__lte=as_of)
        .annotate(wait_s=_Seconds(so_far), waiting=Value(True))
        .values_list("tenant_id", "asked", "wait_s", "waiting")
        .order_by()
    )
    fetched = []
    for rows in (started, pending):
        # The SQL Django wrote for this database, fetched without Django's per-value converters
        # (ints and floats need none): a month of a big cluster is 100,000s of rows.
        sql, params = rows.query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            fetched += cursor.fetchall()
    frame = pd.DataFrame.from_records(fetched, columns=["tenant", "asked", "wait", "waiting"])
    if frame.empty:
        return {}
    names = dict(Tenant.objects.filter(cluster=cluster).values_list("pk", "name"))
    frame["tenant"] = frame["tenant"].map(names).fillna(fairness.NO_TENANT)
    frame["wait"] = frame["wait"].astype(float).clip(lower=0)
    return {
        str(name): (
            group["asked"].to_numpy(np.int64),
            group["wait"].to_numpy(float),
            group["waiting"].astype(bool).to_numpy(),
        )
        for name, group in frame.groupby("tenant", sort=True)
    }


def _starvation_findings(
    user: User, cluster: Cluster, period: ReportPeriod, visible: tuple[str, ...] | None
) -> dict[str, int]:
    """Per tenant: distinct starvation findings the rule reported during the period (first
    seen before its end, last reported after its start)."""
    findings = findings_for_user(user, cluster)
    if visible is not None:
        findings = findings.filter(tenant__name__in=visible)
    rows = (
        findings.filter(
            rule_id="starvation", first_seen__lte=period.end, last_hit_at__gt=period.start
        )
        .values("tenant__name")
        .annotate(n=Count("id"))
        .order_by()
    )
    return {str(row["tenant__name"] or fairness.NO_TENANT): row["n"] for row in rows}


def _share_series(
    tenant_bins: pd.DataFrame, cluster_bins: pd.DataFrame, visible: tuple[str, ...] | None
) -> pd.DataFrame:
    """Per time bin and visible tenant: usage and fair share of the bin's usable GPU-seconds,
    and the time-averaged entitlement."""
    columns = ["bin", "tenant", "usage", "fair_share", "entitlement"]
    if tenant_bins.empty or cluster_bins.empty:
        return pd.DataFrame(columns=columns)
    frame = (
        tenant_bins if visible is None else tenant_bins[tenant_bins["tenant_name"].isin(visible)]
    )
    usable = cluster_bins["gpu_s"] - cluster_bins["unavailable_gpu_s"]
    covered = cluster_bins["interval_s"]
    bins = frame["bin"]
    usable_of = bins.map(usable).to_numpy(float)
    covered_of = bins.map(covered).to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = pd.DataFrame(
            {
                "bin": pd.to_datetime(bins, utc=True).to_numpy(),
                "tenant": frame["tenant_name"].to_numpy(),
                "usage": np.where(usable_of > 0, frame["allocated_gpu_s"] / usable_of, np.nan),
                "fair_share": np.where(usable_of > 0, frame["fair_gpu_s"] / usable_of, np.nan),
                "entitlement": np.where(
                    covered_of > 0, frame["entitlement_s"] / covered_of, np.nan
                ),
            }
        )
    return out.sort_values(["tenant", "bin"]).reset_index(drop=True)


def subscription_period(frequency: str, end: datetime) -> ReportPeriod:
    """The period an emailed report covers: the last 7 days (weekly) or 30 days (monthly)."""
    preset = "7d" if frequency == "weekly" else "30d"
    return ReportPeriod.preset_ending(preset, end)


SUBSCRIPTION_EVERY: Mapping[str, timedelta] = {
    "weekly": timedelta(days=7),
    "monthly": timedelta(days=30),
}
