"""The recommend step writes its new recommendations and their links to findings from column
values (issue #35: a COPY on PostgreSQL): the rows are those the ORM (``bulk_create`` of model
instances) writes -- every column, ids in the order created, the "superseded by #<pk>"
messages naming the new rows."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pandas as pd
import pytest

from bench.rules import build_document
from diagnosis import db_bulk
from diagnosis.actions.records import cycles
from diagnosis.actions.records.snapshots import import_snapshot
from diagnosis.core import snapshot as snapshot_format
from diagnosis.models import Cluster, Recommendation

pytestmark = pytest.mark.django_db

TAMPERED = 3  # open recommendations given another change after cycle 1: cycle 2 supersedes them


def two_cycles(name: str) -> Cluster:
    """A first cycle (every recommendation created), then one that supersedes a few of them."""
    snap = snapshot_format.load(build_document(256))
    cluster = import_snapshot(snap, cluster_name=name, diagnose=True).cycle.cluster
    first = Recommendation.objects.filter(cluster=cluster).order_by("id")[:TAMPERED]
    for i, pk in enumerate(first.values_list("pk", flat=True)):
        Recommendation.objects.filter(pk=pk).update(change={"to": f"something else {i}"})
    later = dataclasses.replace(snap, as_of=snap.as_of + pd.Timedelta(minutes=1))
    import_snapshot(later, cluster_name=name, diagnose=True)
    return cluster


def stored(cluster: Cluster) -> dict[str, Any]:
    """Every column of the cluster's recommendations and links, ids as ranks (in id order); the
    wall-clock times (the rows', an impact's queueing) only present."""
    recs = list(Recommendation.objects.filter(cluster=cluster).order_by("id").values())
    rank = {rec["id"]: i for i, rec in enumerate(recs)}
    for rec in recs:
        assert rec.pop("created_at") is not None
        assert rec.pop("updated_at") is not None
        rec["id"], rec["cluster_id"] = rank[rec["id"]], None
        if "queued_at" in rec["impact"]:
            rec["impact"]["queued_at"] = "queued"
        rec["rollback_of_id"] = rank.get(rec["rollback_of_id"])
        rec["status_message"] = re.sub(
            r"#(\d+)", lambda m: f"#r{rank[int(m[1])]}", rec["status_message"]
        )
    through = Recommendation.motivating_findings.through
    links = through.objects.filter(recommendation__cluster=cluster).order_by("id")
    return {
        "recommendations": recs,
        "links": [
            (rank[rec], rule, subject)
            for rec, rule, subject in links.values_list(
                "recommendation_id", "finding__rule_id", "finding__subject"
            )
        ],
    }


def test_the_new_rows_are_those_the_orm_writes(monkeypatch) -> None:
    copied = stored(two_cycles("copied"))
    monkeypatch.setattr(db_bulk, "_copies", lambda connection: False)
    through_the_orm = stored(two_cycles("orm"))

    kinds = {rec["kind"] for rec in copied["recommendations"]}
    superseded = [r for r in copied["recommendations"] if r["state"] == "superseded"]
    assert len(kinds) >= 2
    assert len(superseded) == TAMPERED
    assert copied["links"]
    assert copied == through_the_orm


def test_links_from_the_cycles_finding_ids_are_those_read_by_fingerprint(monkeypatch) -> None:
    from_the_cycle = stored(two_cycles("known"))
    step = cycles.record_recommendation_step  # without the cycle's ids: each one read back
    monkeypatch.setattr(
        cycles, "record_recommendation_step", lambda *args, **_kwargs: step(*args[:4])
    )
    read_back = stored(two_cycles("read"))

    assert from_the_cycle["links"]
    assert from_the_cycle == read_back
