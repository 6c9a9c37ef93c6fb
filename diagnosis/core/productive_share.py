"""Fairness that counts useful GPUs (issue #20, item 5), a pure core over the period's sums.

:func:`diagnosis.core.fairness.fairness_report` measures a tenant's usage as the GPU-hours it was
*allocated*. A GPU held by a deadlocked gang, idle under a notebook, starved of input or stuck in
a hung collective is allocated but does no work: by allocation alone such a tenant looks served
while it is starved of useful GPUs. This module reads the same sums a second way:

- useful GPU-seconds ``w_t`` = allocated minus held-by-partial-gang, hung, idle, data-starved
  and unavailable GPU-seconds (the ``allocated-busy`` bucket);
- productive share ``p_t = w_t / usable`` and productive ratio ``q_t = w_t / fair_t``;
- Jain's index over the productive ratios of the tenants with demand, next to the allocated one;
- a tenant is **productively starved** when its allocated ratio looks fair
  (``r_t >= FAIR_RATIO``) while its productive ratio is far below it
  (``q_t < PRODUCTIVE_FRACTION * r_t``: most of what it held did no work);
- where MFU is known, the MFU-weighted ratio as well: a busy GPU-second of MFU ``m`` counts
  ``m / m_c`` (at most 1, summed over the tenant), ``m_c`` the cluster's MFU over the period, so
  a tenant is marked down only for running below the cluster's own level. It is shown, not
  judged: an inference service's low MFU is its nature, not waste (the ``low-mfu`` rule judges
  training jobs).

The headline never calls a period fair while a tenant is productively starved. A reader shown
only some tenants (a manager, or ``?tenant=``) gets a verdict about those alone
(:func:`_scoped_headline`): never one about a tenant they cannot see. The headline's words are
English templates (:data:`HEADLINES`) with their values, so the Django layer translates them
(:meth:`ProductiveFairness.headline_in`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from diagnosis.core.fairness import FairnessReport, TenantRow, jain_index, json_number

FAIR_RATIO = 0.8  # an allocated ratio at least this looks fair
PRODUCTIVE_FRACTION = 0.5  # productive ratio below this share of the allocated one: starved
FAIR_JAIN = 0.9  # Jain's index at least this on both readings: the period is fair

# The headline's words by verdict (and the clauses it joins), English: the page translates each
# (diagnosis/reports/fairness_report.py marks them for makemessages) and fills in the values.
HEADLINES: dict[str, str] = {
    "no-demand": "No tenant had demand in this period.",
    "productively-unfair": "Not fair in useful GPU-hours: %(who)s (%(indices)s).",
    "fair": "Fair: %(indices)s.",
    "unequal": "Unequal shares: %(indices)s.",
    "indices": "Jain's index %(allocated)s on allocated GPU-hours, %(productive)s on productive "
    "ones",
    "starved-tenant": "%(tenant)s was allocated %(allocated)s of its fair share but got only "
    "%(productive)s of it in useful GPU-hours",
    "scoped-no-demand": "None of the tenants shown had demand in this period.",
    "scoped-productively-unfair": "Not fair in useful GPU-hours: %(who)s.",
    "scoped-unequal": "Below its fair share: %(who)s.",
    "short-tenant": "%(tenant)s got %(allocated)s of its fair share",
    "scoped-fair": "Fair to the tenants shown: each got at least %(fair)s of its fair share.",
}
# A headline: the key of its template and its values (strings, or clauses joined with "; ").
Words = tuple[str, Mapping[str, "str | Words | tuple[Words, ...]"]]


def render(words: Words, translate: Callable[[str], str] = str) -> str:
    """``words`` as text, each template passed through ``translate`` (gettext) first."""
    key, values = words

    def value(v: str | Words | tuple[Words, ...]) -> str:
        if isinstance(v, str):
            return v
        if v and isinstance(v[0], str):
            return render(v, translate)  # type: ignore[arg-type]
        return "; ".join(render(clause, translate) for clause in v)  # type: ignore[arg-type]

    return translate(HEADLINES[key]) % {name: value(v) for name, v in values.items()}


_EPS = 1e-9

# The rollup columns of GPU-seconds that were allocated but did no work.
WASTE_COLUMNS: Mapping[str, str] = {
    "held-by-partial-gang": "partial_gang_gpu_s",
    "allocated-hung": "hung_gpu_s",
    "allocated-idle": "idle_gpu_s",
    "allocated-data-starved": "data_starved_gpu_s",
    "unavailable": "unavailable_gpu_s",
}


@dataclass(frozen=True)
class ProductiveRow:
    """One tenant's productive reading; shares of the period's usable GPU-seconds."""

    tenant: str
    allocated_ratio: float | None
    useful_gpu_hours: float
    wasted_gpu_hours: Mapping[str, float]  # WASTE_COLUMNS -> GPU-hours
    productive_share: float | None
    productive_ratio: float | None
    mfu_weighted_ratio: float | None  # None: no MFU known for its busy GPUs
    productively_starved: bool
    # its line of the allocated report (starvation and waits shown beside the ratios)
    allocated: TenantRow | None = None

    @property
    def partial_gang_gpu_hours(self) -> float:
        return self.wasted_gpu_hours["held-by-partial-gang"]

    @property
    def idle_gpu_hours(self) -> float:
        return self.wasted_gpu_hours["allocated-idle"]

    @property
    def data_starved_gpu_hours(self) -> float:
        return self.wasted_gpu_hours["allocated-data-starved"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "allocated_ratio": json_number(self.allocated_ratio),
            "useful_gpu_hours": json_number(self.useful_gpu_hours),
            "wasted_gpu_hours": {k: json_number(v) for k, v in self.wasted_gpu_hours.items()},
            "productive_share": json_number(self.productive_share),
            "productive_ratio": json_number(self.productive_ratio),
            "mfu_weighted_ratio": json_number(self.mfu_weighted_ratio),
            "productively_starved": self.productively_starved,
        }


@dataclass(frozen=True)
class ProductiveFairness:
    rows: tuple[ProductiveRow, ...]  # the visible tenants
    allocated_jain_index: float | None
    jain_index: float | None  # over the productive ratios
    cluster_mfu: float | None
    verdict: str  # "fair", "unequal", "productively-unfair" or "no-demand"
    starved: tuple[str, ...]  # visible tenants that are productively starved
    words: Words = field(default=("no-demand", {}))  # the headline, to translate

    @property
    def headline(self) -> str:
        return render(self.words)

    def headline_in(self, translate: Callable[[str], str]) -> str:
        return render(self.words, translate)

    def row(self, tenant: str) -> ProductiveRow:
        return next(r for r in self.rows if r.tenant == tenant)

    def as_dict(self) -> dict[str, Any]:
        return {
            "allocated_jain_index": json_number(self.allocated_jain_index),
            "jain_index": json_number(self.jain_index),
            "cluster_mfu": json_number(self.cluster_mfu),
            "verdict": self.verdict,
            "headline": self.headline,
            "productively_starved": list(self.starved),
            "tenants": [r.as_dict() for r in self.rows],
        }


def _number(sums: Mapping[str, Any], column: str) -> float:
    return float(sums.get(column) or 0.0)


def mfu_weighted_gpu_s(sums: Mapping[str, Any], cluster_mfu: float | None) -> float | None:
    """A tenant's busy GPU-seconds with those of known MFU weighted by it relative to the
    cluster's (capped at one GPU-second each, summed over the tenant); None without MFU."""
    busy = _number(sums, "busy_gpu_s")
    known = min(_number(sums, "mfu_known_gpu_s"), busy)
    if cluster_mfu is None or cluster_mfu <= _EPS or known <= _EPS:
        return None
    return busy - known + min(known, _number(sums, "productive_gpu_s") / cluster_mfu)


def productive_fairness(
    tenant_sums: Mapping[str, Mapping[str, Any]],
    cluster_sums: Mapping[str, Any],
    *,
    visible: Collection[str] | None = None,
    report: FairnessReport | None = None,
) -> ProductiveFairness:
    """The productive reading of a period from the sums that
    :func:`~diagnosis.core.fairness.fairness_report` reads (every
    tenant's, so Jain's index is about the whole cluster; rows and names only for ``visible``).
    ``report``: that period's allocated report, whose rows the productive ones point to."""
    allocated_rows = {row.tenant: row for row in report.tenants} if report is not None else {}
    usable = _number(cluster_sums, "gpu_s") - _number(cluster_sums, "unavailable_gpu_s")
    known = _number(cluster_sums, "mfu_known_gpu_s")
    cluster_mfu = _number(cluster_sums, "productive_gpu_s") / known if known > _EPS else None
    rows: list[ProductiveRow] = []
    allocated_ratios: list[float] = []
    productive_ratios: list[float] = []
    demanded: set[str] = set()
    for name in sorted(tenant_sums):
        sums = tenant_sums[name]
        allocated = _number(sums, "allocated_gpu_s")
        fair = _number(sums, "fair_gpu_s")
        useful = _number(sums, "busy_gpu_s")
        weighted = mfu_weighted_gpu_s(sums, cluster_mfu)
        allocated_ratio = allocated / fair if fair > _EPS else None
        productive_ratio = useful / fair if fair > _EPS else None
        if _number(sums, "demanded_gpu_s") > 0 and allocated_ratio is not None:
            demanded.add(name)
            allocated_ratios.append(allocated_ratio)
            productive_ratios.append(productive_ratio or 0.0)
        starved = (
            allocated_ratio is not None
            and productive_ratio is not None
            and allocated_ratio >= FAIR_RATIO
            and productive_ratio < PRODUCTIVE_FRACTION * allocated_ratio
        )
        rows.append(
            ProductiveRow(
                tenant=name,
                allocated_ratio=allocated_ratio,
                useful_gpu_hours=useful / 3600,
                wasted_gpu_hours={
                    bucket: _number(sums, column) / 3600 for bucket, column in WASTE_COLUMNS.items()
                },
                productive_share=useful / usable if usable > _EPS else None,
                productive_ratio=productive_ratio,
                mfu_weighted_ratio=(
                    weighted / fair if weighted is not None and fair > _EPS else None
                ),
                productively_starved=starved,
                allocated=allocated_rows.get(name),
            )
        )
    allocated_jain = jain_index(allocated_ratios)
    productive_jain = jain_index(productive_ratios)
    any_starved = any(r.productively_starved for r in rows)
    shown = tuple(r for r in rows if visible is None or r.tenant in visible)
    starved = tuple(r.tenant for r in shown if r.productively_starved)
    if visible is None:
        verdict, words = _headline(allocated_jain, productive_jain, any_starved, shown)
    else:
        verdict, words = _scoped_headline(shown, demanded)
    return ProductiveFairness(
        rows=shown,
        allocated_jain_index=allocated_jain,
        jain_index=productive_jain,
        cluster_mfu=cluster_mfu,
        verdict=verdict,
        starved=starved,
        words=words,
    )


def _index(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _starved_clause(row: ProductiveRow) -> Words:
    return (
        "starved-tenant",
        {
            "tenant": row.tenant,
            "allocated": f"{row.allocated_ratio:.0%}",
            "productive": f"{row.productive_ratio:.0%}",
        },
    )


def _headline(
    allocated_jain: float | None,
    productive_jain: float | None,
    any_starved: bool,
    rows: tuple[ProductiveRow, ...],
) -> tuple[str, Words]:
    """The whole cluster's verdict, for a reader who sees every tenant."""
    indices: Words = (
        "indices",
        {"allocated": _index(allocated_jain), "productive": _index(productive_jain)},
    )
    if allocated_jain is None:
        return "no-demand", ("no-demand", {})
    if any_starved:
        who = tuple(_starved_clause(r) for r in rows if r.productively_starved)
        return "productively-unfair", ("productively-unfair", {"who": who, "indices": indices})
    if allocated_jain >= FAIR_JAIN and (productive_jain or 0.0) >= FAIR_JAIN:
        return "fair", ("fair", {"indices": indices})
    return "unequal", ("unequal", {"indices": indices})


def _scoped_headline(rows: tuple[ProductiveRow, ...], demanded: set[str]) -> tuple[str, Words]:
    """The verdict about the tenants shown alone (Jain's index is the cluster's, about tenants
    this reader may not see): productively starved ones named first, then those allocated
    less than :data:`FAIR_RATIO` of their fair share."""
    judged = [r for r in rows if r.tenant in demanded]
    if not judged:
        return "no-demand", ("scoped-no-demand", {})
    starved = tuple(_starved_clause(r) for r in judged if r.productively_starved)
    if starved:
        return "productively-unfair", ("scoped-productively-unfair", {"who": starved})
    short = tuple(
        ("short-tenant", {"tenant": r.tenant, "allocated": f"{r.allocated_ratio:.0%}"})
        for r in judged
        if (r.allocated_ratio or 0.0) < FAIR_RATIO
    )
    if short:
        return "unequal", ("scoped-unequal", {"who": short})
    return "fair", ("scoped-fair", {"fair": f"{FAIR_RATIO:.0%}"})
