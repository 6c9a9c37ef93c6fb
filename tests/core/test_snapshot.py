"""The snapshot format: round trip and one test per class of validation error."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pandas as pd
import pytest

from diagnosis.core import snapshot as fmt
from tests.support.builders import SnapshotBuilder

dump_module = importlib.import_module("diagnosis.core.snapshot.dump")  # not the function

EXAMPLE_DOCUMENT = Path(__file__).parent.parent / "fixtures" / "example_snapshot.json"


def design_document() -> dict:
    return json.loads(EXAMPLE_DOCUMENT.read_text())


def errors_of(document: dict) -> list[str]:
    with pytest.raises(fmt.SnapshotError) as caught:
        fmt.load(document)
    return caught.value.errors


def test_the_example_document_loads():
    snap = fmt.load_file(EXAMPLE_DOCUMENT)
    assert snap.cluster == "demo"
    assert snap.as_of == pd.Timestamp("2026-11-29T08:00:00Z")
    assert len(snap.gpus) == 8
    assert snap.gpus.loc[0, "util_mean"] == pytest.approx(0.93)
    assert snap.jobs.loc["job-17", "tp"] == 8
    assert snap.allocations["index"].tolist() == list(range(8))
    assert snap.xids["code"].tolist() == [79]
    assert snap.placement("a100") == "spread"


def test_gpus_missing_from_the_document_are_still_in_the_frame():
    snap = fmt.load(design_document())
    unreported = snap.gpus[~snap.gpus["reported"]]
    assert len(unreported) == 7
    assert unreported["util_mean"].isna().all()
    assert (unreported["health"] == "ok").all()


def test_topology_becomes_per_gpu_domain_and_numa():
    snap = fmt.load(design_document())
    assert snap.gpus["nvlink_domain"].tolist() == [0] * 8
    assert snap.gpus["numa"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


def test_absent_topology_means_unknown_domains():
    snap = SnapshotBuilder().pool("pcie", nodes=1, gpus=4, nvlink=False).build()
    assert snap.gpus["nvlink_domain"].tolist() == [-1, -1, -1, -1]


def test_round_trip_of_the_example_document():
    first = fmt.load(design_document())
    document = fmt.dump(first)
    second = fmt.load(json.loads(json.dumps(document)))
    assert fmt.dump(second) == document
    pd.testing.assert_frame_equal(first.gpus, second.gpus)
    pd.testing.assert_frame_equal(first.jobs, second.jobs)
    pd.testing.assert_frame_equal(first.allocations, second.allocations)
    pd.testing.assert_frame_equal(first.events, second.events)


def test_round_trip_of_a_built_cluster():
    builder = (
        SnapshotBuilder()
        .pool("a100", nodes=2, numa=[0, 0, 0, 0, 1, 1, 1, 1], cpu_util=0.4)
        .queue("team-a", weight=2, deserved_gpus=8)
        .job("j1", node="a100-000", gpus_per_pod=4, util=0.9, tp=4, tflops=100.0)
        .job("g1", state="pending", pods=3, gpus_per_pod=2, bound=1, node="a100-001")
        .gpu("a100-001", 7, health="unhealthy", xid=[(79, "5m"), (13, "2h")])
        .event("failed_scheduling", job="g1", reason="Unschedulable", message="0/2 nodes")
    )
    first = builder.build()
    second = fmt.load(fmt.dumps(first))
    assert fmt.dump(second) == fmt.dump(first)
    assert second.xids["code"].tolist() == [79, 13]


def test_round_trip_keeps_missing_text_fields_missing():
    """pandas keeps a text column with some values missing as NaN: dump must write null."""
    builder = SnapshotBuilder().pool("a100", nodes=1)
    builder.job("a", node="a100-000").job("b", state="pending")
    builder.event("submitted", job="a").event("failed", job="a", reason="NodeFail")
    document = builder.document()
    document["jobs"][1]["pending_reason"] = "Resources"
    document["jobs"][0]["tenant"] = None
    dumped = fmt.dump(fmt.load(document))
    assert dumped["jobs"][0]["tenant"] is None
    assert dumped["jobs"][0]["pending_reason"] is None
    assert dumped["events"][0]["reason"] is None
    assert fmt.dump(fmt.load(json.loads(json.dumps(dumped)))) == dumped


def test_unknown_optional_fields_are_kept_out_of_the_frames_but_do_not_fail():
    document = design_document()
    document["jobs"][0]["color"] = "blue"
    document["gpus"][0]["vendor_note"] = "x"
    document["nodes"][0]["rack"] = "r1"
    snap = fmt.load(document)
    assert "color" not in snap.jobs.columns


def test_a_lazy_dump_is_the_dump_part_by_part_and_builds_only_what_is_read(monkeypatch):
    snap = fmt.load({**design_document(), "collection": {"coverage": 0.9}})
    whole = fmt.dump(snap, cluster="renamed")
    built: list[str] = []
    jobs = dump_module._dump_jobs
    monkeypatch.setattr(dump_module, "_dump_jobs", lambda s: built.append("jobs") or jobs(s))

    lazy = dump_module.lazy_dump(snap, cluster="renamed")

    assert lazy["nodes"] == whole["nodes"]
    assert built == []
    assert list(lazy) == list(whole)
    assert whole["cluster"] == "renamed"
    assert whole["collection"] == {"coverage": 0.9}
    assert dict(lazy) == whole
    assert built == ["jobs"]


# -- one test per class of validation error ------------------------------------------------------


def test_unknown_format_version():
    document = design_document()
    document["format"] = "gpuobs.snapshot/v9"
    assert errors_of(document) == [
        "format: unknown format version 'gpuobs.snapshot/v9' (expected 'gpuobs.snapshot/v1')"
    ]


def test_the_schedulers_gang_advice_loads_and_a_malformed_one_names_its_path():
    document = design_document()
    document["scheduler"]["gang_advice"] = {"setting": "admit gangs whole"}
    assert fmt.load(document).gang_advice() == "admit gangs whole"
    assert fmt.load(design_document()).gang_advice() is None

    document["scheduler"]["gang_advice"] = {"setting": ""}
    assert errors_of(document) == [
        "scheduler.gang_advice.setting: expected a non-empty string, got ''"
    ]
    document["scheduler"]["gang_advice"] = "admit gangs whole"
    assert errors_of(document) == ["scheduler.gang_advice: expected an object, got a string"]


def test_not_json_at_all():
    with pytest.raises(fmt.SnapshotError) as caught:
        fmt.load(b"{not json")
    assert caught.value.errors[0].startswith("$: not valid JSON")


@pytest.mark.parametrize(
    ("where", "key", "path"),
    [
        (None, "cluster", "cluster"),
        (None, "as_of", "as_of"),
        ("nodes", "pool", "nodes[0].pool"),
        ("nodes", "gpus", "nodes[0].gpus"),
        ("jobs", "submitted", "jobs[0].submitted"),
        ("jobs", "gpus_per_pod", "jobs[0].gpus_per_pod"),
        ("jobs", "id", "jobs[0].id"),
        ("gpus", "index", "gpus[0].index"),
    ],
)
def test_missing_required_field_names_its_path(where, key, path):
    document = design_document()
    container = document if where is None else document[where][0]
    del container[key]
    assert f"{path}: required field is missing" in errors_of(document)


@pytest.mark.parametrize(
    ("where", "key", "value", "path"),
    [
        ("nodes", "state", "asleep", "nodes[0].state"),
        ("jobs", "state", "sleeping", "jobs[0].state"),
        ("gpus", "health", "meh", "gpus[0].health"),
        ("events", "kind", "exploded", "events[0].kind"),
    ],
)
def test_wrong_enum_value(where, key, value, path):
    document = design_document()
    document[where][0][key] = value
    errors = errors_of(document)
    assert len(errors) == 1
    assert errors[0].startswith(f"{path}: {value!r} is not one of: ")


def test_gpu_index_outside_its_node_in_an_allocation():
    builder = SnapshotBuilder().node("gpu-001", gpus=8)
    for i in range(3):
        builder.job(f"j{i}", state="pending", gpus_per_pod=1)
    builder.job("j3", gpus_per_pod=3, allocation=[("gpu-001", [2, 3, 9])])
    assert errors_of(builder.document()) == [
        "jobs[3].allocation[0].gpus[2]: GPU 9 does not exist on node gpu-001 (8 GPUs)"
    ]


def test_gpu_entry_outside_its_node():
    document = design_document()
    document["gpus"][0]["index"] = 8
    assert errors_of(document) == ["gpus[0].index: GPU 8 does not exist on node gpu-001 (8 GPUs)"]


def test_gpu_in_two_allocations():
    builder = SnapshotBuilder().pool("a100", nodes=1)
    builder.job("a", gpus_per_pod=2, allocation=[("a100-000", [0, 1])])
    builder.job("b", gpus_per_pod=2, allocation=[("a100-000", [1, 2])])
    errors = errors_of(builder.document())
    assert errors == ["jobs[1].allocation[0].gpus[0]: GPU a100-000/1 is already allocated to job a"]


@pytest.mark.parametrize(
    ("collection", "path", "what"),
    [
        ("nodes", "nodes[1].name", "duplicate node name 'gpu-001'"),
        ("jobs", "jobs[1].id", "duplicate job id 'job-17'"),
        ("queues", "queues[1].name", "duplicate queue name 'team-a'"),
        ("gpus", "gpus[1]", "duplicate entry for GPU gpu-001/0"),
    ],
)
def test_duplicate_ids(collection, path, what):
    document = design_document()
    twin = json.loads(json.dumps(document[collection][0]))
    if collection == "jobs":
        twin["allocation"] = []
    document[collection].append(twin)
    assert f"{path}: {what}" in errors_of(document)


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d.__setitem__("as_of", "yesterday"), "as_of"),
        (
            lambda d: d["jobs"][0].__setitem__("submitted", "2026-11-28 01:00:00"),
            "jobs[0].submitted",
        ),
        (lambda d: d["jobs"][0].__setitem__("started", "2026-13-28T01:00:00Z"), "jobs[0].started"),
        (lambda d: d["events"][0].__setitem__("time", 1700000000), "events[0].time"),
        (lambda d: d["gpus"][0]["xid"][0].__setitem__("time", "soon"), "gpus[0].xid[0].time"),
    ],
)
def test_unparsable_times(mutate, path):
    document = design_document()
    mutate(document)
    errors = errors_of(document)
    assert len(errors) == 1
    assert errors[0].startswith(f"{path}: ")
    assert "is not an RFC 3339 time with a zone" in errors[0]


def test_times_with_offsets_are_converted_to_utc():
    document = design_document()
    document["jobs"][0]["submitted"] = "2026-11-28T02:00:00+01:00"
    snap = fmt.load(document)
    assert snap.jobs.loc["job-17", "submitted"] == pd.Timestamp("2026-11-28T01:00:00Z")


def test_fraction_out_of_range():
    document = design_document()
    document["gpus"][0]["util"]["mean"] = 93
    assert errors_of(document) == ["gpus[0].util.mean: a fraction must lie in 0..1, got 93"]


def test_wrong_type():
    document = design_document()
    document["nodes"][0]["gpus"] = "eight"
    assert "nodes[0].gpus: expected an integer, got 'eight'" in errors_of(document)


@pytest.mark.parametrize("value", [float("inf"), float("nan"), float("-inf")])
def test_non_finite_numbers_are_errors_not_crashes(value):
    document = design_document()
    document["window_s"] = value
    document["gpus"][0]["power_w"]["mean"] = value
    errors = errors_of(json.loads(json.dumps(document)))
    assert errors == [
        f"window_s: expected an integer, got {value!r}",
        f"gpus[0].power_w.mean: expected a number, got {value!r}",
    ]


def test_pod_with_the_wrong_number_of_gpus():
    builder = SnapshotBuilder().pool("a100", nodes=1)
    builder.job("a", gpus_per_pod=4, allocation=[("a100-000", [0, 1])])
    assert errors_of(builder.document()) == [
        "jobs[0].allocation[0].gpus: pod holds 2 GPUs but the job asks 4 per pod"
    ]


def test_allocation_on_an_unknown_node():
    builder = SnapshotBuilder().pool("a100", nodes=1)
    builder.job("a", gpus_per_pod=1, allocation=[("nowhere", [0])])
    assert errors_of(builder.document()) == ["jobs[0].allocation[0].node: unknown node 'nowhere'"]


def test_every_error_is_reported_at_once():
    document = design_document()
    document["nodes"][0]["state"] = "asleep"
    document["jobs"][0]["state"] = "sleeping"
    document["events"][0]["time"] = "later"
    assert len(errors_of(document)) == 3


# -- numbers out of range are refused per value, with the path (issue #28) ------------------


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("priority", 1e20, "jobs[0].priority: must lie within ±9007199254740992, got 1e+20"),
        ("priority", -(10**30), "jobs[0].priority: must lie within ±9007199254740992"),
        ("preemptions", int("9" * 4000), "jobs[0].preemptions: must lie within"),
    ],
    ids=["1e20", "-1e30", "4000-nines"],
)
def test_an_integer_out_of_range_is_refused_with_its_path(field, value, error):
    document = design_document()
    document["jobs"][0][field] = value
    errors = errors_of(document)
    assert len(errors) == 1
    assert errors[0].startswith(error)


def test_a_huge_integer_where_a_number_goes_is_refused():
    document = design_document()
    document["gpus"][0]["power_w"]["mean"] = int("9" * 4000)
    assert errors_of(document) == ["gpus[0].power_w.mean: expected a number, got a huge integer"]


def test_a_numa_node_of_4000_nines_is_refused_with_its_path():
    document = SnapshotBuilder().node("n1", gpus=2, numa=[0, 0]).document()
    document["nodes"][0]["topology"]["numa"][1] = int("9" * 4000)
    assert errors_of(document) == [
        "nodes[0].topology.numa[1]: must lie within ±4095, got a huge integer"
    ]


def test_a_node_of_10_to_the_15_gpus_is_refused():
    document = SnapshotBuilder().node("n1", gpus=2).document()
    document["nodes"][0]["gpus"] = 10**15
    assert errors_of(document) == ["nodes[0].gpus: must lie within ±1024, got 1000000000000000"]
