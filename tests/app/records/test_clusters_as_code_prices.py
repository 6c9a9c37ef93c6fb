"""A cluster's declared price per GPU-hour in clusters as code (docs/operations.md "Clusters as
code", docs/accounting.md "Cost"): applied exactly as text, exported and applied back as
unchanged, audited, and a bad price refused by its place with nothing written."""

from __future__ import annotations

import pytest
import yaml

from diagnosis.models import AuditEntry, Cluster
from tests.app.records.test_clusters_as_code import clusters, refused, write

pytestmark = pytest.mark.django_db

PRICED = {
    "name": "h100-west",
    "scheduler": {"kind": "sim"},
    "metrics": {"kind": "sim"},
    "gpu_hour_prices": {"NVIDIA H100 80GB HBM3": "3.95", "*": 2.1},
}


def test_declared_prices_are_applied_as_exact_text_and_audited(tmp_path) -> None:
    clusters("apply", "-f", str(write(tmp_path / "c.yaml", PRICED)))

    west = Cluster.objects.get(name="h100-west")
    assert west.gpu_hour_prices == {"NVIDIA H100 80GB HBM3": "3.95", "*": "2.1"}
    created = AuditEntry.objects.get(action="cluster-created", target="cluster:h100-west")
    assert created.after["gpu_hour_prices"] == west.gpu_hour_prices


def test_export_carries_the_prices_and_applies_back_unchanged(tmp_path) -> None:
    clusters("apply", "-f", str(write(tmp_path / "c.yaml", PRICED)))
    exported = tmp_path / "export.yaml"

    clusters("export", "--out", str(exported))
    again = clusters("apply", "-f", str(exported))

    document = yaml.safe_load(exported.read_text())
    assert document["clusters"][0]["gpu_hour_prices"]["*"] == "2.1"
    assert "cluster h100-west: unchanged" in again


def test_a_bad_price_is_refused_by_its_place(tmp_path) -> None:
    bad = {**PRICED, "gpu_hour_prices": {"A100": "cheap", "H100": -1}}

    message = refused("apply", "-f", str(write(tmp_path / "c.yaml", bad)))

    assert "clusters[0].gpu_hour_prices.A100" in message
    assert "clusters[0].gpu_hour_prices.H100" in message
    assert not Cluster.objects.filter(name="h100-west").exists()
