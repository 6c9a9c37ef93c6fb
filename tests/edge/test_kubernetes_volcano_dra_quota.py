"""Volcano's DRA queue quotas (issue #27, item 3): ``deserved``, ``capability`` and
``guarantee.resource`` keyed ``deviceclass/<DeviceClass>`` (the capacity plugin since Volcano
1.15) read as the queue's GPUs, and a ``deserved``/``guarantee`` change written under the key the
queue uses. The queues are tests/fixtures/kubernetes/volcano_dra.yaml (shaped by Volcano's
DeviceClass quota guide), served by the loopback API server, every patch checked against the
real Queue CRD."""

from __future__ import annotations

from typing import Any

import pytest

from diagnosis.core.recommend.base import QUEUE_WEIGHT, RecommendSettings
from diagnosis.core.recommend.engine import recommend
from diagnosis.edge.schedulers.base import SchedulerError
from diagnosis.edge.schedulers.kubernetes.volcano import VolcanoAdapter
from tests.core.test_recommend_capacity import starved_team_b
from tests.support.kube_server import (
    adapter_config,
    kube_api_fixture,
    schema_errors,
    validator,
)

pytestmark = pytest.mark.kubernetes


kube_api = kube_api_fixture("nodes", "volcano", "volcano_dra")


def quotas(**config: Any) -> dict[str, dict[str, Any]]:
    state = VolcanoAdapter(adapter_config(**config)).read_state()
    return {
        q["name"]: {k: v for k, v in q.items() if k.endswith("_gpus")}
        for q in state.queues
        if q["name"] in ("queue-a", "ml-team", "mig-team", "team-b")
    }


def test_dra_quotas_are_read_under_their_device_class(kube_api) -> None:
    assert quotas() == {
        "queue-a": {"deserved_gpus": 3, "capability_gpus": 6, "guarantee_gpus": 1},
        # device-plugin and DRA GPUs together; HAMi's cores/memory capacities are no GPU count
        "ml-team": {"capability_gpus": 12},
        "mig-team": {"deserved_gpus": 7, "capability_gpus": 14},
        "team-b": {"deserved_gpus": 8},  # nvidia.com/gpu as before
    }


def test_the_device_classes_are_configurable(kube_api) -> None:
    assert quotas(dra_device_classes=["gpu.example.com"])["mig-team"] == {"deserved_gpus": 2}


def test_a_bad_device_class_setting_names_the_key() -> None:
    with pytest.raises(SchedulerError, match="dra_device_classes"):
        VolcanoAdapter(adapter_config(dra_device_classes=["Not A Class"]))


def change(queue: str, to: int, field: str = "deserved", **extra: Any) -> dict[str, Any]:
    return {"kind": "queue-weight", "field": field, "target": f"queue:{queue}", "to": to, **extra}


@pytest.mark.shared_data
def test_deserved_is_written_under_the_key_the_queue_uses(kube_api) -> None:
    adapter = VolcanoAdapter(adapter_config())
    dry = adapter.apply(change("queue-a", 5, **{"from": 3}), dry_run=True)
    assert (dry.before, dry.after, dry.applied) == (3, 5, False)
    assert "deviceclass/gpu.nvidia.com" in dry.command

    adapter.apply(change("queue-a", 5), dry_run=False)

    queue = kube_api.get("Queue", "queue-a")
    assert queue["spec"]["deserved"] == {"deviceclass/gpu.nvidia.com": "5"}  # no nvidia.com/gpu
    assert queue["spec"]["capability"] == {"deviceclass/gpu.nvidia.com": "6"}
    assert schema_errors(queue, validator("Queue", "v1beta1")) == []


@pytest.mark.shared_data
def test_guarantee_is_written_under_the_key_the_queue_uses(kube_api) -> None:
    VolcanoAdapter(adapter_config()).apply(change("queue-a", 2, "guarantee"), dry_run=False)
    queue = kube_api.get("Queue", "queue-a")
    assert queue["spec"]["guarantee"] == {"resource": {"deviceclass/gpu.nvidia.com": "2"}}
    assert schema_errors(queue, validator("Queue", "v1beta1")) == []


def test_deserved_above_a_dra_capability_is_refused(kube_api) -> None:
    with pytest.raises(SchedulerError, match="exceed its capability 6"):
        VolcanoAdapter(adapter_config()).apply(change("queue-a", 7), dry_run=True)


def test_a_quota_split_over_device_plugin_and_dra_gpus_is_refused(kube_api) -> None:
    with pytest.raises(
        SchedulerError, match=r"split over deviceclass/gpu\.nvidia\.com, nvidia\.com/gpu"
    ) as caught:
        VolcanoAdapter(adapter_config()).apply(change("ml-team", 6), dry_run=True)
    assert caught.value.permanent
    assert "deserved" not in kube_api.get("Queue", "ml-team")["spec"]


@pytest.mark.shared_data
def test_a_deserved_recommendation_for_a_dra_queue_writes_its_device_class(kube_api) -> None:
    """team-b deserves 8 GPUs of DRA's gpu.nvidia.com (Volcano's guide's key); the core's
    capacity-plugin recommendation (tests/core/test_recommend_capacity.py) raises it, and the
    write lands under that key, not under nvidia.com/gpu."""
    queue = kube_api.get("Queue", "team-b")
    queue["spec"]["deserved"] = {"deviceclass/gpu.nvidia.com": "8"}
    kube_api.put(queue)
    adapter = VolcanoAdapter(adapter_config())
    assert {q["name"]: q for q in adapter.read_state().queues}["team-b"]["deserved_gpus"] == 8
    run = recommend(starved_team_b("capacity").build(), settings=RecommendSettings(simulate=False))
    [proposal] = [r for r in run.recommendations if r.kind == QUEUE_WEIGHT]

    result = adapter.apply(
        {"kind": proposal.kind, "target": proposal.target, **proposal.change}, dry_run=False
    )

    written = kube_api.get("Queue", "team-b")
    assert result.before == 8
    assert written["spec"]["deserved"] == {"deviceclass/gpu.nvidia.com": str(result.after)}
    assert schema_errors(written, validator("Queue", "v1beta1")) == []
