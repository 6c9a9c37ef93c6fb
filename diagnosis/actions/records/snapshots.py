"""Snapshot files: storing an imported ``gpuobs.snapshot/v1`` document or, with ``diagnose``,
replaying it through the stored cycle a scheduled cycle runs (:func:`record_cycle`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.core.validators import slug_re as SLUG
from django.db import transaction

from diagnosis.actions.records.cycles import record_cycle
from diagnosis.core import snapshot as snapshot_format
from diagnosis.models import (
    Cluster,
    ClusterCycle,
    Snapshot,
)


@dataclass(frozen=True)
class ImportedSnapshot:
    cluster: Cluster
    snapshot: Snapshot
    cluster_created: bool
    cycle: ClusterCycle | None = None

    def as_json(self) -> dict[str, Any]:
        """What :meth:`describe` says, for ``snapshot import --json``."""
        cycle = self.cycle
        written = ((cycle.steps or {}).get("findings_written") or {}) if cycle else {}
        return {
            "cluster": self.cluster.name,
            "cluster_created": self.cluster_created,
            "as_of": self.snapshot.as_of.isoformat(),
            "json_bytes": self.snapshot.json_bytes,
            "stored_bytes": self.snapshot.stored_bytes,
            "cycle": cycle.pk if cycle else None,
            "transitions": dict(written.get("transitions") or {}),
            "recommend_error": (cycle.recommendations or {}).get("error") if cycle else None,
        }

    def describe(self) -> str:
        text = (
            f"stored snapshot of cluster {self.cluster.name} as of "
            f"{self.snapshot.as_of.isoformat()} ({self.snapshot.json_bytes} bytes of JSON, "
            f"{self.snapshot.stored_bytes} stored)"
        )
        if self.cluster_created:
            text += f"; created cluster {self.cluster.name} (dry-run)"
        if self.cycle is not None:
            written = (self.cycle.steps or {}).get("findings_written") or {}
            moved = sorted((written.get("transitions") or {}).items())
            changes = ", ".join(f"{k}: {v}" for k, v in moved)
            text += f"; cycle {self.cycle.pk} recorded; findings: {changes or 'no change'}"
            error = (self.cycle.recommendations or {}).get("error")
            if error:
                text += f"; recommend step failed: {error}"
        return text


def import_snapshot(
    snap: snapshot_format.ClusterSnapshot,
    *,
    cluster_name: str | None = None,
    diagnose: bool = False,
) -> ImportedSnapshot:
    """Store a validated snapshot as its cluster's latest (creating the cluster, disabled for
    cycles and in dry-run, when it is new). With ``diagnose``, run exactly the stored cycle a
    scheduled one runs on it (:func:`diagnosis.actions.records.cycles.record_cycle`: the snapshot,
    the
    cycle row, findings, tenancy and rollups, incidents, the recommend step), with the file's
    own collection report (coverage, data age) deciding what is judged."""
    name = cluster_name or snap.cluster
    if not isinstance(name, str) or not SLUG.fullmatch(name) or len(name) > 63:
        # a cluster's name is a slug (its URLs): refused here, at the boundary (issue #12)
        raise snapshot_format.SnapshotError(
            [
                f"cluster: {str(name)[:80]!r} is not a cluster name (letters, digits, - and _, "
                "at most 63)"
            ]
        )
    with transaction.atomic():
        cluster, created = Cluster.objects.get_or_create(
            name=name, defaults={"enabled": False, "dry_run": True}
        )
        if not diagnose:
            document = snapshot_format.dump(snap)
            document["cluster"] = name
            return ImportedSnapshot(cluster, Snapshot.store(cluster, document), created)
    collection = snap.extra.get("collection")
    cycle = record_cycle(
        cluster, snap, collection=collection if isinstance(collection, Mapping) else None
    )
    # its row, not its bytes (36 MB at 131,072 GPUs: read only if asked for)
    rows = Snapshot.objects.filter(cluster=cluster, as_of=cycle.as_of)
    stored = rows.defer("document", "index_header", "index_body").latest("id")
    return ImportedSnapshot(cluster, stored, created, cycle)
