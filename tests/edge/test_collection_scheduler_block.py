"""A cycle's collection (diagnosis/edge/collection.py) writes what each adapter declares of its
scheduler into the snapshot's ``scheduler`` block: ``gang_advice``, the admission setting that
stops partial gangs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from diagnosis.core import snapshot
from diagnosis.edge.collection import collect_snapshot, scheduler_block, with_declared_traits
from diagnosis.edge.schedulers.registry import ADAPTERS, capabilities_of
from tests.support.builders import SIM_STEP_CONFIG, fresh_simulator


@pytest.mark.parametrize("kind", [k for k in ADAPTERS if capabilities_of(k).gang_advice])
def test_the_block_carries_the_advice_its_adapter_declares(kind: str) -> None:
    advice = capabilities_of(kind).gang_advice
    assert advice is not None

    block = scheduler_block({"kind": kind, "placement": {"a100": "binpack"}}, capabilities_of(kind))

    assert block == {
        "kind": kind,
        "placement": {"a100": "binpack"},
        "gang_advice": {"setting": advice.setting},
    }


def test_a_scheduler_that_declares_none_gets_none() -> None:
    assert capabilities_of("yarn").gang_advice is None
    assert scheduler_block({"kind": "yarn"}, capabilities_of("yarn")) == {"kind": "yarn"}


def test_a_block_that_carries_its_own_advice_keeps_it() -> None:
    own = {"kind": "kueue", "gang_advice": {"setting": "ours"}}

    assert scheduler_block(own, capabilities_of("kueue")) == own


def test_a_collected_snapshot_carries_its_schedulers_advice_to_the_core() -> None:
    cluster = SimpleNamespace(
        name="gang-advice-test",
        scheduler_kind="sim",
        scheduler_config=SIM_STEP_CONFIG,
        event_cursor="",
        metrics_kind="none",
        metrics_config={},
    )
    with fresh_simulator(cluster.name):
        document = collect_snapshot(cluster)

    advice = capabilities_of("sim").gang_advice
    assert advice is not None
    assert document["scheduler"]["gang_advice"] == {"setting": advice.setting}
    assert snapshot.load(document).gang_advice() == advice.setting


def test_a_file_that_is_not_a_document_is_left_for_the_loader_to_refuse() -> None:
    assert with_declared_traits(b"not json") == b"not json"
    assert with_declared_traits({"scheduler": "volcano"}) == {"scheduler": "volcano"}
