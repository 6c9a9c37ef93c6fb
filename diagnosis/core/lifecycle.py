"""The stored lifecycle of a finding across cycles, Prometheus-alert style (pure core).

``pending`` → ``firing`` once the rule has kept reporting the subject for the rule's ``for``;
``firing`` → ``resolved`` once the rule has not reported it for ``keep_firing_for``; a ``pending``
finding that the rule stops reporting is ``resolved`` at once (it never fired). A hit on a
``resolved`` finding opens a new episode. A rule that could not run (an error value) says nothing
about its findings: they keep their state, so missing data never resolves anything. The same
holds per subject: a subject a rule could not judge this cycle (:func:`silent_subjects`: its
GPUs sent no metrics) and did not report keeps its state -- neither hit nor resolved, and its
``keep_firing_for`` does not run out while it is silent; the first evaluation that can judge it
again decides.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import pandas as pd

from diagnosis.core.snapshot import GPU_KEY, ClusterSnapshot
from diagnosis.core.snapshot.frame import GPU_BASE_COLUMNS

PENDING = "pending"
FIRING = "firing"
RESOLVED = "resolved"


@dataclass(frozen=True)
class Tracked:
    """What is stored of one finding between cycles."""

    state: str
    active_since: datetime
    last_hit_at: datetime | None
    last_evaluated_at: datetime
    firing_since: datetime | None = None
    resolved_at: datetime | None = None


@dataclass(frozen=True)
class Step:
    tracked: Tracked
    from_state: str | None
    to_state: str | None

    @property
    def changed(self) -> bool:
        return self.to_state is not None


def advance(
    current: Tracked | None,
    *,
    hit: bool,
    as_of: datetime,
    for_s: float,
    keep_firing_for_s: float,
    judged: bool = True,
) -> Step | None:
    """The finding's next stored state after one evaluation at ``as_of``.

    None when nothing is to be stored: no hit for a finding that is not tracked, an evaluation
    at or before the last one (re-recording a snapshot changes nothing), or no hit on a subject
    the rule could not judge (``judged`` false): it keeps its state, as if this evaluation had
    not happened.
    """
    if current is not None and as_of <= current.last_evaluated_at:
        return None
    if not hit and not judged:
        return None
    if current is None or current.state == RESOLVED:
        if not hit:
            return None
        fires_now = for_s <= 0
        tracked = Tracked(
            state=FIRING if fires_now else PENDING,
            active_since=as_of,
            last_hit_at=as_of,
            last_evaluated_at=as_of,
            firing_since=as_of if fires_now else None,
        )
        return Step(tracked, current.state if current else None, tracked.state)

    if current.state == PENDING:
        if not hit:
            resolved = replace(current, state=RESOLVED, last_evaluated_at=as_of, resolved_at=as_of)
            return Step(resolved, PENDING, RESOLVED)
        tracked = replace(current, last_hit_at=as_of, last_evaluated_at=as_of)
        if as_of - current.active_since >= timedelta(seconds=for_s):
            return Step(replace(tracked, state=FIRING, firing_since=as_of), PENDING, FIRING)
        return Step(tracked, PENDING, None)

    # firing
    if hit:
        return Step(replace(current, last_hit_at=as_of, last_evaluated_at=as_of), FIRING, None)
    last_hit = current.last_hit_at or current.active_since
    if as_of - last_hit >= timedelta(seconds=keep_firing_for_s):
        resolved = replace(current, state=RESOLVED, last_evaluated_at=as_of, resolved_at=as_of)
        return Step(resolved, FIRING, RESOLVED)
    return Step(replace(current, last_evaluated_at=as_of), FIRING, None)


def silent_subjects(snapshot: ClusterSnapshot) -> frozenset[str]:
    """The subjects a rule that reads GPU metrics cannot judge in this snapshot: every GPU that
    sent no metric statistic (not reported, or reported without any), as ``gpu:<node>/<index>``;
    every node with such a GPU, as ``node:<name>``; every running job holding one, as
    ``job:<id>``. A rule's silence about them is no evidence that they are healthy."""
    gpus = snapshot.gpus
    metrics = [c for c in gpus.columns if c not in GPU_BASE_COLUMNS]
    silent = ~gpus["reported"].astype(bool)
    if metrics:
        silent |= gpus[metrics].isna().all(axis=1)
    else:
        silent[:] = True
    quiet = gpus.loc[silent.to_numpy(), GPU_KEY]
    if quiet.empty:
        return frozenset()
    pairs = zip(quiet["node"], quiet["index"], strict=True)
    subjects = {f"gpu:{node}/{int(index)}" for node, index in pairs}
    subjects |= {f"node:{node}" for node in quiet["node"].unique()}
    held = snapshot.allocations.merge(quiet, on=GPU_KEY, how="inner")["job"].unique()
    running = snapshot.jobs.index[snapshot.jobs["state"] == "running"]
    subjects |= {f"job:{job}" for job in pd.Index(held).intersection(running)}
    return frozenset(subjects)
