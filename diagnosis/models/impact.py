"""Replay outcomes kept for impact estimates (issue #17): the estimates run apart from the
cycle (``diagnosis.actions.workflow.impact``), and a replay of one snapshot under one setting is
run once.
"""

from __future__ import annotations

from django.db import models

from diagnosis.models.inventory import Cluster


class ReplayOutcome(models.Model):
    """The per-seed outcomes (``diagnosis.core.recommend.impact.SeedOutcome`` as JSON) of one
    snapshot replayed under one setting: ``key`` is the SHA-256 of the snapshot's digest and
    :func:`~diagnosis.core.recommend.impact.outcomes_key` (queue order, changes, seeds,
    horizon). The current setting's outcomes are shared by every estimate of the snapshot."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=64, unique=True)
    snapshot_digest = models.CharField(max_length=64, help_text="SHA-256 of the stored snapshot")
    outcomes = models.JSONField(default=list)
    cpu_s = models.FloatField(default=0, help_text="CPU seconds the replays took")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return f"replay {self.key[:12]} of {self.snapshot_digest[:12]}"
