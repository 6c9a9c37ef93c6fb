"""The source of clusters without metrics (``metrics_kind`` ``none``): the snapshot is the
scheduler adapter's state alone.

Nodes, queues, jobs (with their GPU allocations) and the events since the cluster's cursor come
from the adapter (``scheduler_kind``: ``slurm``, ``volcano``, ``kueue``, ``sim``...); every
node's GPUs are present in the snapshot, with no metrics, so allocation, fragmentation, gang and
starvation rules judge while the metric rules say they cannot. Its report is only its name.
"""

from __future__ import annotations

from diagnosis.edge.config import ConfigSpec
from diagnosis.edge.sources import Measurement, MetricsRequest

CONFIG = ConfigSpec((), what="metrics_config")  # no settings: the scheduler's are all it reads


def measure(request: MetricsRequest) -> Measurement:
    """The GPUs the scheduler knows, as it knows them."""
    return Measurement(gpus=[dict(g) for g in request.gpus], collection={"source": "none"})
