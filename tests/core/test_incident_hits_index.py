"""Issue #17: the jobs a fault hit are read from each window snapshot's jobs by node
(:func:`jobs_by_node`), and that reading finds exactly what the whole documents give."""

from __future__ import annotations

from datetime import timedelta

from diagnosis.core import snapshot as snapshot_format
from diagnosis.core.incident_hits import hit_jobs_from_history, jobs_by_node, on_node
from tests.support.builders import AS_OF, SnapshotBuilder


def _document(minutes: int) -> dict:
    builder = SnapshotBuilder(as_of=AS_OF + timedelta(minutes=minutes))
    builder.node("n1").node("n2")
    builder.job("on-both", nodes=["n1", "n2"], pods=2, gpus_per_pod=4, ran="2h")
    builder.job("on-n1", node="n1", gpus_per_pod=2, ran="2h")
    builder.job("elsewhere", node="n2", gpus_per_pod=2, ran="2h")
    builder.job("waiting", state="pending")
    return snapshot_format.dump(builder.build())


def test_the_node_index_finds_the_jobs_the_whole_documents_give() -> None:
    documents = [_document(m) for m in (-1, 1, 3)]
    for node, gpu in (("n1", 0), ("n1", 5), ("n1", None), ("n2", 6)):
        whole = hit_jobs_from_history(node, gpu, AS_OF, documents, [])
        indexed = [on_node(jobs_by_node(d), node) for d in documents]
        assert hit_jobs_from_history(node, gpu, AS_OF, indexed, []) == whole


def test_a_few_nodes_jobs_dumped_alone_index_as_the_whole_document_does() -> None:
    builder = SnapshotBuilder(as_of=AS_OF)
    builder.node("n1").node("n2").node("n3")
    builder.job("on-both", nodes=["n1", "n2"], pods=2, gpus_per_pod=4, ran="2h")
    builder.job("on-n2", node="n2", gpus_per_pod=2, ran="2h")
    builder.job("on-n3", node="n3", gpus_per_pod=2, ran="2h")
    builder.job("waiting", state="pending")
    snap = builder.build()
    document = snapshot_format.dump(snap)

    jobs = snapshot_format.dump_jobs_on(snap, ["n1"])

    assert [job["id"] for job in jobs] == ["on-both"]
    alone = jobs_by_node({**document, "jobs": jobs})
    assert on_node(alone, "n1") == on_node(jobs_by_node(document), "n1")
