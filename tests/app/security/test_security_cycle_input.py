"""Issue #12, defect 7: one job the database cannot hold as reported (a Kubernetes
``namespace/name`` over 255 characters) no longer stops a cluster's diagnosis; the cycle
records what it repaired."""

from __future__ import annotations

import pytest

from diagnosis.actions.records.cycles import run_cluster_cycle
from diagnosis.models import Job
from tests.support.kube_server import adapter_config as config
from tests.support.kube_server import kube_api_fixture, load_fixture

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]

NAMESPACE = "n" * 63
NAME = "x" * 253  # both at Kubernetes' limits: the job id is 317 characters


kube_api = kube_api_fixture()


def test_a_job_id_over_255_characters_is_clipped_and_the_cycle_succeeds(kube_api, make_cluster):
    objects = load_fixture("nodes") + load_fixture("volcano")
    for obj in objects:
        if obj["kind"] == "Pod" and obj["metadata"]["name"] == "notebook":
            obj["metadata"].update(name=NAME, namespace=NAMESPACE)
    kube_api.load(objects)
    cluster = make_cluster(
        "long-ids", scheduler_kind="volcano", scheduler_config=config(), metrics_kind="none"
    )

    cycle = run_cluster_cycle(cluster)

    assert cycle.ok, cycle.error
    assert any("clipped to 255" in p for p in cycle.source["repaired"])
    stored = Job.objects.filter(cluster=cluster, external_id__startswith=NAMESPACE)
    assert [len(j.external_id) for j in stored] == [255]
    cluster.refresh_from_db()
    assert "repaired" in cluster.status_message
