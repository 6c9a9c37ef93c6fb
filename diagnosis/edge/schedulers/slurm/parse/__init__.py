"""Slurm's outputs in the snapshot's vocabulary: pure functions over what the commands print.

``sinfo --json`` and ``squeue --json`` (data parser v0.0.38 on Slurm 22.05; later parsers keep
most keys) are read by key, defensively: a missing or oddly typed field degrades to "unknown",
never to a crash. Text forms (``scontrol show partition -o``, ``sshare -P``, ``sacctmgr -P``)
are read by their stable ``key=value`` or ``|``-separated layouts. No I/O here: the adapter in
:mod:`diagnosis.edge.schedulers.slurm.adapter` runs the commands; tests feed recorded outputs.

By section: :mod:`.values` (JSON, numbers, host lists, epochs, GRES, the parse settings),
:mod:`.nodes` (nodes, partitions, accounts as queues), :mod:`.jobs`, :mod:`.events` (events
derived from job and node records, and their cursor).
"""

from diagnosis.edge.schedulers.slurm.parse.events import (
    CURSOR_VERSION,
    ENDED_KINDS,
    EventCursor,
    derive_events,
)
from diagnosis.edge.schedulers.slurm.parse.jobs import (
    ENDED,
    JOB_STATES,
    ParsedJobs,
    allocated_nodes,
    array_tasks,
    exit_status,
    job_id,
    job_state,
    parse_jobs,
    refuse_inconsistent,
)
from diagnosis.edge.schedulers.slurm.parse.nodes import (
    ASSOC_FIELDS,
    BUSY_STATES,
    DOWN_STATES,
    DRAIN_FLAGS,
    SSHARE_FIELDS,
    node_drain,
    node_pool,
    node_records,
    node_state,
    parse_key_values,
    parse_nodes,
    parse_parsable,
    parse_partitions,
    parse_queues,
    placement_of,
    tres_gpus,
)
from diagnosis.edge.schedulers.slurm.parse.values import (
    ExpansionError,
    Gres,
    ParseSettings,
    epoch_time,
    expand_hostlist,
    expand_indexes,
    gpu_count,
    gpu_indexes,
    gpu_type,
    gpu_types_listed,
    parse_gres,
    parse_json,
    split_top_level,
)

__all__ = [
    "ASSOC_FIELDS",
    "BUSY_STATES",
    "CURSOR_VERSION",
    "DOWN_STATES",
    "DRAIN_FLAGS",
    "ENDED",
    "ENDED_KINDS",
    "JOB_STATES",
    "SSHARE_FIELDS",
    "EventCursor",
    "ExpansionError",
    "Gres",
    "ParseSettings",
    "ParsedJobs",
    "allocated_nodes",
    "array_tasks",
    "derive_events",
    "epoch_time",
    "exit_status",
    "expand_hostlist",
    "expand_indexes",
    "gpu_count",
    "gpu_indexes",
    "gpu_type",
    "gpu_types_listed",
    "job_id",
    "job_state",
    "node_drain",
    "node_pool",
    "node_records",
    "node_state",
    "parse_gres",
    "parse_jobs",
    "parse_json",
    "parse_key_values",
    "parse_nodes",
    "parse_parsable",
    "parse_partitions",
    "parse_queues",
    "placement_of",
    "refuse_inconsistent",
    "split_top_level",
    "tres_gpus",
]
