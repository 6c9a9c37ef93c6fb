"""Snapshot files: storing an imported ``gpuobs.snapshot/v1`` document and, optionally, its
findings."""

from __future__ import annotations

from dataclasses import dataclass

from django.core.validators import slug_re as SLUG
from django.db import transaction

from diagnosis.actions.findings import RecordedFindings, cluster_overrides, record_findings
from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.rules.engine import run_rules
from diagnosis.models import (
    Cluster,
    Snapshot,
)


@dataclass(frozen=True)
class ImportedSnapshot:
    cluster: Cluster
    snapshot: Snapshot
    cluster_created: bool
    findings: RecordedFindings | None = None

    def describe(self) -> str:
        text = (
            f"stored snapshot of cluster {self.cluster.name} as of "
            f"{self.snapshot.as_of.isoformat()} ({self.snapshot.json_bytes} bytes of JSON, "
            f"{self.snapshot.stored_bytes} stored)"
        )
        if self.cluster_created:
            text += f"; created cluster {self.cluster.name} (dry-run)"
        if self.findings is not None:
            changes = ", ".join(f"{k}: {v}" for k, v in sorted(self.findings.transitions.items()))
            text += f"; findings: {changes or 'no change'}"
        return text


def import_snapshot(
    snap: snapshot_format.ClusterSnapshot,
    *,
    cluster_name: str | None = None,
    diagnose: bool = False,
) -> ImportedSnapshot:
    """Store a validated snapshot as its cluster's latest (creating the cluster, disabled for
    cycles and in dry-run, when it is new) and, if asked, diagnose it and record the findings."""
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
        document = snapshot_format.dump(snap)
        document["cluster"] = name
        stored = Snapshot.store(cluster, document)
        findings = None
        if diagnose:
            diagnosis = run_rules(snap, cluster_overrides(cluster))
            findings = record_findings(cluster, diagnosis)
    return ImportedSnapshot(cluster, stored, created, findings)
