"""Start-time forecasts of pending jobs (issue #33, docs/forecasts.md): one row per pending job,
the whole cluster's rows replaced at once by each forecast
(``diagnosis.actions.records.forecasts``)."""

from __future__ import annotations

from django.db import models

from diagnosis.models.fields import optional_ref
from diagnosis.models.findings import Finding
from diagnosis.models.inventory import Cluster, Job
from diagnosis.models.recommendations import Recommendation


class JobForecast(models.Model):
    """When one pending job is predicted to start, and what blocks it. Times are absolute;
    ``start_at`` (the median over seeds) is null when half the seeds or more did not start it
    within the horizon, ``low_at`` / ``high_at`` (the earliest and the latest seed) likewise."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="forecasts")
    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="forecast")
    as_of = models.DateTimeField(help_text="Snapshot time the forecast was made from.")
    start_at = models.DateTimeField(null=True, blank=True)
    low_at = models.DateTimeField(null=True, blank=True)
    high_at = models.DateTimeField(null=True, blank=True)
    horizon_s = models.FloatField()
    seeds = models.PositiveSmallIntegerField()
    started_in = models.PositiveSmallIntegerField(help_text="Seeds in which it started.")
    cause = models.CharField(max_length=32)
    figures = models.JSONField(default=dict, blank=True)
    finding = optional_ref(Finding)
    recommendation = optional_ref(Recommendation)

    class Meta:
        indexes = [models.Index(fields=["cluster", "start_at"], name="forecast_cluster_start")]

    def __str__(self) -> str:
        return f"forecast of {self.job_id} as of {self.as_of.isoformat()}"

    @property
    def predicted_wait_s(self) -> float | None:
        """Seconds from submission to the predicted start."""
        if self.start_at is None:
            return None
        return (self.start_at - self.job.submitted_at).total_seconds()
