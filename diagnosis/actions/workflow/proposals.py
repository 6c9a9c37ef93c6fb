"""The cycle's recommend step: store the generators' drafts as recommendations (one open per
target, by construction: drafts for one target are merged first), keep one recommendation per
change while its cause recurs within the hold-off window, expire those whose findings stayed
resolved, lapse stale approvals, and verify applied ones.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from diagnosis.actions.workflow.base import (
    NO_APPROVAL,
    OPEN_STATES,
    REJECTION_QUIET,
    SYSTEM_CYCLE,
    save_fields,
    update_fields,
)
from diagnosis.actions.workflow.impact import enqueue_impact_estimates
from diagnosis.actions.workflow.review import expire, lapse_reason
from diagnosis.actions.workflow.verification import verify_applied
from diagnosis.choices import FindingState, RecommendationKind, RecommendationState
from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.recommend.base import RecommendSettings, plain
from diagnosis.core.recommend.engine import recommend
from diagnosis.core.recommend.merge import change_key, one_per_target
from diagnosis.db_bulk import insert_new_rows
from diagnosis.edge.schedulers.targets import target_name
from diagnosis.models import (
    Cluster,
    Finding,
    Recommendation,
)

State = RecommendationState


def record_recommendations(
    cluster: Cluster,
    snap: snapshot_format.ClusterSnapshot,
    diagnosis: Any,
    accounting: Mapping[str, Any],
    recommend_settings: RecommendSettings | None = None,
    *,
    finding_ids: Mapping[tuple[str, str], int] | None = None,
) -> dict[str, Any]:
    """The cycle's recommend step, after its findings are recorded: lapse old approvals, verify
    applied changes against this cycle, and upsert the generators' proposals.

    One open recommendation per ``(cluster, kind, target)`` holds by construction: the drafts
    for one target are merged first (:func:`one_per_target`). The same change keeps the open
    recommendation and its impact (not simulated again). A different change supersedes it --
    unless someone requested or approved it and the cycle proposed it within the hold-off
    window (``GPUOBS_RECOMMENDATION_HOLD_OFF_SECONDS``): then it is held. A change superseded
    within the window that is proposed again comes back under its id. A proposal nobody
    approved whose findings have all resolved, not proposed again for the hold-off window,
    expires. Returns what it did, with its timings (kept on the cycle). ``finding_ids``: the
    stored finding of each of the diagnosis's hits ``(rule, subject)``, as the cycle recorded
    them (its new recommendations link those without reading them again)."""

    started = time.perf_counter()
    stats: dict[str, Any] = {
        "proposed": 0,
        "kept": 0,
        "held": 0,
        "revived": 0,
        "superseded": 0,
        "expired": 0,
        "merged": 0,
    }
    as_of = snap.as_of.to_pydatetime()
    recent = as_of - hold_off()
    open_changes = {
        (kind, target): change
        for kind, target, change in Recommendation.objects.filter(
            cluster=cluster, state__in=OPEN_STATES
        ).values_list("kind", "target", "change")
    }
    rejected = recently_rejected(cluster)

    def keep_impact(draft: Any) -> str | None:
        change = plain_change(draft.change)
        if open_changes.get((draft.kind, draft.target)) == change:
            return "kept from the open recommendation with the same change"
        if (draft.kind, draft.target, change_key(change)) in rejected:
            return "rejected recently: not proposed again"
        return None

    # No replay in the cycle (issue #17): drafts to simulate are stored with a pending impact
    # and estimated on the ``impact`` queue once this step commits
    # (diagnosis/actions/workflow/impact.py).
    run = recommend(snap, diagnosis, recommend_settings, skip_impact=keep_impact, defer_impact=True)
    proposals = one_per_target(run.recommendations)
    stats["merged"] = len(run.recommendations) - len(proposals)
    stats["generators_s"] = round(run.seconds.get("generators", 0.0), 3)
    stats["impact_s"] = round(run.seconds.get("impact", 0.0), 3)
    stats["errors"] = [e.as_dict() for e in run.errors]
    proposed_keys = {(r.kind, r.target) for r in proposals}
    with transaction.atomic():  # the replays ran before: no row is locked while they run
        stats["lapsed"] = lapse_approvals(cluster)
        stats.update(verify_applied(cluster, snap, diagnosis, accounting))
        existing = {
            (r.kind, r.target): r
            for r in Recommendation.objects.select_for_update(of=("self",))
            .filter(cluster=cluster, state__in=OPEN_STATES)
            .only(*READ_BY_THE_STEP)
            .annotate(stored_on_clock=F("proposed_on_clock"))
        }
        clock = _RecommendClock(cluster, as_of)
        superseded = revivable(cluster, recent)
        findings = _MotivatingFindings(cluster, finding_ids or {})
        kept: list[Recommendation] = []  # proposed again unchanged: they follow the clock
        created = _NewRecommendations(cluster, as_of)
        replaced: list[tuple[Recommendation, Recommendation | _New, str]] = []  # (old, new, change)
        stats["quiet"] = 0
        for proposal in proposals:
            change = plain_change(proposal.change)  # the whole stored fields only if written
            key = (proposal.kind, proposal.target)
            if (*key, change_key(change)) in rejected:
                stats["quiet"] += 1  # someone said no to exactly this change lately
                continue
            old = existing.get(key)
            if old is not None and (old.state == State.APPLYING or old.rollback_of_id):
                stats["kept"] += 1
                continue
            if old is not None and old.change == change:
                old.last_proposed_as_of = as_of
                kept.append(old)
                stats["kept"] += 1
                continue
            if old is not None and change_key(old.change) == change_key(change):
                # the same write for another cause: one identity, the latest cause's text and
                # estimate (docs/recommendations.md, "The cycle's recommend step")
                fields = proposal.stored_fields()
                update_fields(
                    old, change=fields["change"], impact=fields["impact"], last_proposed_as_of=as_of
                )
                findings.link(old, proposal.finding_keys())
                stats["kept"] += 1
                continue
            fields = proposal.stored_fields()
            if old is not None and is_held(old, recent):
                stats["held"] += 1  # a person asked for it: a wobble does not replace it
                continue
            if old is not None:  # leaves the open states first: one open per target
                old.state = State.SUPERSEDED
                save_fields(old, "state")
                stats["superseded"] += 1
            new = superseded.pop((*key, change_key(fields["change"])), None)
            if new is not None:
                revive(new, as_of)
                stats["revived"] += 1
            else:
                new = created.add(fields)
                findings.link(new, proposal.finding_keys())
                stats["proposed"] += 1
            if old is not None:
                replaced.append((old, new, describe_change(fields["change"])))
        created.save()  # their pks set, for the messages and links
        for old, new, described in replaced:
            old.status_message = f"superseded by #{new.pk}: {described}"
            save_fields(old, "status_message")
        findings.save()
        clock.proposed_again(kept)
        stats["expired"] = expire_resolved(cluster, proposed_keys, snap, recent)
    stats["impact_queued"] = enqueue_impact_estimates(cluster)
    stats["seconds"] = round(time.perf_counter() - started, 3)
    return stats


# What the recommend step reads of an open recommendation (is it the same change, held, being
# applied, a rollback): only these are loaded for the ~1,000 open ones of a 16,384-GPU cluster,
# ~8,000 at 131,072 (issue #17); the fields it writes need not be loaded to be saved.
READ_BY_THE_STEP = (
    "kind",
    "target",
    "state",
    "change",
    "rollback_of",
    "requested_by",
    "proposed_as_of",
    "written_last_proposed_as_of",
    "proposed_on_clock",
)


class _RecommendClock:
    """The cluster's recommend clock (``Cluster.recommend_clock_at``, issue #35): a
    recommendation proposed again unchanged in every step since it was written follows it
    (``proposed_on_clock``) and reads its time as ``last_proposed_as_of``, so a steady step
    writes no recommendation row -- ~8,000 were rewritten each cycle at 131,072 GPUs. Only the
    ones that start following it, or stop (not proposed again, superseded, changed), are
    written; the clock moves last, once those that stop read its old time as their own."""

    def __init__(self, cluster: Cluster, as_of: datetime) -> None:
        self.cluster = cluster
        self.as_of = as_of
        self.at = (
            Cluster.objects.filter(pk=cluster.pk).values_list("recommend_clock_at", flat=True).get()
        )

    def proposed_again(self, recs: list[Recommendation]) -> None:
        """Record that the step proposed ``recs`` again unchanged (loaded with
        ``stored_on_clock``): their rows are written only when they start following the clock;
        an older snapshot than the clock's moves nothing and writes their time as their own."""
        if self.at is not None and self.as_of < self.at:
            Recommendation.objects.filter(pk__in=[rec.pk for rec in recs]).update(
                written_last_proposed_as_of=self.as_of, proposed_on_clock=False
            )
            return
        self._stop_following(exclude={rec.pk for rec in recs})
        joining = [rec.pk for rec in recs if not rec.stored_on_clock]
        if joining:
            Recommendation.objects.filter(pk__in=joining).update(proposed_on_clock=True)
        if self.at != self.as_of:
            Cluster.objects.filter(pk=self.cluster.pk).update(recommend_clock_at=self.as_of)

    def _stop_following(self, exclude: set[int]) -> None:
        """The ones following the clock that this step did not propose again keep its current
        time (the last step that proposed them) as their own: one statement, no row else."""
        following = Recommendation.objects.filter(cluster=self.cluster, proposed_on_clock=True)
        leaving = [pk for pk in following.values_list("pk", flat=True) if pk not in exclude]
        if leaving:
            Recommendation.objects.filter(pk__in=leaving).update(
                written_last_proposed_as_of=self.at, proposed_on_clock=False
            )


class _New:
    """A recommendation the step creates: its row is written with the others' at the end of the
    step (:class:`_NewRecommendations`), which sets its ``pk``."""

    __slots__ = ("pk",)

    def __init__(self) -> None:
        self.pk: int | None = None


class _NewRecommendations:
    """The step's new recommendations, written in one go at its end from their column values --
    no model instance each: a first cycle creates ~8,000 at 131,072 GPUs (issue #35). Their rows
    are those ``Recommendation(cluster=..., state=proposed, proposed_as_of=as_of,
    last_proposed_as_of=as_of, **fields).save()`` writes; ids ascend in the order added."""

    COLUMNS = (
        "cluster_id",
        "kind",
        "target",
        "change",
        "impact",
        "state",
        "proposed_as_of",
        "written_last_proposed_as_of",
        "proposed_on_clock",
        "created_at",
        "updated_at",
    )

    def __init__(self, cluster: Cluster, as_of: datetime) -> None:
        self.cluster = cluster
        self.as_of = as_of
        self._fields: list[dict[str, Any]] = []
        self._new: list[_New] = []

    def add(self, fields: Mapping[str, Any]) -> _New:
        """A new recommendation of the stored ``fields`` (kind, target, change, impact)."""
        new = _New()
        self._fields.append(fields)
        self._new.append(new)
        return new

    def save(self) -> None:
        now = timezone.now()
        cluster_id, as_of = self.cluster.pk, self.as_of
        rows = [
            (
                *(cluster_id, f["kind"], f["target"], f["change"], f["impact"]),
                *(State.PROPOSED, as_of, as_of, False, now, now),
            )
            for f in self._fields
        ]
        for new, pk in zip(
            self._new, insert_new_rows(Recommendation, self.COLUMNS, rows), strict=True
        ):
            new.pk = pk
        self._fields, self._new = [], []


class _MotivatingFindings:
    """The links of the cycle's new recommendations to their motivating stored findings,
    written at the end of the step: the findings' ids read in one query (through the
    fingerprint index) for all the new recommendations, the links in one INSERT -- a steady
    cycle creates none, a first one thousands (issue #17), copied when every one links a new
    recommendation (none of them can be there already; issue #35)."""

    def __init__(self, cluster: Cluster, known: Mapping[tuple[str, str], int]) -> None:
        self.cluster = cluster
        self._known = known  # the cycle's hits' stored findings: not read again
        self._wanted: list[tuple[Recommendation | _New, list[tuple[str, str]]]] = []

    def link(self, rec: Recommendation | _New, keys: list[tuple[str, str]]) -> None:
        if keys:
            self._wanted.append((rec, keys))

    def save(self) -> None:
        if not self._wanted:
            return
        cluster_id = self.cluster.pk
        fingerprint_of = Finding.fingerprint_of
        known = self._known
        fingerprints = {
            fingerprint_of(cluster_id, rule, subject)
            for _, keys in self._wanted
            for rule, subject in keys
            if (rule, subject) not in known
        }
        ids = dict(known)
        if fingerprints:
            rows = Finding.objects.filter(
                cluster=self.cluster, fingerprint__in=fingerprints
            ).values_list("rule_id", "subject", "pk")
            ids |= {(rule, subject): pk for rule, subject, pk in rows}
        links = [
            (rec.pk, ids[key])
            for rec, keys in self._wanted
            for key in dict.fromkeys(keys)
            if key in ids
        ]
        through = Recommendation.motivating_findings.through
        if all(isinstance(rec, _New) for rec, _ in self._wanted):
            insert_new_rows(through, ("recommendation_id", "finding_id"), links)
        else:
            through.objects.bulk_create(
                [through(recommendation_id=rec, finding_id=finding) for rec, finding in links],
                ignore_conflicts=True,
            )
        self._wanted = []


def hold_off() -> timedelta:
    """How long (snapshot time) a recommendation outlives a cycle that did not propose it."""
    return timedelta(seconds=settings.GPUOBS_RECOMMENDATION_HOLD_OFF_SECONDS)


def proposed_since(rec: Recommendation, since: datetime) -> bool:
    """Whether a cycle proposed ``rec`` at or after ``since`` (snapshot time)."""
    last = rec.last_proposed_as_of or rec.proposed_as_of
    return last is not None and last >= since


def is_held(rec: Recommendation, since: datetime) -> bool:
    """An open change someone requested or approved, proposed at or after ``since``: a
    different change the cycle computes now does not replace it (its cause is still there)."""
    asked = rec.requested_by_id is not None or rec.state == State.APPROVED
    return asked and proposed_since(rec, since)


def revivable(cluster: Cluster, since: datetime) -> dict[tuple[str, str, str], Recommendation]:
    """Proposals the cycle superseded at or after ``since``, by ``(kind, target, change)``: the
    same change proposed again takes its old id back (one recommendation per change)."""
    rows = Recommendation.objects.select_for_update().filter(
        cluster=cluster,
        state=State.SUPERSEDED,
        rollback_of__isnull=True,
        last_proposed_as_of__gte=since,
    )
    return {(r.kind, r.target, change_key(r.change)): r for r in rows.order_by("id")}


def revive(rec: Recommendation, as_of: datetime) -> None:
    """A superseded proposal back to ``proposed`` (its request kept; an approval is not)."""
    update_fields(
        rec,
        state=State.PROPOSED,
        **NO_APPROVAL,
        last_proposed_as_of=as_of,
        status_message="proposed again",
    )


def recently_rejected(cluster: Cluster) -> set[tuple[str, str, str]]:
    """``(kind, target, change)`` of the changes people rejected in the last
    :data:`REJECTION_QUIET`: the cycle does not propose exactly those again meanwhile."""
    since = timezone.now() - REJECTION_QUIET
    rows = Recommendation.objects.filter(
        cluster=cluster, state=State.REJECTED, updated_at__gte=since
    ).values_list("kind", "target", "change")
    return {(kind, target, change_key(change)) for kind, target, change in rows}


def describe_change(change: Mapping[str, Any]) -> str:
    return f"{change.get('from')!r} → {change.get('to')!r}" if "to" in change else "new advice"


def plain_change(change: Mapping[str, Any]) -> dict[str, Any]:

    return plain(dict(change))


def lapse_approvals(cluster: Cluster) -> int:
    now = timezone.now()
    lapsed = 0
    with transaction.atomic():
        for rec in Recommendation.objects.select_for_update().filter(
            cluster=cluster, state=State.APPROVED, expires_at__lte=now
        ):
            expire(rec, SYSTEM_CYCLE, lapse_reason(rec))
            lapsed += 1
    return lapsed


def expire_resolved(
    cluster: Cluster,
    proposed_keys: set[tuple[str, str]],
    snap: snapshot_format.ClusterSnapshot,
    since: datetime,
) -> int:
    """Expire proposals the cycle no longer makes: a drain once the node is drained or down (an
    Xid leaves the rule's window long before the GPU is fixed, so its finding resolving says
    nothing); any other once all its motivating findings have resolved and no cycle proposed it
    at or after ``since`` (the hold-off: a flapping finding keeps its recommendation)."""
    proposals = Recommendation.objects.filter(
        cluster=cluster, state=State.PROPOSED, rollback_of__isnull=True
    )
    not_proposed = [
        pk
        for pk, kind, target in proposals.values_list("pk", "kind", "target")
        if (kind, target) not in proposed_keys
    ]  # most are proposed again: only the others are read whole (and locked)
    stale = proposals.select_for_update().filter(pk__in=not_proposed)
    nodes = snap.nodes
    expired = 0
    for rec in stale:
        if (rec.kind, rec.target) in proposed_keys:
            continue
        if rec.kind == RecommendationKind.DRAIN_NODE:
            node = target_name({"kind": rec.kind, "target": rec.target})
            state = str(nodes.at[node, "state"]) if node in nodes.index else None
            if state in ("drained", "down"):
                expire(rec, SYSTEM_CYCLE, f"node {node} is {state} already")
                expired += 1
            continue
        if proposed_since(rec, since):
            continue
        if rec.motivating_findings.exclude(state=FindingState.RESOLVED).exists():
            continue
        expire(rec, SYSTEM_CYCLE, "its findings resolved and the cycle no longer proposes it")
        expired += 1
    return expired
