"""The one place a ``gpuobs.snapshot/v1`` document is put together from its two halves: the
scheduler's state (nodes, queues, jobs, events, the GPUs it knows) and a metrics source's
:class:`~diagnosis.edge.sources.Measurement` (the GPUs with their statistics, measured node
values, the window, the source's report). Pure: it reads nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from diagnosis.core.vocabulary import SNAPSHOT_FORMAT
from diagnosis.edge.sources import Measurement


def snapshot_document(
    cluster: str,
    *,
    as_of: str,
    scheduler: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    queues: Sequence[Mapping[str, Any]],
    jobs: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
    measurement: Measurement,
    reads: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The snapshot of ``cluster`` as of ``as_of`` (RFC 3339). Its ``collection`` section is the
    source's report followed by ``reads`` (what the scheduler adapter read: its kind, the new
    event cursor, the number of events, the commands it ran); a source with no report gives a
    snapshot without one."""
    values = measurement.node_values
    document: dict[str, Any] = {"format": SNAPSHOT_FORMAT, "cluster": cluster, "as_of": as_of}
    if measurement.window_s is not None:
        document["window_s"] = measurement.window_s
    document["scheduler"] = dict(scheduler)
    document["nodes"] = [
        {**node, **values[node["name"]]} if node.get("name") in values else dict(node)
        for node in nodes
    ]
    document["gpus"] = list(measurement.gpus)
    document["queues"] = list(queues)
    document["jobs"] = list(jobs)
    document["events"] = list(events)
    if measurement.collection is not None:
        document["collection"] = {**measurement.collection, **(reads or {})}
    return document
