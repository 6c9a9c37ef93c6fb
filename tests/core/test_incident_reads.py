"""Issue #35: on-call's cycle step reads its nodes' health from the snapshot's frames
(diagnosis.core.incident_reads.py); each answer is what the snapshot's dumped document answers
(read here from the dumped document the way the cycle read it before), odd snapshots
included."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pandas as pd
import pytest

from diagnosis.core import snapshot
from diagnosis.core.incident_hits import NodeView
from diagnosis.core.incident_reads import events_on, node_view, unhealthy_nodes
from tests.support.builders import SnapshotBuilder


def unhealthy_nodes_in(document: Mapping[str, Any]) -> dict[str, int]:
    """The nodes of a snapshot document whose every GPU is unhealthy, with their GPU counts."""
    counts = {str(n.get("name")): int(n.get("gpus") or 0) for n in document.get("nodes") or ()}
    unhealthy: dict[str, set[int]] = {}
    healthy: set[str] = set()
    for gpu in document.get("gpus") or ():
        node = str(gpu.get("node"))
        if gpu.get("health") == "unhealthy":
            unhealthy.setdefault(node, set()).add(int(gpu.get("index") or 0))
        else:
            healthy.add(node)
    return {
        node: size
        for node, indexes in unhealthy.items()
        if node not in healthy and (size := counts.get(node)) and len(indexes) >= size
    }


def node_view_in(document: Mapping[str, Any]) -> NodeView:
    """A snapshot document's nodes by name: each one's state and its GPU entries."""
    states: dict[Any, Any] = {}
    for entry in document.get("nodes") or ():
        states.setdefault(entry.get("name"), entry.get("state"))
    gpus: dict[Any, list[Mapping[str, Any]]] = {}
    for gpu in document.get("gpus") or ():
        gpus.setdefault(gpu.get("node"), []).append(gpu)
    return NodeView(states, gpus)


def cluster() -> SnapshotBuilder:
    """n1..n4 of 2 GPUs: n1 all unhealthy, n2 one unhealthy, n3 all ok (Xids on GPU 1), n4
    its GPU 0 two MIG instances, all unhealthy."""
    builder = SnapshotBuilder()
    for name in ("n1", "n2", "n3", "n4"):
        builder.node(name, gpus=2)
    builder.gpu("n1", 0, health="unhealthy").gpu("n1", 1, health="unhealthy")
    builder.gpu("n2", 0, health="unhealthy").gpu("n2", 1, util=0.5)
    builder.gpu("n3", 0, util=0.5).gpu("n3", 1, util=0.5, xid=[(79, "2m"), (48, "1m")])
    builder.mig("n4", 0, 1, health="unhealthy").mig("n4", 0, 2, health="unhealthy")
    return builder.gpu("n4", 1, health="unhealthy", xid=[(79, "3m")])


def with_gpus(snap: snapshot.ClusterSnapshot, gpus: pd.DataFrame) -> snapshot.ClusterSnapshot:
    return dataclasses.replace(snap, gpus=gpus.reset_index(drop=True))


def as_loaded(snap):
    return snap


def one_mig_instance_healthy(snap):
    gpus = snap.gpus.copy()
    gpus.loc[(gpus["node"] == "n4") & (gpus["mig_instance"] == 2), "health"] = "ok"
    return with_gpus(snap, gpus)


def a_node_with_one_healthy_gpu(snap):
    gpus = snap.gpus.copy()
    gpus.loc[gpus["node"] == "n3", "health"] = "unhealthy"
    gpus.loc[(gpus["node"] == "n3") & (gpus["index"] == 1), "health"] = "ok"
    return with_gpus(snap, gpus)


def a_node_missing_from_the_gpus(snap):
    return with_gpus(snap, snap.gpus[snap.gpus["node"] != "n1"])


def a_gpu_of_no_node(snap):
    return dataclasses.replace(snap, nodes=snap.nodes[snap.nodes["name"] != "n1"])


def duplicate_gpu_rows(snap):
    gpus = snap.gpus
    return with_gpus(snap, pd.concat([gpus, gpus[gpus["node"].isin(["n1", "n4"])]]))


def the_duplicate_row_unhealthy_the_other_ok(snap):
    gpus = snap.gpus.copy()
    copy = gpus[(gpus["node"] == "n1") & (gpus["index"] == 0)].copy()
    copy["health"] = "ok"
    return with_gpus(snap, pd.concat([gpus, copy]))


def an_unreported_gpu_ok(snap):
    gpus = snap.gpus.copy()
    gpus.loc[(gpus["node"] == "n1") & (gpus["index"] == 1), ["reported", "health"]] = [False, "ok"]
    return with_gpus(snap, gpus)


def a_node_of_no_gpus(snap):
    nodes = snap.nodes.copy()
    nodes.loc["n1", "gpus"] = 0
    return dataclasses.replace(snap, nodes=nodes)


def a_node_listed_twice(snap):
    again = snap.nodes.loc[["n1", "n3"]].assign(state="down", gpus=1)
    return dataclasses.replace(snap, nodes=pd.concat([snap.nodes, again]))


ODD = [
    as_loaded,
    one_mig_instance_healthy,
    a_node_with_one_healthy_gpu,
    a_node_missing_from_the_gpus,
    a_gpu_of_no_node,
    duplicate_gpu_rows,
    the_duplicate_row_unhealthy_the_other_ok,
    an_unreported_gpu_ok,
    a_node_of_no_gpus,
    a_node_listed_twice,
]


@pytest.mark.parametrize("odd", ODD, ids=lambda f: f.__name__)
def test_the_unhealthy_nodes_of_the_frames_are_those_of_the_document(odd) -> None:
    snap = odd(cluster().build())
    assert unhealthy_nodes(snap) == unhealthy_nodes_in(snapshot.dump(snap))


def test_the_document_of_the_cluster_has_two_wholly_unhealthy_nodes() -> None:
    # the comparisons above compare answers that are not all empty
    assert unhealthy_nodes_in(snapshot.dump(cluster().build())) == {"n1": 2, "n4": 2}


def test_no_unhealthy_gpu_no_unhealthy_node() -> None:
    snap = SnapshotBuilder().node("n1", gpus=1).build()
    assert unhealthy_nodes(snap) == unhealthy_nodes_in(snapshot.dump(snap)) == {}


@pytest.mark.parametrize("odd", ODD, ids=lambda f: f.__name__)
def test_the_node_view_of_the_frames_is_that_of_the_document(odd) -> None:
    snap = odd(cluster().build())
    asked = ["n1", "n3", "n4", "n9"]
    view = node_view(snap, asked)
    whole = node_view_in(snapshot.dump(snap))
    read = ("node", "index", "health", "xid")
    assert {n: view.states[n] for n in asked if n in view.states} == {
        n: whole.states[n] for n in asked if n in whole.states
    }
    assert {n: view.gpus.get(n) for n in asked} == {
        n: [{k: g[k] for k in read if k in g} for g in whole.gpus[n]] if n in whole.gpus else None
        for n in asked
    }


def test_the_node_view_holds_only_the_nodes_asked_for() -> None:
    view = node_view(cluster().build(), ["n3"])
    assert (set(view.states), set(view.gpus)) == ({"n3"}, {"n3"})


def with_events() -> snapshot.ClusterSnapshot:
    builder = cluster()
    builder.event("evicted", job="j1", node="n1", ago="3m").event("failed", job="j2", ago="2m")
    builder.event("preempted", job="j3", node="n2").event("evicted", job="j4", node="", ago="1m")
    return builder.event("started", job="j5", node="n1", ago="30s").build()


def an_event_of_no_text_node(snap):
    events = snap.events.astype({"node": object})
    events.loc[events.index[2], "node"] = 7
    return dataclasses.replace(snap, events=events)


def no_events(snap):
    return dataclasses.replace(snap, events=snap.events.iloc[:0])


@pytest.mark.parametrize(
    "odd", [as_loaded, an_event_of_no_text_node, no_events], ids=lambda f: f.__name__
)
@pytest.mark.parametrize("nodes", [["n1"], ["n2", "n9"], []])
def test_the_events_on_some_nodes_are_those_of_the_document_naming_them_or_none(odd, nodes) -> None:
    snap = odd(with_events())
    dumped = snapshot.dump(snap)["events"]
    assert events_on(snap, nodes) == [e for e in dumped if e.get("node") in (None, "", *nodes)]
