"""The Kubernetes fixtures and every object the adapters would write are checked against the real
schemas: custom objects against their CRDs' OpenAPI schemas (../shared/data/crds, strict about
unknown fields), core objects (Node, Pod, Event, ConfigMap) against the kubernetes client's own
models (a field the models do not know, or a value of the wrong shape, does not survive the round
trip)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from diagnosis.edge.schedulers.kubernetes import kai, kueue, volcano
from tests.conftest import running_in_ci
from tests.support.kube_server import (
    CRD_ROOT,
    crd_key,
    load_fixture,
    merge_patch,
    schema_errors,
    validator,
)

pytestmark = [pytest.mark.kubernetes]

FIXTURE_OBJECTS = [
    obj
    for name in ("nodes", "volcano", "kueue", "dra", "kai", "gangs")
    for obj in load_fixture(name)
]
CUSTOM = [o for o in FIXTURE_OBJECTS if crd_key(o)]
CORE = [o for o in FIXTURE_OBJECTS if not crd_key(o)]
CORE_MODELS = {
    "Node": "V1Node",
    "Pod": "V1Pod",
    "Event": "CoreV1Event",
    "ConfigMap": "V1ConfigMap",
    # DRA (resource.k8s.io/v1) and the native gang API, as the client's models know them
    "ResourceSlice": "V1ResourceSlice",
    "ResourceClaim": "ResourceV1ResourceClaim",
    "ResourceClaimTemplate": "V1ResourceClaimTemplate",
    "DeviceClass": "V1DeviceClass",
    "Workload": "V1alpha1Workload",
}
TIME = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(Z|\+00:00)")


def label(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata'].get('namespace', '-')}/{obj['metadata']['name']}"


@pytest.fixture(scope="module")
def crd_root() -> Path:
    """../shared/data/crds (or $GPUOBS_SHARED_DATA/crds); absent: fail under CI, else skip."""
    if CRD_ROOT.is_dir():
        return CRD_ROOT
    message = f"the CRDs are not at {CRD_ROOT} (set GPUOBS_SHARED_DATA)"
    if running_in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def check(obj: dict[str, Any], root: Path) -> list[str]:
    return schema_errors(obj, validator(crd_key(obj), obj["apiVersion"].rpartition("/")[2], root))


@pytest.mark.shared_data
@pytest.mark.parametrize("obj", CUSTOM, ids=label)
def test_fixture_custom_object_matches_its_crd(obj: dict[str, Any], crd_root: Path) -> None:
    assert check(obj, crd_root) == []


@pytest.mark.shared_data
def test_the_strict_schema_refuses_unknown_and_out_of_range_fields(crd_root: Path) -> None:
    queue = next(o for o in CUSTOM if crd_key(o) == "Queue")
    assert check(merge_patch(queue, {"spec": {"wieght": 2}}), crd_root) == [
        "spec: Additional properties are not allowed ('wieght' was unexpected)"
    ]
    assert check(merge_patch(queue, {"spec": {"weight": 65536}}), crd_root) == [
        "spec.weight: 65536 is greater than the maximum of 65535"
    ]


@pytest.mark.shared_data
@pytest.mark.parametrize("weight", [1, 2, 4096, 65535])
def test_every_volcano_queue_weight_patch_is_valid(weight: int, crd_root: Path) -> None:
    for queue in (o for o in CUSTOM if crd_key(o) == "Queue"):
        patch = volcano.queue_weight_patch(queue, volcano.queue_weight_value(weight))
        assert check(merge_patch(queue, patch), crd_root) == []


@pytest.mark.shared_data
@pytest.mark.parametrize("weight", [0.5, 1, 3, 2.25, 1000])
def test_every_kueue_fair_sharing_patch_is_valid(weight: float, crd_root: Path) -> None:
    for queue in (o for o in CUSTOM if o["kind"] == "ClusterQueue"):
        patch = kueue.weight_patch(queue, kueue.fair_sharing_weight(weight))
        assert check(merge_patch(queue, patch), crd_root) == []


def _normalized(value: Any) -> Any:
    """Times as the client's models print them (+00:00) read back as Z; everything else as is."""
    if isinstance(value, dict):
        return {k: _normalized(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalized(v) for v in value]
    if isinstance(value, str) and TIME.fullmatch(value):
        return value.replace("+00:00", "Z")
    return value


class _Response:
    def __init__(self, obj: dict[str, Any]) -> None:
        self.data = json.dumps(obj)


@pytest.mark.parametrize("obj", CORE, ids=label)
def test_fixture_core_object_round_trips_the_client_models(obj: dict[str, Any]) -> None:
    api = client.ApiClient()
    model = api.deserialize(_Response(obj), CORE_MODELS[obj["kind"]])
    assert _normalized(api.sanitize_for_serialization(model)) == _normalized(obj)


@pytest.mark.parametrize(
    ("field", "value"),
    [("overQuotaWeight", 3), ("overQuotaWeight", 0.5), ("quota", 24), ("limit", -1)],
)
def test_every_kai_queue_patch_is_valid(field: str, value: float) -> None:
    for queue in (o for o in CUSTOM if crd_key(o) == "Queue.scheduling.run.ai"):
        patch = kai.queue_patch(queue, field, kai.queue_value(field, value))
        assert check(merge_patch(queue, patch), CRD_ROOT) == []
