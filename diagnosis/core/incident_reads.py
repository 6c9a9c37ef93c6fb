"""What on-call's cycle step reads of the cycle's snapshot (issue #16), read from its frames: the
nodes whose every GPU is unhealthy, some nodes' states and GPUs' health and Xids, and the
scheduler events that may concern some nodes.

Each is what its ``gpuobs.snapshot/v1`` document answers (its ``nodes``, ``gpus`` and
``events``; tests/core/test_incident_reads.py reads both): that document is dumped in
another process, and dumping its 131,072 GPU and 16,384 node entries again in the cycle's own
thread for this cost ~0.4 s of CPU (issue #35). Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import pandas as pd

from diagnosis.core.incident_hits import NodeView
from diagnosis.core.snapshot import ClusterSnapshot, format_time
from diagnosis.core.snapshot.dump import lazy_dump


def unhealthy_nodes(snap: ClusterSnapshot) -> dict[str, int]:
    """The nodes of the snapshot whose every GPU is unhealthy (each MIG instance too), with
    their GPU counts -- a node-wide health fault, or one on each of its GPUs -- read from its
    frames."""
    gpus = _reported(snap)
    nodes = gpus["node"].to_numpy(dtype=object)
    bad = gpus["health"].to_numpy(dtype=object) == "unhealthy"
    if not bad.any():
        return {}
    unhealthy: dict[str, set[int]] = {}
    indexes = gpus["index"].to_numpy()
    for node, index in zip(nodes[bad].tolist(), indexes[bad].tolist(), strict=True):
        unhealthy.setdefault(str(node), set()).add(int(index or 0))
    healthy = {str(node) for node in set(nodes[~bad].tolist())}
    names, sizes = snap.nodes["name"].tolist(), snap.nodes["gpus"].tolist()
    counts = {str(name): int(size or 0) for name, size in zip(names, sizes, strict=True)}
    return {
        node: counts[node]
        for node, indexes in unhealthy.items()
        if node not in healthy and counts.get(node) and len(indexes) >= counts[node]
    }


def node_view(snap: ClusterSnapshot, nodes: Collection[str]) -> NodeView:
    """The snapshot's ``nodes`` by name, read from its frames for ``nodes`` only: each one's
    state (its first entry's), and its GPU entries in the document's order with what following
    an incident reads of them (``node``, ``index``, ``health`` and ``xid``). Built once per
    cycle, so that following each open incident does not scan every node and GPU."""
    wanted = list(nodes)
    frame = snap.nodes.loc[snap.nodes["name"].isin(wanted).to_numpy(), ["name", "state"]]
    states: dict[Any, Any] = {}
    for name, state in zip(frame["name"].tolist(), frame["state"].tolist(), strict=True):
        states.setdefault(name, state)
    xids = snap.xids[snap.xids["node"].isin(wanted).to_numpy()]
    codes: dict[tuple[Any, int], list[dict[str, Any]]] = {}
    for node, index, code, time in zip(
        *(xids[c].tolist() for c in ("node", "index", "code", "time")), strict=True
    ):
        codes.setdefault((node, int(index)), []).append(
            {"code": int(code), "time": format_time(time)}
        )
    gpus = _reported(snap)
    gpus = gpus[gpus["node"].isin(wanted).to_numpy()]
    entries: dict[Any, list[Mapping[str, Any]]] = {}
    for node, index, health in zip(
        *(gpus[c].tolist() for c in ("node", "index", "health")), strict=True
    ):
        entry = {"node": node, "index": int(index), "health": health}
        if (node, int(index)) in codes:
            entry["xid"] = codes[(node, int(index))]
        entries.setdefault(node, []).append(entry)
    return NodeView(states, entries)


def events_on(snap: ClusterSnapshot, nodes: Collection[str]) -> list[dict[str, Any]]:
    """The entries of the snapshot's document's ``events`` that may concern one of ``nodes``:
    those naming one of them or no node, in its order."""
    wanted = set(nodes)
    on = [not isinstance(n, str) or not n or n in wanted for n in snap.events["node"].tolist()]
    chosen = snap.events[np.array(on, dtype=bool)]
    return list(lazy_dump(dataclasses.replace(snap, events=chosen))["events"])


def _reported(snap: ClusterSnapshot) -> pd.DataFrame:
    """The node, index and health of the GPU rows a document lists (those reported)."""
    gpus = snap.gpus
    return gpus.loc[gpus["reported"].to_numpy(dtype=bool), ["node", "index", "health"]]
