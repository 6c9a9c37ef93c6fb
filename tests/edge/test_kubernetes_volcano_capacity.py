"""Volcano's queue-share plugins and hierarchical queues read from the loopback API server, and
the capacity plugin's knobs (``deserved``, ``guarantee``) written through the same workflow as a
weight (dry run, resourceVersion guard), every patch valid against Volcano's Queue CRD."""

from __future__ import annotations

from typing import Any

import pytest

from diagnosis.core.recommend.base import QUEUE_WEIGHT, RecommendSettings
from diagnosis.core.recommend.engine import recommend
from diagnosis.edge.schedulers.base import SchedulerError
from diagnosis.edge.schedulers.kubernetes.volcano import VolcanoAdapter, queue_gpus_patch
from tests.core.test_recommend_capacity import starved_team_b
from tests.support.kube_server import (
    KubeApiServer,
    adapter_config,
    kube_api_fixture,
    merge_patch,
    schema_errors,
    validator,
)

pytestmark = pytest.mark.kubernetes


kube_api = kube_api_fixture("nodes", "volcano")


def with_plugin(server: KubeApiServer, old: str, new: str) -> None:
    configmap = server.get("ConfigMap", "volcano-scheduler-configmap", "volcano-system")
    conf = configmap["data"]["volcano-scheduler.conf"]
    configmap["data"]["volcano-scheduler.conf"] = conf.replace(f"name: {old}", f"name: {new}")
    server.put(configmap)


def test_the_proportion_plugin_is_reported(kube_api) -> None:
    assert VolcanoAdapter(adapter_config()).read_state().scheduler["queue_share"] == "proportion"


def test_the_capacity_plugin_is_reported(kube_api) -> None:
    with_plugin(kube_api, "proportion", "capacity")
    assert VolcanoAdapter(adapter_config()).read_state().scheduler["queue_share"] == "capacity"


def test_hierarchical_queues_keep_their_parent(kube_api) -> None:
    queue = kube_api.get("Queue", "team-b")
    queue["spec"]["parent"] = "team-a"
    kube_api.put(queue)
    state = VolcanoAdapter(adapter_config()).read_state()
    assert {q["name"]: q.get("parent") for q in state.queues}["team-b"] == "team-a"
    assert state.scheduler["queue_parents"] == {"team-b": "team-a"}


def deserved(to: int, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "queue-weight",
        "field": "deserved",
        "target": "queue:team-b",
        "to": to,
        **extra,
    }


def test_deserved_dry_run_writes_nothing(kube_api) -> None:
    result = VolcanoAdapter(adapter_config()).apply(deserved(12, **{"from": 8}), dry_run=True)
    assert (result.before, result.after, result.applied) == (8, 12, False)
    assert kube_api.get("Queue", "team-b")["spec"]["deserved"] == {"nvidia.com/gpu": "8"}


def test_deserved_is_written_and_guarded_by_resource_version(kube_api) -> None:
    VolcanoAdapter(adapter_config()).apply(deserved(12), dry_run=False)
    assert kube_api.get("Queue", "team-b")["spec"]["deserved"] == {"nvidia.com/gpu": "12"}


def test_deserved_above_capability_is_refused(kube_api) -> None:
    with pytest.raises(SchedulerError, match="exceed its capability 24") as caught:
        VolcanoAdapter(adapter_config()).apply(
            {**deserved(30), "target": "queue:team-a"}, dry_run=True
        )
    assert caught.value.permanent


def test_a_changed_deserved_is_a_conflict(kube_api) -> None:
    with pytest.raises(SchedulerError, match="expected 6, found 8") as caught:
        VolcanoAdapter(adapter_config()).apply(deserved(12, **{"from": 6}), dry_run=False)
    assert caught.value.conflict


@pytest.mark.shared_data
@pytest.mark.parametrize(("field", "gpus"), [("deserved", 0), ("deserved", 64), ("guarantee", 4)])
def test_every_capacity_patch_is_valid_against_the_crd(kube_api, field: str, gpus: int) -> None:
    check = validator("Queue", "v1beta1")
    for name in ("default", "team-a", "team-b"):
        queue = kube_api.get("Queue", name)
        patched = merge_patch(queue, queue_gpus_patch(queue, field, gpus, "nvidia.com/gpu"))
        assert schema_errors(patched, check) == []


def test_a_tenant_is_a_subtree_of_hierarchical_queues(kube_api) -> None:
    queue = kube_api.get("Queue", "team-b")
    queue["spec"]["parent"] = "team-a"  # team-a is labelled tenant "research"
    kube_api.put(queue)
    state = VolcanoAdapter(adapter_config()).read_state()
    tenants = {q["name"]: q["tenant"] for q in state.queues}
    assert tenants["team-b"] == "research"
    assert tenants["default"] == "default"  # no labelled ancestor: its own name


@pytest.mark.parametrize(("plugin", "field"), [("capacity", "deserved"), ("proportion", None)])
def test_the_configmaps_plugin_decides_the_recommended_knob(kube_api, plugin, field) -> None:
    """The queue-share plugin read from the real ConfigMap shape, with a starved queue (the
    cluster of tests/core/test_recommend_capacity.py): capacity → deserved, proportion →
    weight."""
    with_plugin(kube_api, "proportion", plugin)
    scheduler = VolcanoAdapter(adapter_config()).read_state().scheduler
    builder = starved_team_b(None)
    builder.doc["scheduler"]["queue_share"] = scheduler["queue_share"]
    run = recommend(builder.build(), settings=RecommendSettings(simulate=False))
    [change] = [r for r in run.recommendations if r.kind == QUEUE_WEIGHT]
    assert change.change.get("field") == field
