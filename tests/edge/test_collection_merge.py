"""The scheduler's GPU entries joined with the metrics' (prometheus/collection.merge_gpus): MIG
instances by UUID first (the DRA driver numbers instances its own way), then by instance."""

from __future__ import annotations

from diagnosis.edge.sources.prometheus.collection import _unit_key, merge_gpus


def mig(instance, uuid=None, **fields):
    entry = {"node": "n1", "index": 0, "mig": {"instance": instance, "profile": "1g.10gb"}}
    if uuid:
        entry["uuid"] = uuid
    return {**entry, **fields}


def known(*entries):
    return {_unit_key(e): e for e in entries}


def test_mig_joins_by_uuid_and_keeps_the_gpu_i_id():
    scheduler = known(mig(0, "MIG-a", health="ok"), mig(1, "MIG-b"))
    metrics = [mig(7, "MIG-a", util={"mean": 0.3}), mig(9, "MIG-b", util={"mean": 0.0})]
    merged = merge_gpus(scheduler, metrics)
    assert [(g["mig"]["instance"], g["uuid"], g["util"]["mean"]) for g in merged] == [
        (7, "MIG-a", 0.3),
        (9, "MIG-b", 0.0),
    ]


def test_mig_without_uuids_joins_by_instance():
    scheduler = known(mig(7, "MIG-a"), mig(9, "MIG-b"))
    merged = merge_gpus(scheduler, [mig(7, util={"mean": 0.3}), mig(9, util={"mean": 0.0})])
    assert [(g["mig"]["instance"], g["uuid"]) for g in merged] == [(7, "MIG-a"), (9, "MIG-b")]


def test_unjoinable_metrics_instances_are_left_out_not_doubled():
    scheduler = known(mig(0, "MIG-a"), mig(1, "MIG-b"))
    merged = merge_gpus(scheduler, [mig(7, util={"mean": 0.3}), mig(9, util={"mean": 0.0})])
    assert [(g["mig"]["instance"], g["uuid"], "util" in g) for g in merged] == [
        (0, "MIG-a", False),
        (1, "MIG-b", False),
    ]


def test_metrics_split_wins_over_a_whole_scheduler_entry():
    scheduler = known({"node": "n1", "index": 0, "uuid": "GPU-p", "health": "unhealthy"})
    merged = merge_gpus(scheduler, [mig(7), mig(9)])
    assert [(g["mig"]["instance"], g["health"]) for g in merged] == [
        (7, "unhealthy"),
        (9, "unhealthy"),
    ]
