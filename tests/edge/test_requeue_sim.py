"""``gang-release`` through the simulator's change protocol: the job's gang state is read first
(``partial``, ``pending``, ``running``), a release guarded by ``"from": "partial"`` of a job that
is not partial is a conflict, and a release requeues the job (its ``preemptions`` count shows
it) and returns the record the cluster's change log keeps."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from diagnosis.edge.errors import SchedulerError
from diagnosis.edge.schedulers.registry import adapter_for
from tests.support.builders import SIM_STEP_CONFIG, fresh_simulator

CLUSTER = "sim-requeue-test"


@pytest.fixture(autouse=True)
def _fresh_simulator() -> Iterator[None]:
    with fresh_simulator(CLUSTER):
        yield


def running_job(adapter) -> dict:
    return next(j for j in adapter.read_state().jobs if j["state"] == "running")


def test_a_release_guarded_by_partial_of_a_running_job_is_a_conflict() -> None:
    adapter = adapter_for("sim", SIM_STEP_CONFIG, cluster=CLUSTER)
    job = running_job(adapter)

    with pytest.raises(SchedulerError, match="now 'running', expected 'partial'") as raised:
        adapter.apply(
            {"kind": "gang-release", "target": f"job:{job['id']}", "from": "partial"},
            dry_run=False,
        )

    assert raised.value.conflict


def test_a_release_requeues_the_job_and_returns_its_record() -> None:
    adapter = adapter_for("sim", SIM_STEP_CONFIG, cluster=CLUSTER)
    job = running_job(adapter)
    change = {"kind": "gang-release", "target": f"job:{job['id']}", "to": "requeued"}

    result = adapter.apply(change, dry_run=False)
    again = {j["id"]: j for j in adapter.read_state().jobs}[job["id"]]

    assert (result.before, result.after) == ("running", "requeued")
    assert result.record["change"] == change
    assert again["preemptions"] == job["preemptions"] + 1
