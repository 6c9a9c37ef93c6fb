"""``starvation``: a pending job that later jobs of its pool keep overtaking.

*Overtakers* of a pending job J are the jobs of J's pool (jobs with a null pool form one group)
submitted strictly after J that have started since J was submitted (``started >= J.submitted``),
whatever their state now.

Counting is vectorised per pool: job k overtakes every J with ``J.submitted < k.submitted`` and
``J.submitted <= k.started``, i.e. ``J.submitted <= u_k`` with ``u_k = k.submitted - 1 ns`` when
``k.started >= k.submitted`` (the normal case) and ``u_k = k.started`` otherwise. Sorting the
pool's started jobs by ``u`` makes each J's overtakers a suffix of that order, found with one
``searchsorted``. The cause of each firing job (how many overtakers had a higher priority, their
median request) is counted over that suffix from per-value position lists, without a loop over
jobs, whenever the pool has at most :data:`MAX_DISTINCT` distinct priorities / requests; beyond
that it is counted job by job over the firing jobs only.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from diagnosis.core.rules.base import Judgement, Rule, RuleDoc, Threshold
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.snapshot import ClusterSnapshot
from diagnosis.core.text import Text, gettext_noop, message

MAX_LISTED_OVERTAKERS = 20
MAX_DISTINCT = 64
SIZE_FACTOR = 4
_NO_POOL = "\0no pool"  # groups the jobs whose pool is null


def _epoch_ns(values: pd.Series) -> np.ndarray:
    return values.dt.as_unit("ns").array.asi8


def _suffix_counts(values: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each start, how many of ``values[start:]`` equal each distinct value.

    Returns ``(distinct, counts)`` with ``counts.shape == (len(starts), len(distinct))``.
    """
    distinct, inverse = np.unique(values, return_inverse=True)
    counts = np.empty((len(starts), len(distinct)), dtype=np.int64)
    for d in range(len(distinct)):  # few distinct values (<= MAX_DISTINCT)
        positions = np.flatnonzero(inverse == d)
        counts[:, d] = len(positions) - np.searchsorted(positions, starts, side="left")
    return distinct, counts


def _higher_priority(priority: np.ndarray, starts: np.ndarray, own: np.ndarray) -> np.ndarray:
    if len(np.unique(priority)) <= MAX_DISTINCT:
        distinct, counts = _suffix_counts(priority, starts)
        return (counts * (distinct[None, :] > own[:, None])).sum(axis=1)
    return np.array([(priority[s:] > p).sum() for s, p in zip(starts, own, strict=True)])


def _median_request(requests: np.ndarray, starts: np.ndarray) -> np.ndarray:
    if len(np.unique(requests)) <= MAX_DISTINCT:
        distinct, counts = _suffix_counts(requests, starts)
        cumulative = counts.cumsum(axis=1)
        total = cumulative[:, -1]
        low = np.argmax(cumulative > ((total - 1) // 2)[:, None], axis=1)
        high = np.argmax(cumulative > (total // 2)[:, None], axis=1)
        return (distinct[low] + distinct[high]) / 2.0
    return np.array([float(np.median(requests[s:])) for s in starts])


def _tenant_share(snapshot: ClusterSnapshot, facts: SnapshotFacts) -> tuple[dict, dict]:
    """Per tenant: GPUs allocated to its jobs now, and the sum of its queues' deserved GPUs
    (tenants none of whose queues sets one are left out)."""
    jobs = snapshot.jobs
    held = facts.job_held_gpus.groupby(jobs["tenant"].to_numpy(), sort=False).sum()
    queues = snapshot.queues
    deserved = queues.groupby("tenant", sort=False)["deserved_gpus"].sum(min_count=1).dropna()
    return (
        {str(k): int(v) for k, v in held.items()},
        {str(k): float(v) for k, v in deserved.items()},
    )


def evaluate(
    snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
) -> Judgement:
    placement = facts.pending_placement
    waiting = placement[placement["wait_s"].to_numpy() >= thresholds["min_wait"]]
    if waiting.empty:
        return Judgement()
    jobs = snapshot.jobs
    started = jobs[jobs["started"].notna()]
    submitted_ns = _epoch_ns(started["submitted"])
    started_ns = _epoch_ns(started["started"])
    u = np.where(started_ns >= submitted_ns, submitted_ns - 1, started_ns)
    started_pool = started["pool"].astype(object).fillna(_NO_POOL).to_numpy()
    started_ids = started.index.to_numpy()
    started_priority = started["priority"].to_numpy()
    started_request = facts.job_requests.reindex(started.index).to_numpy()

    waiting_pool = waiting["pool"].astype(object).fillna(_NO_POOL).to_numpy()
    waiting_t = _epoch_ns(waiting["submitted"])
    tenant = waiting["tenant"].astype(object)
    queue_tenant = waiting["queue"].map(snapshot.queues["tenant"]).astype(object)
    tenant = tenant.where(tenant.notna(), queue_tenant)
    tenant = np.array([t if isinstance(t, str) else None for t in tenant], dtype=object)
    held_by, deserved_by = _tenant_share(snapshot, facts)
    held = np.array([held_by.get(t, 0) if t is not None else 0 for t in tenant], dtype=float)
    deserved = np.array([deserved_by.get(t, np.nan) if t is not None else np.nan for t in tenant])

    findings = []
    for pool in np.unique(waiting_pool):
        rows = np.flatnonzero(waiting_pool == pool)
        in_pool = np.flatnonzero(started_pool == pool)
        order = in_pool[np.argsort(u[in_pool], kind="stable")]
        starts = np.searchsorted(u[order], waiting_t[rows], side="left")
        overtaken = len(order) - starts
        fire = overtaken >= thresholds["min_overtaken"]
        if not fire.any():
            continue
        rows, starts, overtaken = rows[fire], starts[fire], overtaken[fire]
        own_priority = waiting["priority"].to_numpy()[rows]
        own_request = waiting["request"].to_numpy()[rows]
        higher = _higher_priority(started_priority[order], starts, own_priority)
        median = _median_request(started_request[order], starts)
        short = ~np.isnan(deserved[rows]) & (held[rows] < deserved[rows])
        cause = np.select(
            [
                (overtaken > 0) & (2 * higher >= overtaken),
                (overtaken > 0) & (own_request >= SIZE_FACTOR * median),
                short,
            ],
            ["priority", "size", "share"],
            default="order",
        )
        ordered_ids = started_ids[order].tolist()
        columns = zip(
            waiting.index.to_numpy()[rows].tolist(),
            waiting["wait_s"].to_numpy()[rows].tolist(),
            own_priority.tolist(),
            own_request.tolist(),
            overtaken.tolist(),
            starts.tolist(),
            higher.tolist(),
            median.tolist(),
            tenant[rows].tolist(),
            held[rows].tolist(),
            deserved[rows].tolist(),
            cause.tolist(),
            strict=True,
        )
        pool_name = None if pool == _NO_POOL else str(pool)
        for job_id, wait_s, prio, request, count, start, high, med, who, got, due, why in columns:
            evidence = {
                "wait_s": round(wait_s, 1),
                "pool": pool_name,
                "priority": int(prio),
                "request_gpus": int(request),
                "overtaken_by": int(count),
                "overtakers": ordered_ids[start : start + MAX_LISTED_OVERTAKERS],
                "overtakers_higher_priority": int(high),
                "overtakers_median_request_gpus": float(med),
                "tenant": who,
                "tenant_held_gpus": None if who is None else int(got),
                "tenant_deserved_gpus": None if due != due else due,  # NaN: not set
                "cause": why,
            }
            summary = message(
                gettext_noop(
                    "Job %(job)s has waited %(waited)s while %(count)s later job(s) of its pool "
                    "started (cause: %(cause)s)."
                ),
                job=str(job_id),
                waited=_hours(wait_s),
                count=count,
                cause=str(why),
            )
            findings.append(RULE.finding(f"job:{job_id}", summary, evidence))
    return Judgement(findings=tuple(findings))


def _hours(seconds: float) -> Text:
    if seconds >= 3600:
        return _phrase(gettext_noop("%(hours)s h"), "hours", f"{seconds / 3600:.1f}")
    return _phrase(gettext_noop("%(minutes)s min"), "minutes", f"{seconds / 60:.0f}")


@lru_cache(maxsize=4096)
def _phrase(template: str, name: str, value: str) -> Text:
    """One phrase per shown value, shared by every summary showing it (a Text is immutable)."""
    return message(template, **{name: value})


RULE = Rule(
    id="starvation",
    title="Pending job overtaken by later jobs",
    severity="warning",
    subject_kind="job:",
    thresholds=(
        Threshold("min_wait", 4 * 3600, "How long the job must have been pending.", unit="s"),
        Threshold(
            "min_overtaken",
            3,
            "How many later-submitted jobs of its pool must have started since it was submitted.",
            unit="jobs",
            minimum=1,
        ),
    ),
    doc=RuleDoc(
        detects=(
            "A pending job with no allocation that has waited at least `min_wait` while at "
            "least `min_overtaken` jobs of the same pool, submitted after it, have started "
            "since it was submitted (`started >= its submitted`; they may have finished since). "
            "The `cause` is, in this order: `priority` if at least half of the overtakers had "
            "a higher priority; `size` if its request (pods × gpus_per_pod) is at least 4× the "
            "overtakers' median request; `share` if its tenant holds less than it deserves "
            "(GPUs allocated now to the tenant's jobs < the sum of `deserved_gpus` of the "
            "tenant's queues, judged only when some deserved is set); else `order`."
        ),
        why=(
            "A job that the scheduler keeps passing over may never run: large gangs wait for "
            "whole nodes that small jobs keep taking, low-priority work waits behind a stream "
            "of higher-priority work, and an under-served tenant's queue loses to others. "
            "Users see it as a hung submission."
        ),
        fix=(
            "By cause: `priority` — raise the job's priority or cap the higher class; `size` — "
            "reserve or backfill-protect capacity for large jobs (Volcano `reserve`/`sla` "
            "plugins, Slurm backfill with reservations, Kueue `BestEffortFIFO` → `StrictFIFO`); "
            "`share` — raise the queue's weight toward its fair share; `order` — check the "
            "queue's ordering policy and the job's constraints (pending reason)."
        ),
        evidence=(
            "`wait_s`; `overtaken_by` (count) and `overtakers` (ids, the first 20 in "
            "submission order); `overtakers_higher_priority`, `overtakers_median_request_gpus`, "
            "the job's `priority` and `request_gpus`; `tenant`, `tenant_held_gpus`, "
            "`tenant_deserved_gpus`; `cause`."
        ),
        references=(
            "https://volcano.sh/en/docs/plugins/ (priority, proportion, sla)",
            "https://slurm.schedmd.com/sched_config.html (backfill)",
        ),
    ),
    evaluate=evaluate,
    for_s=0,
    keep_firing_for_s=900,
)
