"""The DRA parsers on near-misses and hostile values: a malformed object reads as if the field
were absent, never a crash (pure, no server)."""

from __future__ import annotations

from typing import Any

from diagnosis.edge.schedulers.kubernetes import dra


def slice_of(devices: list[Any], **pool: Any) -> dict[str, Any]:
    return {
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, **pool},
            "devices": devices,
        }
    }


GPU = {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": "GPU-0"}}}


def test_hostile_values_are_read_as_absent() -> None:
    hostile = [
        slice_of([GPU], generation="not-a-number"),
        slice_of(
            [
                {
                    "name": "x" * 10_000,
                    "attributes": {"uuid": {"string": 7}},
                    "capacity": {"memory": {"value": "lots"}},
                }
            ]
        ),
        {"spec": {"driver": "gpu.nvidia.com", "pool": None, "devices": None}},
        {"spec": None},
    ]
    claims = [
        {
            "spec": {
                "devices": {
                    "requests": [
                        {"exactly": {"deviceClassName": "gpu.nvidia.com", "count": "many"}}
                    ]
                }
            }
        },
        {
            "status": {
                "allocation": {"devices": {"results": [{"driver": "gpu.nvidia.com"}]}},
                "reservedFor": [{"resource": "pods"}],
            }
        },
    ]
    view = dra.build_view(
        hostile, claims, [{"metadata": None}], [{"status": {"containerStatuses": [{}]}}]
    )
    assert set(view.nodes) == {"n1"}
    assert view.claim_asks[("", "")] in (0, 1)
    # the unparsable generation counts as 0 (replaced); a uuid of 7 is not a UUID
    assert {d.uuid for d in view.by_key.values()} == {None}


def test_the_qualified_attribute_name_is_read_too() -> None:
    device = {"attributes": {"gpu.nvidia.com/uuid": {"string": "GPU-9"}}}
    assert dra.attribute(device, "uuid") == "GPU-9"


def test_an_older_pool_generation_is_dropped() -> None:
    old = slice_of([{**GPU, "name": "gpu-7"}], generation=1)
    new = slice_of([GPU], generation=2)
    assert [d.name for d in dra.devices([old, new])] == ["gpu-0"]


def test_network_attached_pools_hold_no_nodes_gpus() -> None:
    shared = slice_of([GPU])
    shared["spec"].pop("nodeName")
    shared["spec"]["allNodes"] = True
    assert dra.devices([shared]) == []


def test_mig_alternatives_count_only_once_allocated() -> None:
    mig = {
        "name": "gpu-0-mig-1g10gb-19-0",
        "attributes": {
            "type": {"string": "mig"},
            "uuid": {"string": "MIG-1"},
            "parentUUID": {"string": "GPU-0"},
            "profile": {"string": "1g.10gb"},
        },
        "consumesCounters": [
            {"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "10Gi"}}}
        ],
    }
    found = dra.devices([slice_of([GPU, mig])])
    assert [d.name for d in dra.inventory(found)["n1"].migs] == []
    held = dra.inventory(found, allocated=[("n1", "gpu-0-mig-1g10gb-19-0")])
    assert [d.uuid for d in held["n1"].migs] == ["MIG-1"]
    assert len(held["n1"].parents) == 1  # still one physical GPU
