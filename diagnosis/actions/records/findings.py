"""Findings: per-cluster rule overrides, the findings lifecycle of one evaluation (upsert by
fingerprint, history rows on transitions) and their tenant tags.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import orjson
from django.db import connection, transaction
from django.utils import timezone

from diagnosis.core import lifecycle
from diagnosis.core.rules.base import Finding as RuleFinding
from diagnosis.core.rules.base import Rule, ThresholdError
from diagnosis.core.rules.engine import Diagnosis
from diagnosis.core.rules.registry import all_rules
from diagnosis.core.text import SUMMARY_TEXT_KEY
from diagnosis.db_bulk import insert_new_rows, insert_rows, upsert_rows
from diagnosis.db_timestamps import fast_rows
from diagnosis.models import (
    Cluster,
    Finding,
    FindingEvent,
    RuleClock,
    RuleOverride,
)


def cluster_overrides(cluster: Cluster) -> dict[str, dict[str, float | int]]:
    """The cluster's stored threshold overrides, rule id -> threshold -> value.

    Rows that no longer fit a rule (a rule or threshold removed since) are skipped: the rule then
    runs on its default, which is safer than not running at all.
    """
    rules = all_rules()
    overrides: dict[str, dict[str, float | int]] = {}
    for row in RuleOverride.objects.filter(cluster=cluster):
        rule = rules.get(row.rule_id)
        if rule is None:
            continue
        try:
            value = rule.threshold(row.threshold).parse(row.value)
        except ThresholdError:
            continue
        overrides.setdefault(row.rule_id, {})[row.threshold] = value
    return overrides


def set_rule_override(cluster: Cluster, rule_id: str, threshold: str, value: Any) -> RuleOverride:
    """Store a per-cluster threshold; a bad rule, threshold or value raises ValidationError."""
    row = RuleOverride.objects.filter(cluster=cluster, rule_id=rule_id, threshold=threshold).first()
    row = row or RuleOverride(cluster=cluster, rule_id=rule_id, threshold=threshold)
    row.value = value
    row.full_clean()
    row.save()
    return row


@dataclass
class RecordedFindings:
    """What one evaluation did to the stored findings: transitions, and what it wrote (rows
    written in full, rows written for their timestamps only -- those that stop following their
    rule's clock or start to -- and subjects held because not judged)."""

    created: int = 0
    transitions: dict[str, int] = field(default_factory=dict)
    skipped_rules: tuple[str, ...] = ()
    written: int = 0
    touched: int = 0
    held: int = 0
    events: int = 0
    written_by_rule: dict[str, int] = field(default_factory=dict)
    # (rule, subject) of each hit -> its row's pk and tenant once recorded: what the tenancy
    # step tags (tag_finding_tenants) without reading every open finding again
    hit_rows: dict[tuple[str, str], tuple[int, int | None]] = field(
        default_factory=dict, repr=False
    )

    def count(self, from_state: str | None, to_state: str) -> None:
        key = f"{from_state or 'new'}->{to_state}"
        self.transitions[key] = self.transitions.get(key, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "created": self.created,
            "written": self.written,
            "touched": self.touched,
            "held": self.held,
            "events": self.events,
            "transitions": dict(self.transitions),
            "written_by_rule": dict(self.written_by_rule),
        }


# The columns a cycle loads of a stored finding: everything the lifecycle needs and the digest
# of what was written, never the evidence itself.
_TRACKED_COLUMNS = (
    "pk",
    "rule_id",
    "subject",
    "state",
    "first_seen",
    "active_since",
    "last_hit_at",
    "last_seen",
    "firing_since",
    "resolved_at",
    "evidence_digest",
    "seen_on_clock",
    "hit_on_clock",
    "tenant_id",
)
# The lifecycle columns of a finding, written on every transition.
_LIFECYCLE_COLUMNS = [
    "state",
    "active_since",
    "written_last_hit_at",
    "written_last_seen",
    "firing_since",
    "resolved_at",
    "clock_id",
    "seen_on_clock",
    "hit_on_clock",
]
# What a finding whose state and evidence did not change may need written.
_TIMESTAMP_COLUMNS = [
    "written_last_seen",
    "written_last_hit_at",
    "clock",
    "seen_on_clock",
    "hit_on_clock",
]
# What an upsert writes of a finding; first_seen and the tenant are kept on conflict.
_WRITTEN_COLUMNS = [*_LIFECYCLE_COLUMNS, "severity", "summary", "evidence", "evidence_digest"]
# What an upsert inserts of a new finding (its tenant kept on conflict, and tagged afterwards).
_INSERTED_COLUMNS = (
    "cluster_id",
    "rule_id",
    "subject",
    "fingerprint",
    "first_seen",
    "tenant_id",
    *_WRITTEN_COLUMNS,
)
_EVENT_COLUMNS = ("finding_id", "time", "from_state", "to_state", "snapshot_as_of")
# Positions in a stored row as read (_TRACKED_COLUMNS): a cycle reads these of every row, and
# makes a _Stored only of the few whose lifecycle it advances.
_STATE, _LAST_SEEN, _DIGEST, _SEEN_ON_CLOCK, _HIT_ON_CLOCK, _TENANT = (
    _TRACKED_COLUMNS.index(column)
    for column in (
        "state",
        "last_seen",
        "evidence_digest",
        "seen_on_clock",
        "hit_on_clock",
        "tenant_id",
    )
)


@dataclass
class _Stored:
    """A stored finding as a cycle sees it (no evidence)."""

    pk: int
    rule_id: str
    subject: str
    state: str
    first_seen: datetime
    active_since: datetime | None
    last_hit_at: datetime | None
    last_seen: datetime
    firing_since: datetime | None
    resolved_at: datetime | None
    evidence_digest: str
    seen_on_clock: bool
    hit_on_clock: bool
    tenant_id: int | None

    def read_after(self, clock_at: datetime) -> tuple[datetime, datetime | None]:
        """Its ``last_seen`` and ``last_hit_at`` once its rule's clock is at ``clock_at``, if
        nothing writes it."""
        return (
            clock_at if self.seen_on_clock else self.last_seen,
            clock_at if self.hit_on_clock else self.last_hit_at,
        )

    def tracked(self) -> lifecycle.Tracked:
        return lifecycle.Tracked(
            state=self.state,
            active_since=self.active_since or self.first_seen,
            last_hit_at=self.last_hit_at,
            last_evaluated_at=self.last_seen,
            firing_since=self.firing_since,
            resolved_at=self.resolved_at,
        )


# Evidence durations measured back from the snapshot's time (a job's runtime, a wait, a hold):
# they grow every cycle while nothing else changes. The digest sees them in steps of 25%
# (:func:`_clock_steps`), so a finding whose judgement is unchanged is rewritten -- its summary
# and evidence brought up to date -- when such a duration has grown by a quarter, not every cycle.
CLOCK_KEYS = frozenset({"runtime_s", "wait_s", "hold_s"})
CLOCK_STEP = 1.25


_CLOCK_VALUE = re.compile(
    rb'("(?:' + "|".join(sorted(CLOCK_KEYS)).encode() + rb')":)(-?[0-9][0-9.eE+-]*)'
)


def evidence_digests(hits: list[RuleFinding]) -> list[str]:
    """A short digest of what each hit judged (severity and evidence, its clock durations in
    25% steps; the summary is derived from them): equal digests mean the stored row needs no
    rewrite. A summary given as a template counts once (not its values, derived like the
    summary): a row stored before summaries had one is rewritten once, to store it. The hits'
    texts are stepped together, a chunk of :data:`DIGEST_CHUNK` at a time (~103,000 hits at
    131,072 GPUs, #35): all at once wrote hundreds of MB of texts, most of it into memory
    shared with the snapshot's forked child, each page copied on its first write (168,000 page
    faults, the digests 1.7-2.6 s of CPU against 0.41-0.48 s in chunks); a chunk's few MB are
    written again by the next."""
    digests: list[str] = []
    for start in range(0, len(hits), DIGEST_CHUNK):
        digests += _chunk_digests(hits[start : start + DIGEST_CHUNK])
    return digests


DIGEST_CHUNK = 2048


def _chunk_digests(hits: list[RuleFinding]) -> list[str]:
    texts = [
        orjson.dumps(
            [hit.severity, hit.evidence, "text"]
            if hit.text is not None
            else [hit.severity, hit.evidence],
            default=str,
            option=_DIGEST_OPTIONS,
        )
        for hit in hits
    ]
    # compact JSON has no raw newline: one text a line; split: [text, key, value, text, ...]
    parts = _CLOCK_VALUE.split(b"\n".join(texts))
    parts[2::3] = _clock_steps(parts[2::3])
    blake2b = hashlib.blake2b
    return [blake2b(text, digest_size=16).hexdigest() for text in b"".join(parts).split(b"\n")]


def _clock_steps(values: list[bytes]) -> list[bytes]:
    """Each duration (seconds, as JSON wrote it) as its step: ``log_1.25(minutes + 1)``."""
    if not values:
        return []
    seconds = np.maximum(np.array(values, dtype=bytes).astype(np.float64), 1.0)
    steps = np.log(seconds / 60 + 1) / math.log(CLOCK_STEP)
    return [b"%d" % step for step in steps.astype(np.int64).tolist()]


# keys sorted, so equal evidence has one text; numpy values and non-string keys as JSON has them
_DIGEST_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def _lock_cluster_findings(cluster: Cluster) -> None:
    """Serialize writers of one cluster's findings (a cycle, an imported snapshot) for the
    transaction. PostgreSQL: one advisory lock, instead of row locks that would write every
    open finding; elsewhere the database serializes writers itself."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [FINDINGS_LOCK, cluster.pk])


FINDINGS_LOCK = 0x6F6273  # the advisory lock class of findings writers (any fixed int4)


def _stored_findings(
    cluster: Cluster, judged: set[str], hits: Mapping[tuple[str, str], RuleFinding]
) -> dict[tuple[str, str], tuple[Any, ...]]:
    """The open findings of the judged rules, and the resolved ones that this cycle hits again
    (found through the fingerprint index): never every resolved finding of the cluster. Each
    as read, the values of ``_TRACKED_COLUMNS``."""
    rows = Finding.objects.filter(cluster=cluster, rule_id__in=judged).exclude(
        state=lifecycle.RESOLVED
    )
    stored = {(r[1], r[2]): r for r in fast_rows(rows.values_list(*_TRACKED_COLUMNS))}
    missing = [Finding.fingerprint_of(cluster.pk, *key) for key in hits.keys() - stored.keys()]
    # a cluster's first cycle: none resolved to find either (103k fingerprints at 131,072 GPUs)
    if missing and (stored or Finding.objects.filter(cluster=cluster).exists()):
        again = Finding.objects.filter(fingerprint__in=missing).values_list(*_TRACKED_COLUMNS)
        stored |= {(r[1], r[2]): r for r in fast_rows(again)}
    return stored


@transaction.atomic
def record_findings(
    cluster: Cluster,
    diagnosis: Diagnosis,
    rules: Mapping[str, Rule] | None = None,
    tenant_of: Callable[[RuleFinding], int | None] | None = None,
) -> RecordedFindings:
    """Upsert a diagnosis's findings by fingerprint ``(cluster, rule, subject)`` and move each
    through its lifecycle (:mod:`diagnosis.core.lifecycle`); every transition is a FindingEvent row.

    Findings of a rule that failed in this diagnosis (an error value) are left as they are, and
    so are, per subject, the findings of a GPU-metrics rule whose subject sent no metrics
    (:func:`diagnosis.core.lifecycle.silent_subjects`) and was not reported.
    Recording the same snapshot twice changes nothing.

    What is written is proportional to what changed (issues #17, #35): a row is written in full
    (one ``INSERT ... ON CONFLICT`` for all of them) only when it is new or its state or evidence
    digest changed. ``last_seen``/``last_hit_at`` are not written each cycle: each judged rule's
    clock (:class:`~diagnosis.models.RuleClock`) moves to the snapshot's time, and a finding that
    follows it reads its time; only the findings that stop following it (not hit, not judged) or
    start to are written, in one statement; history rows only on transitions, in one statement.
    ``tenant_of``: the tenant id a new finding is inserted with (none without it: the tenancy
    step tags it, :func:`tag_finding_tenants`).
    """
    rules = rules if rules is not None else all_rules()
    as_of: datetime = diagnosis.snapshot.as_of.to_pydatetime()
    failed = {error.rule for error in diagnosis.errors}
    judged = {rule_id for rule_id in diagnosis.seconds if rule_id not in failed}
    result = RecordedFindings(skipped_rules=tuple(sorted(failed)))
    if not judged:
        return result
    silent = (
        lifecycle.silent_subjects(diagnosis.snapshot)
        if any(rules[r].reads_gpu_metrics for r in judged)
        else frozenset()
    )

    # rule id -> subjects not reported now whose open finding goes on as if reported (an Xid
    # out of the window on a GPU still unhealthy: Judgement.sustained); never opens one
    sustained = diagnosis.sustained

    overrides = cluster_overrides(cluster)  # a rule's keep_firing_for may be a threshold
    keep_firing_for = {
        rule_id: rules[rule_id].keep_firing_for(rules[rule_id].resolve(overrides.get(rule_id)))
        for rule_id in judged
    }
    _lock_cluster_findings(cluster)
    clocks = _rule_clocks(cluster, judged, as_of)
    hits = {(f.rule, f.subject): f for f in diagnosis.findings if f.rule in judged}
    stored = _stored_findings(cluster, judged, hits)
    # each judged rule's clock once this evaluation is recorded (an older snapshot moves none)
    clock_at = {rule_id: max(clock.evaluated_at, as_of) for rule_id, clock in clocks.items()}
    # the rules whose findings that follow their clock read as_of after this evaluation
    clocked = {rule_id for rule_id, at in clock_at.items() if at == as_of}
    written: list[dict[str, Any]] = []
    transitions: list[tuple[int, str, str]] = []  # (index in written, from, to)
    timestamps = _Timestamps(clocks, clock_at)
    changes: list[tuple[tuple[str, str], dict[str, Any], tuple[str, str] | None]] = []

    def advance(
        key: tuple[str, str],
        hit: RuleFinding | None,
        digest: str | None,
        row: _Stored | None,
        reported: bool,
    ) -> None:
        """Move one finding through its lifecycle, and note what it needs written."""
        rule_id, subject = key
        rule = rules[rule_id]
        step = lifecycle.advance(
            row.tracked() if row else None,
            hit=reported,
            as_of=as_of,
            for_s=rule.for_s,
            keep_firing_for_s=keep_firing_for[rule_id],
            judged=not (rule.reads_gpu_metrics and subject in silent),
        )
        if step is None:
            if row is not None:  # not evaluated: its timestamps stay, off the clock if it moves
                timestamps.keep(row, row.last_seen, row.last_hit_at)
                if not reported and as_of > row.last_seen:
                    result.held += 1
            return
        if row is not None and not step.changed and digest in (None, row.evidence_digest):
            timestamps.keep(row, step.tracked.last_evaluated_at, step.tracked.last_hit_at)
            return
        if row is None:
            result.created += 1
        transition = None
        if step.changed:
            result.count(step.from_state, step.to_state)
            transition = (step.from_state or "", step.to_state)
        finding = _written_row(cluster, key, row, step.tracked, hit, digest, as_of)
        finding["tenant_id"] = (
            row.tenant_id if row is not None else tenant_of(hit) if tenant_of and hit else None
        )
        timestamps.follow(finding)
        changes.append((key, finding, transition))
        result.written_by_rule[rule_id] = result.written_by_rule.get(rule_id, 0) + 1

    digests = evidence_digests(list(hits.values()))
    for (key, hit), digest in zip(hits.items(), digests, strict=True):  # changes sorted below
        raw = stored.get(key)
        if raw is None:
            advance(key, hit, digest, None, reported=True)
        elif raw[_STATE] == lifecycle.FIRING and as_of > raw[_LAST_SEEN] and digest == raw[_DIGEST]:
            # most rows of a big cluster: firing, hit again, its evidence unchanged --
            # lifecycle.advance would keep it firing and move only its timestamps, which a row
            # that follows its rule's clock reads from the clock
            if not (raw[_SEEN_ON_CLOCK] and raw[_HIT_ON_CLOCK] and key[0] in clocked):
                timestamps.keep(_Stored(*raw), as_of, as_of)
        else:
            advance(key, hit, digest, _Stored(*raw), reported=True)
    for key, raw in stored.items():  # the open findings not hit, sustained or not
        if key in hits or raw[_STATE] == lifecycle.RESOLVED:
            continue
        row = _Stored(*raw)
        reported = row.subject in sustained.get(row.rule_id, ())
        if reported and row.state == lifecycle.FIRING and as_of > row.last_seen:
            timestamps.keep(row, as_of, as_of)  # as above, with no evidence to compare
        else:
            advance(key, None, None, row, reported)
    changes.sort(key=lambda change: change[0])
    for _key, finding, transition in changes:
        if transition is not None:
            transitions.append((len(written), *transition))
        written.append(finding)
    _move_clocks(clocks, as_of)
    written_pks = _upsert(written)
    _write_timestamps(timestamps.rows)
    now = timezone.now()
    insert_rows(
        FindingEvent,
        _EVENT_COLUMNS,
        [
            (written_pks[i], now, from_state, to_state, as_of)
            for i, from_state, to_state in transitions
        ],
    )
    result.written, result.events = len(written), len(transitions)
    result.touched = len(timestamps.rows)
    result.hit_rows = {key: (raw[0], raw[_TENANT]) for key, raw in stored.items() if key in hits}
    result.hit_rows |= {
        finding_key: (pk, finding["tenant_id"])  # inserted
        for (finding_key, finding, _transition), pk in zip(changes, written_pks, strict=True)
        if finding_key not in stored
    }
    return result


def _rule_clocks(cluster: Cluster, judged: set[str], as_of: datetime) -> dict[str, RuleClock]:
    """The judged rules' clocks as they stand, those missing created at ``as_of`` (no finding
    follows a new clock yet)."""
    clocks = {c.rule_id: c for c in RuleClock.objects.filter(cluster=cluster, rule_id__in=judged)}
    missing = [
        RuleClock(cluster=cluster, rule_id=rule_id, evaluated_at=as_of)
        for rule_id in sorted(judged - clocks.keys())
    ]
    if missing:
        RuleClock.objects.bulk_create(missing)
        if any(clock.pk is None for clock in missing):  # a database that returns no ids
            missing = list(
                RuleClock.objects.filter(cluster=cluster, rule_id__in=judged - clocks.keys())
            )
        clocks |= {clock.rule_id: clock for clock in missing}
    return clocks


def _move_clocks(clocks: Mapping[str, RuleClock], as_of: datetime) -> None:
    """Move the clocks that ``as_of`` is later than to it: one statement, a row per rule."""
    later = [clock.pk for clock in clocks.values() if clock.evaluated_at < as_of]
    if later:
        RuleClock.objects.filter(pk__in=later).update(evaluated_at=as_of)


@dataclass
class _Timestamps:
    """The findings whose lifecycle did not change but whose timestamps must be written: those
    that would read wrong once their rule's clock moves (they were not evaluated, or not hit),
    and those that start following it. A finding that reads right needs no write."""

    clocks: Mapping[str, RuleClock]
    clock_at: Mapping[str, datetime]
    rows: list[tuple[int, datetime, datetime | None, int, bool, bool]] = field(default_factory=list)

    def keep(self, row: _Stored, last_seen: datetime, last_hit_at: datetime | None) -> None:
        """Make ``row`` read ``last_seen`` and ``last_hit_at`` after this evaluation."""
        clock_at = self.clock_at[row.rule_id]
        if row.read_after(clock_at) == (last_seen, last_hit_at):
            return
        seen_on_clock = row.state != lifecycle.RESOLVED and last_seen == clock_at
        hit_on_clock = seen_on_clock and last_hit_at == clock_at
        clock = self.clocks[row.rule_id].pk
        self.rows.append((row.pk, last_seen, last_hit_at, clock, seen_on_clock, hit_on_clock))

    def follow(self, finding: dict[str, Any]) -> None:
        """Let a finding about to be written follow its rule's clock where it reads the same."""
        clock_at = self.clock_at[finding["rule_id"]]
        seen_on_clock = (
            finding["state"] != lifecycle.RESOLVED and finding["written_last_seen"] == clock_at
        )
        finding["clock_id"] = self.clocks[finding["rule_id"]].pk
        finding["seen_on_clock"] = seen_on_clock
        finding["hit_on_clock"] = seen_on_clock and finding["written_last_hit_at"] == clock_at


def _written_row(
    cluster: Cluster,
    key: tuple[str, str],
    row: _Stored | None,
    tracked: lifecycle.Tracked,
    hit: RuleFinding | None,
    digest: str | None,
    as_of: datetime,
) -> dict[str, Any]:
    """The finding's columns as :func:`_upsert` writes them: a hit with its severity, summary
    and evidence (no pk: the upsert finds the row by fingerprint); a row the cycle did not hit
    (a transition only) with its pk, of which only the lifecycle columns are written. ``new``:
    no row of its fingerprint is stored (the cycle read every stored row of its hits)."""
    rule_id, subject = key
    finding: dict[str, Any] = {
        "pk": None,
        "new": row is None,
        "cluster_id": cluster.pk,
        "rule_id": rule_id,
        "subject": subject,
        "fingerprint": Finding.fingerprint_of(cluster.pk, rule_id, subject),
        "first_seen": row.first_seen if row else as_of,
        "state": tracked.state,
        "active_since": tracked.active_since,
        "written_last_hit_at": tracked.last_hit_at,
        "written_last_seen": tracked.last_evaluated_at,
        "firing_since": tracked.firing_since,
        "resolved_at": tracked.resolved_at,
    }
    if hit is not None:
        evidence = dict(hit.evidence)
        if hit.text is not None:  # the summary's template and values, for the reader's language
            evidence[SUMMARY_TEXT_KEY] = hit.text.as_json()
        finding |= {
            "severity": hit.severity,
            "summary": hit.summary,
            "evidence": evidence,
            "evidence_digest": digest or "",
        }
    else:
        finding["pk"] = row.pk if row else None
    return finding


def _upsert(findings: list[dict[str, Any]]) -> list[int]:
    """Write changed findings and return their pks, in order: the new ones in one COPY
    (:func:`diagnosis.db_bulk.insert_new_rows`), the hit ones whose evidence or state changed in
    one ``INSERT ... ON CONFLICT (fingerprint) DO UPDATE`` (:func:`~diagnosis.db_bulk.upsert_rows`),
    the not-hit ones (a transition only) in one UPDATE of the lifecycle columns."""
    new = [f for f in findings if f["new"]]
    changed = [f for f in findings if f["pk"] is None and not f["new"]]
    lifecycle_only = [f for f in findings if f["pk"] is not None]
    pk_of: dict[str, int] = {}
    if new:  # under the cluster's findings lock: no other writer stores them meanwhile
        ids = insert_new_rows(Finding, _INSERTED_COLUMNS, _values(new, _INSERTED_COLUMNS))
        pk_of = dict(zip((f["fingerprint"] for f in new), ids, strict=True))
    if changed:
        written = upsert_rows(
            Finding,
            _INSERTED_COLUMNS,
            _values(changed, _INSERTED_COLUMNS),
            unique=["fingerprint"],
            update=_WRITTEN_COLUMNS,
            returning=["fingerprint", "id"],
        )
        pk_of |= dict(written)
    if lifecycle_only:
        Finding.objects.bulk_update(
            [
                Finding(pk=f["pk"], **{column: f[column] for column in _LIFECYCLE_COLUMNS})
                for f in lifecycle_only
            ],
            _LIFECYCLE_COLUMNS,
        )
    return [f["pk"] if f["pk"] is not None else pk_of[f["fingerprint"]] for f in findings]


def _values(findings: list[dict[str, Any]], columns: tuple[str, ...]) -> list[tuple]:
    return [tuple(f[column] for column in columns) for f in findings]


def _write_timestamps(rows: list[tuple[int, datetime, datetime | None, int, bool, bool]]) -> None:
    """Write the timestamps (and whether they follow the clock) of findings whose state and
    evidence did not change: on PostgreSQL one statement, the values as arrays; no evidence sent
    or rewritten."""
    if not rows:
        return
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE diagnosis_finding AS f SET written_last_seen = v.seen, "
                "written_last_hit_at = v.hit, clock_id = v.clock, "
                "seen_on_clock = v.seen_on_clock, hit_on_clock = v.hit_on_clock "
                "FROM unnest(%s::bigint[], %s::timestamptz[], %s::timestamptz[], %s::bigint[], "
                "%s::boolean[], %s::boolean[]) AS v(id, seen, hit, clock, seen_on_clock, "
                "hit_on_clock) WHERE f.id = v.id",
                [list(column) for column in zip(*rows, strict=True)],
            )
        return
    findings = [
        Finding(
            pk=pk,
            written_last_seen=seen,
            written_last_hit_at=hit,
            clock_id=clock,
            seen_on_clock=seen_on_clock,
            hit_on_clock=hit_on_clock,
        )
        for pk, seen, hit, clock, seen_on_clock, hit_on_clock in rows
    ]
    Finding.objects.bulk_update(findings, _TIMESTAMP_COLUMNS, batch_size=500)


def tag_finding_tenants(
    cluster: Cluster,
    diagnosis: Diagnosis,
    tenants_of: Callable[[list[RuleFinding]], list[int | None]],
    hit_rows: Mapping[tuple[str, str], tuple[int, int | None]] | None = None,
) -> int:
    """Set ``Finding.tenant`` of every finding this diagnosis reported to the one tenant it
    concerns now (``tenants_of``: ``CycleTenants.finding_tenant_ids`` of the tenancy step, by
    :func:`diagnosis.core.fairness.finding_tenant`), or to none when it concerns none or
    several. A finding's evidence is rewritten each cycle (an Xid's GPU gets another
    tenant's job), so its tenant is recomputed from the same evidence each cycle, never kept
    from when it was first seen (issue #12). Only findings whose tenant changes are written: one
    UPDATE per new tenant. Returns how many were re-tagged.

    ``hit_rows``: each hit's row and its tenant as :func:`record_findings` just recorded them
    (``RecordedFindings.hit_rows``); the hits it lacks are read from the database."""

    hits = {(hit.rule, hit.subject): hit for hit in diagnosis.findings}
    if not hits:
        return 0
    known = hit_rows or {}
    unknown = hits.keys() - known.keys()
    # a finding not reported this cycle keeps its evidence, and so its tenant
    rows = [*_rows_of(cluster, unknown), *((k, row) for k, row in known.items() if k in hits)]
    wanted = tenants_of([hits[key] for key, _row in rows])
    by_tenant: dict[int | None, list[int]] = {}
    for (_key, (pk, current)), tenant_id in zip(rows, wanted, strict=True):
        if tenant_id != current:
            by_tenant.setdefault(tenant_id, []).append(pk)
    return sum(
        Finding.objects.filter(pk__in=pks).update(tenant_id=tid) for tid, pks in by_tenant.items()
    )


def _rows_of(
    cluster: Cluster, keys: set[tuple[str, str]]
) -> Iterator[tuple[tuple[str, str], tuple[int, int | None]]]:
    """The open rows of these (rule, subject) keys, with their tenants."""
    if not keys:
        return
    # a hit's finding is open once the cycle recorded it: resolved rows are never read
    rows = (
        Finding.objects.filter(cluster=cluster, rule_id__in={rule for rule, _ in keys})
        .exclude(state=lifecycle.RESOLVED)
        .values_list("pk", "rule_id", "subject", "tenant_id")
    )
    for pk, rule_id, subject, tenant in rows.iterator(chunk_size=2000):
        if (rule_id, subject) in keys:
            yield (rule_id, subject), (pk, tenant)
