"""The built-in simulator is a scheduler adapter like the others: it reads state and events in
the snapshot's vocabulary (at its own clock) and applies changes, returning the record its
caller appends to the cluster's change log, which a fresh process replays."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from diagnosis.core import snapshot
from diagnosis.edge.collection import collect_snapshot
from diagnosis.edge.errors import SchedulerError
from diagnosis.edge.schedulers.base import ChangeError, SchedulerAdapter
from diagnosis.edge.schedulers.registry import adapter_for
from diagnosis.edge.sim import runtime as sim_runtime
from tests.support.builders import SIM_STEP_CONFIG, fresh_simulator

CLUSTER = "sim-adapter-test"


@pytest.fixture(autouse=True)
def _fresh_simulator() -> Iterator[None]:
    with fresh_simulator(CLUSTER):
        yield


def sim(config: dict | None = None) -> SchedulerAdapter:
    return adapter_for("sim", config or SIM_STEP_CONFIG, cluster=CLUSTER)


def test_it_reads_state_and_events_at_its_own_clock() -> None:
    adapter = sim()
    state = adapter.read_state()
    batch = adapter.read_events(None)

    assert state.as_of == "2026-11-29T08:15:00Z"  # one step past the start
    assert state.nodes
    assert state.jobs
    assert {gpu["health"] for gpu in state.gpus} <= {"ok", "unhealthy"}
    assert all("util" not in gpu for gpu in state.gpus)  # a scheduler has no metrics
    assert batch.cursor == state.as_of


def test_a_metric_less_snapshot_of_it_loads() -> None:
    cluster = SimpleNamespace(
        name=CLUSTER,
        scheduler_kind="sim",
        scheduler_config=SIM_STEP_CONFIG,
        event_cursor="",
        metrics_kind="none",
        metrics_config={},
    )
    document = collect_snapshot(cluster)

    snap = snapshot.load(document)
    assert document["as_of"] == "2026-11-29T08:15:00Z"
    assert len(snap.gpus) == len(document["gpus"])


def test_a_dry_run_checks_and_records_nothing() -> None:
    change = {"kind": "queue-weight", "target": "queue:team-b", "to": 3}
    result = sim().apply(change, dry_run=True)

    assert (result.applied, result.after, result.record) == (False, 3, None)
    assert result.command == 'sim apply {"kind": "queue-weight", "target": "queue:team-b", "to": 3}'


def test_a_write_returns_the_record_that_a_fresh_process_replays() -> None:
    change = {"kind": "queue-weight", "target": "queue:team-b", "to": 3, "from": 1}
    result = sim().apply(change, dry_run=False)

    assert result.applied
    assert result.record == {"at": 0.0, "change": {k: v for k, v in change.items() if k != "from"}}
    sim_runtime.forget(CLUSTER)  # another process: only the recorded log to go by
    replayed = sim({**SIM_STEP_CONFIG, "changes": [result.record]})
    again = replayed.apply({**change, "from": 3}, dry_run=True)
    assert again.before == 3


def test_a_stale_from_is_a_conflict() -> None:
    change = {"kind": "queue-weight", "target": "queue:team-b", "to": 3, "from": 7}
    with pytest.raises(SchedulerError, match="changed since the recommendation") as caught:
        sim().apply(change, dry_run=True)
    assert caught.value.conflict


def test_a_target_it_does_not_have_is_a_change_error() -> None:
    with pytest.raises(ChangeError, match="nowhere") as caught:
        sim().apply({"kind": "drain-node", "target": "node:nowhere"}, dry_run=True)
    assert caught.value.permanent
    assert not caught.value.conflict
