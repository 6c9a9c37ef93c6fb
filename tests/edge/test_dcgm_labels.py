"""dcgm-exporter's label eras, normalised (diagnosis/edge/sources/dcgm/fields.py)."""

from __future__ import annotations

import pytest

from diagnosis.edge.sources.dcgm import fields as dcgm


@pytest.mark.parametrize(
    ("labels", "host"),
    [
        ({"hostname": "gpu-1"}, "gpu-1"),  # the 2026 default
        ({"Hostname": "gpu-1"}, "gpu-1"),  # older releases
        ({"Hostname": "localhost", "node": "gpu-2", "instance": "10.0.0.5:9400"}, "gpu-2"),
        ({"hostname": "localhost", "kubernetes_node": "gpu-3"}, "gpu-3"),
        ({"Hostname": "localhost", "instance": "gpu-4:9400"}, "gpu-4"),
        ({"instance": "gpu-5.example.org:9400"}, "gpu-5.example.org"),
        ({"Hostname": "localhost", "instance": "[fd00::5]:9400"}, "fd00::5"),
        ({"Hostname": "localhost", "instance": "localhost:9400"}, "localhost"),  # nothing better
        ({"Hostname": "localhost"}, "localhost"),
        ({"Hostname": "gpu-6", "node": "other"}, "gpu-6"),  # a real host label wins
        ({}, ""),
    ],
)
def test_host_of(labels, host):
    assert dcgm.host_of(labels) == host


def test_dra_labels():
    identity = dcgm.normalize(
        {
            "UUID": "GPU-p",
            "GPU_I_ID": "3",
            "gpu": "0",
            "hostname": "n1",
            "dra_claim_name": "c",
            "dra_claim_namespace": "ns",
            "dra_pool_name": "n1",
            "dra_device_name": "gpu-0-mig-2g20gb-3",
            "dra_mig_profile": "2g.20gb",
            "dra_mig_device_uuid": "MIG-x",
        }
    )
    assert identity.key == ("GPU-p", "3")
    assert (identity.mig_profile, identity.mig_uuid) == ("2g.20gb", "MIG-x")
    assert identity.workload.claim == "ns/c"
    assert (identity.workload.pool, identity.workload.device) == ("n1", "gpu-0-mig-2g20gb-3")
    assert identity.workload.as_text() == "claim:ns/c"


@pytest.mark.parametrize(
    ("labels", "text"),
    [
        ({"pod": "p", "namespace": "ns", "container": "c"}, "ns/p/c"),
        (
            {"pod": "exporter", "namespace": "gpu-operator", "exported_pod": "p",
             "exported_namespace": "ns"},
            "ns/p",
        ),
        ({"hpc_job": "4242"}, "hpc_job:4242"),
        ({"pod": "p", "dra_claim_name": "c", "dra_claim_namespace": "ns"}, "p"),  # the pod wins
        ({}, ""),
    ],
)  # fmt: skip
def test_workload_of(labels, text):
    assert dcgm.workload_of(labels).as_text() == text


def test_gpu_i_profile_wins_over_the_dra_profile():
    labels = {"GPU_I_PROFILE": "1g.10gb", "dra_mig_profile": "2g.20gb"}
    assert dcgm.normalize(labels).mig_profile == "1g.10gb"
