"""Clusters set up by gpuobs itself (the Prometheus-backed demo cluster)."""

from __future__ import annotations

from django.utils import timezone

from diagnosis.models import (
    Cluster,
)


def create_prometheus_demo_cluster(
    name: str, *, prometheus_url: str, scenario: str = "seed", seed: int = 0
) -> Cluster:
    """A simulated cluster whose GPU metrics come from Prometheus (the demo with
    ``serve_exporter``): the scenario in real time (``speed`` 1, so the simulator's clock is
    Prometheus's), enabled for cycles, in dry-run. Its settings are checked as a cycle checks
    them (``ConfigError`` naming the bad key)."""

    cluster = Cluster(
        name=name,
        scheduler_kind="sim",
        scheduler_config={
            "scenario": scenario,
            "seed": seed,
            "speed": 1,
            "clock": "wall",
            "started_at": timezone.now().replace(microsecond=0).isoformat(),
            "changes": [],
        },
        metrics_kind="prometheus",
        metrics_config={"url": prometheus_url, "scrape_interval_s": 15},
        dry_run=True,
    )
    cluster.check_settings()
    cluster.save(force_insert=True)
    return cluster
