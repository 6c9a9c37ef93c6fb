"""Per-node GPU topology uploaded from ``nvidia-smi topo -m`` (``POST
/api/v1/clusters/<c>/nodes/<n>/topology``, e.g. from the shipped DaemonSet or Slurm prolog),
merged into every snapshot of the cluster by :mod:`diagnosis.actions.records.topology`."""

from __future__ import annotations

from django.db import models

from diagnosis.models.fields import user_ref
from diagnosis.models.inventory import Cluster


class NodeTopology(models.Model):
    """The latest topology a node reported: its NVLink domains and NUMA node per GPU, parsed
    from ``raw_text`` (kept for audit; at most the parser's size limit)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="topologies")
    node = models.CharField(max_length=253)
    gpus = models.PositiveSmallIntegerField()
    nvlink_domains = models.JSONField(default=list)
    numa = models.JSONField(null=True, blank=True)
    raw_text = models.TextField()
    uploaded_at = models.DateTimeField()
    uploaded_by = user_ref()

    class Meta:
        ordering = ["cluster", "node"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "node"], name="topology_unique_per_node")
        ]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.node}: {self.gpus} GPUs"

    def snapshot_topology(self) -> dict:
        """The snapshot's ``nodes[].topology`` object."""
        topology: dict = {"nvlink_domains": [list(d) for d in self.nvlink_domains]}
        if self.numa is not None:
            topology["numa"] = list(self.numa)
        return topology
