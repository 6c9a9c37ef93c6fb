"""``starvation``: a pending job that later jobs of its pool keep overtaking.

*Overtakers* of a pending job J are the jobs of J's pool (jobs with a null pool form one group)
submitted strictly after J that have started since J was submitted (``started >= J.submitted``),
whatever their state now.

Counting is vectorised per pool: job k overtakes every J with ``J.submitted < k.submitted`` and
``J.submitted <= k.started``, i.e. ``J.submitted <= u_k`` with ``u_k = k.submitted - 1 ns`` when
``k.started >= k.submitted`` (the normal case) and ``u_k = k.started`` otherwise. Sorting the
pool's started jobs by ``u`` makes each J's overtakers a suffix of that order, found with one
``searchsorted``. The cause of each firing job (how many overtakers had a higher priority, their
median request) is counted over that suffix from a table of per-value suffix counts, without a
loop over jobs, whenever the pool has at most :data:`MAX_DISTINCT` distinct priorities /
requests; beyond that it is counted job by job over the firing jobs only. The findings (~93,000
at 131,072 GPUs) are built in bulk: their evidence, texts and findings one pass each.
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

    Returns ``(distinct, counts)`` with ``counts.shape == (len(starts), len(distinct))``: rows
    of one table of suffix counts (a cumulative sum from the end), not a search per start.
    """
    distinct, inverse = np.unique(values, return_inverse=True)
    suffix = np.zeros((len(values) + 1, len(distinct)), dtype=np.int64)
    suffix[np.arange(len(values)), inverse.reshape(-1)] = 1
    suffix[:-1] = suffix[-2::-1].cumsum(axis=0)[::-1]
    return distinct, suffix[starts]


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


def _tenants(waiting: pd.DataFrame, queues: pd.DataFrame) -> list[str | None]:
    """Each waiting job's tenant: its own, else its queue's (None when neither is a name)."""
    own = waiting["tenant"].to_numpy(dtype=object)
    codes, names = pd.factorize(waiting["queue"].to_numpy(dtype=object))
    by_queue = queues["tenant"].reindex(names).to_numpy(dtype=object)
    of_queue = np.append(by_queue, None)[codes]  # code -1: no queue
    tenant = np.where(pd.notna(own), own, of_queue)
    tenant[pd.isna(tenant)] = None  # text columns: a name, or missing
    return tenant.tolist()


def _per_tenant(tenants: list[str | None], values: dict, missing: float) -> np.ndarray:
    """``values[tenant]`` of each tenant (``missing`` for None or a tenant not in values)."""
    codes, names = pd.factorize(np.array(tenants, dtype=object))
    by_name = np.array([values.get(str(name), missing) for name in names] + [missing], float)
    return by_name[codes]


def evaluate(
    snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
) -> Judgement:
    placement = facts.pending_placement
    waiting = placement[placement["wait_s"].to_numpy() >= thresholds["min_wait"]]
    if waiting.empty:
        return Judgement()
    jobs = snapshot.jobs
    started_mask = jobs["started"].notna().to_numpy()
    submitted_ns = _epoch_ns(jobs["submitted"])[started_mask]
    started_ns = _epoch_ns(jobs["started"])[started_mask]
    u = np.where(started_ns >= submitted_ns, submitted_ns - 1, started_ns)
    started_ids = jobs.index.to_numpy()[started_mask]
    started_priority = jobs["priority"].to_numpy()[started_mask]
    started_request = facts.job_requests.to_numpy()[started_mask]

    # pools as codes shared by the waiting and the started jobs (a null pool: _NO_POOL)
    pools = pd.concat([waiting["pool"], jobs["pool"][started_mask]], ignore_index=True)
    pool_codes, pool_names = pd.factorize(pools.astype(object).fillna(_NO_POOL).to_numpy())
    waiting_pool, started_pool = pool_codes[: len(waiting)], pool_codes[len(waiting) :]
    waiting_t = _epoch_ns(waiting["submitted"])
    waiting_priority = waiting["priority"].to_numpy()

    fired: list[tuple[np.ndarray, ...]] = []
    ordered: list[np.ndarray] = []
    offset = 0
    for code in sorted(np.unique(waiting_pool).tolist(), key=lambda c: pool_names[c]):
        rows = np.flatnonzero(waiting_pool == code)
        in_pool = np.flatnonzero(started_pool == code)
        order = in_pool[np.argsort(u[in_pool], kind="stable")]
        starts = np.searchsorted(u[order], waiting_t[rows], side="left")
        overtaken = len(order) - starts
        fire = overtaken >= thresholds["min_overtaken"]
        if not fire.any():
            continue
        rows, starts, overtaken = rows[fire], starts[fire], overtaken[fire]
        higher = _higher_priority(started_priority[order], starts, waiting_priority[rows])
        median = _median_request(started_request[order], starts)
        ends = np.minimum(starts + MAX_LISTED_OVERTAKERS, len(order))
        fired.append((rows, offset + starts, offset + ends, overtaken, higher, median))
        ordered.append(started_ids[order])
        offset += len(order)
    if not fired:
        return Judgement()
    rows, starts, ends, overtaken, higher, median = (
        np.concatenate(column) for column in zip(*fired, strict=True)
    )
    return Judgement(
        findings=tuple(
            _findings(
                snapshot,
                facts,
                waiting.iloc[rows],
                np.concatenate(ordered).tolist(),
                (starts, ends, overtaken, higher, median),
            )
        )
    )


def _findings(
    snapshot: ClusterSnapshot,
    facts: SnapshotFacts,
    firing: pd.DataFrame,
    overtakers: list[str],
    counts: tuple[np.ndarray, ...],
) -> list:
    """The findings of the firing jobs: ``counts`` holds, per job, where its overtakers listed
    start and end in ``overtakers``, how many overtook it, how many of those had a higher
    priority and their median request."""
    starts, ends, overtaken, higher, median = counts
    tenant = _tenants(firing, snapshot.queues)
    held_by, deserved_by = _tenant_share(snapshot, facts)
    held = _per_tenant(tenant, held_by, 0)
    deserved = _per_tenant(tenant, deserved_by, np.nan)
    own_request = firing["request"].to_numpy()
    short = ~np.isnan(deserved) & (held < deserved)
    cause = np.select(
        [
            (overtaken > 0) & (2 * higher >= overtaken),
            (overtaken > 0) & (own_request >= SIZE_FACTOR * median),
            short,
        ],
        ["priority", "size", "share"],
        default="order",
    ).tolist()
    wait = firing["wait_s"].to_numpy()
    pool = firing["pool"].to_numpy(dtype=object)
    pool[pd.isna(pool)] = None
    job_ids = firing.index.to_numpy().tolist()
    count = overtaken.tolist()
    held_gpus = held.astype(np.int64).tolist()
    evidences = [
        {
            "wait_s": shown,
            "pool": where,
            "priority": prio,
            "request_gpus": request,
            "overtaken_by": many,
            "overtakers": overtakers[first:last],
            "overtakers_higher_priority": high,
            "overtakers_median_request_gpus": med,
            "tenant": who,
            "tenant_held_gpus": None if who is None else got,
            "tenant_deserved_gpus": None if due != due else due,  # NaN: not set
            "cause": why,
        }
        for shown, where, prio, request, many, first, last, high, med, who, got, due, why in zip(
            _rounded_tenths(wait),
            pool.tolist(),
            firing["priority"].to_numpy().astype(np.int64).tolist(),
            own_request.astype(np.int64).tolist(),
            count,
            starts.tolist(),
            ends.tolist(),
            higher.astype(np.int64).tolist(),
            median.astype(float).tolist(),
            tenant,
            held_gpus,
            deserved.tolist(),
            cause,
            strict=True,
        )
    ]
    params = [
        {"job": job, "waited": waited, "count": many, "cause": why}
        for job, waited, many, why in zip(job_ids, _hours_of(wait), count, cause, strict=True)
    ]
    subjects = [f"job:{job}" for job in job_ids]
    return RULE.findings_of_texts(subjects, SUMMARY, params, evidences)


SUMMARY = gettext_noop(
    "Job %(job)s has waited %(waited)s while %(count)s later job(s) of its pool "
    "started (cause: %(cause)s)."
)


def _rounded_tenths(values: np.ndarray) -> list[float]:
    """``round(value, 1)`` of each value; a whole number is its own rounding, so only the
    others go through ``round``."""
    shown = values.tolist()
    for i in np.flatnonzero(values != np.floor(values)).tolist():
        shown[i] = round(shown[i], 1)
    return shown


def _hours_of(seconds: np.ndarray) -> list[Text]:
    """:func:`_hours` of each value, one phrase per value shown (:func:`_shown`)."""
    out = np.empty(len(seconds), dtype=object)
    hours = seconds >= 3600
    for mask, template, name, per in (
        (hours, gettext_noop("%(hours)s h"), "hours", 360),
        (~hours, gettext_noop("%(minutes)s min"), "minutes", 60),
    ):
        codes, distinct = pd.factorize(_shown(seconds[mask], per))
        phrases = np.empty(len(distinct), dtype=object)
        phrases[:] = [_phrase(template, name, value) for value in distinct.tolist()]
        out[np.flatnonzero(mask)] = phrases[codes]
    return out.tolist()


def _shown(seconds: np.ndarray, per: int) -> np.ndarray:
    """How ``seconds / (per * 10)`` shows with one decimal (``per`` 360: hours) or
    ``seconds / per`` with none (``per`` 60: minutes), as str(format(...)) shows it. A whole,
    positive number of seconds off a rounding tie shows its nearest step: the float division
    is off by far less than the half step to a tie, so formatting rounds the same way; the
    others (ties, fractions) are formatted."""
    shown = np.empty(len(seconds), dtype=object)
    whole = (seconds == np.floor(seconds)) & (seconds > 0) & (seconds < 2.0**53)
    steps = np.where(whole, seconds, 0).astype(np.int64)
    exact = whole & (steps % per != per // 2)
    step = (steps[exact] + per // 2) // per
    distinct, inverse = np.unique(step, return_inverse=True)
    if per == 360:
        labels = [f"{value // 10}.{value % 10}" for value in distinct.tolist()]
    else:
        labels = [str(value) for value in distinct.tolist()]
    shown[exact] = np.array(labels, dtype=object)[inverse.reshape(-1)]
    spec, unit = (".1f", 3600) if per == 360 else (".0f", 60)
    rest = np.flatnonzero(~exact)
    shown[rest] = [format(value, spec) for value in (seconds[rest] / unit).tolist()]
    return shown


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
