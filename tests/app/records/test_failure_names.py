"""Issue #29, item 7: a failing scheduler is named as the scheduler that failed, never as the
metrics source (a YARN ResourceManager with no metrics source was reported as "metrics source
(none) failed")."""

from __future__ import annotations

import pytest

from diagnosis.actions.records.cycles import run_cluster_cycle
from tests.edge.test_yarn import routes
from tests.support.rest_server import serving

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "answer",
    [(500, {"RemoteException": {"message": "boom"}}), (200, b"not json")],
    ids=["500", "not-json"],
)
def test_a_failing_yarn_scheduler_is_named(make_cluster, answer) -> None:
    with serving({**routes(), "/ws/v1/cluster/nodes": answer}) as yarn:
        cluster = make_cluster(
            "hadoop",
            scheduler_kind="yarn",
            metrics_kind="none",
            scheduler_config={"url": yarn.url, "read_node_gpus": False, "timeout_s": 2},
        )
        cycle = run_cluster_cycle(cluster)
    cluster.refresh_from_db()
    assert not cycle.ok
    assert cluster.status_message.startswith("scheduler (yarn) failed"), cluster.status_message
