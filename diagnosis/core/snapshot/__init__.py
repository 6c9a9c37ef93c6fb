"""The cluster snapshot: load, validate and dump ``gpuobs.snapshot/v1`` (docs/snapshot.md).

A :class:`ClusterSnapshot` is the frozen boundary object between the integrations and the pure
core. It holds pandas frames with fixed columns:

``nodes``        one row per node (index: name): pool, gpu_model, gpus, state, cpu_util
``gpus``         one row per allocatable GPU unit: every physical GPU of every node
                 (``nodes[].gpus`` of them), whether or not ``gpus[]`` reported it, except that a
                 GPU reported as MIG instances is one row per instance (key :data:`GPU_KEY`:
                 node, index, mig_instance, -1 for a whole GPU): pool, uuid, health, reported,
                 nvlink_domain and numa (-1: unknown), nvlink_clique, mig_profile,
                 mig_parent_uuid, capacity (compute fraction of the GPU; 1 when whole),
                 index_guessed and flattened metric statistics ``<metric>_<stat>`` (NaN: absent)
``xids``         one row per reported Xid: node, index, code, time
``jobs``         one row per job (index: id), with ``tp`` and ``bound_pods`` flattened
``allocations``  one row per allocated GPU unit: job, pod, order, node, index, mig_instance,
                 share (fraction of the unit held; 1 by default)
``queues``       one row per queue (index: name)
``events``       one row per scheduler event

The package's modules: ``frame`` (the snapshot, its columns and times), ``checks`` (validation
helpers and :class:`SnapshotError`), ``load`` and ``dump``. The words of the format (its id,
states, kinds) come from :mod:`diagnosis.core.vocabulary`. It imports neither Django nor HTTP.
"""

from diagnosis.core.snapshot.checks import SnapshotError
from diagnosis.core.snapshot.dump import dump, dump_jobs_on, dumps
from diagnosis.core.snapshot.frame import (
    GPU_KEY,
    GPU_METRICS,
    WHOLE_GPU,
    ClusterSnapshot,
    format_time,
    parse_time,
)
from diagnosis.core.snapshot.load import load, load_file, read_file, topology_errors, validate
from diagnosis.core.vocabulary import SNAPSHOT_FORMAT as FORMAT

__all__ = [
    "FORMAT",
    "GPU_KEY",
    "GPU_METRICS",
    "WHOLE_GPU",
    "ClusterSnapshot",
    "SnapshotError",
    "dump",
    "dump_jobs_on",
    "dumps",
    "format_time",
    "load",
    "load_file",
    "parse_time",
    "read_file",
    "topology_errors",
    "validate",
]
