"""The seam between metric sources and scheduler adapters: a source never reads the scheduler
(the edge's collection joins the two), and any source's shard runs through one generic runner
whose failures, an unknown source's too, are values."""

from __future__ import annotations

import pytest

from diagnosis.edge.sources.registry import run_shard
from diagnosis.tasks import collect_metrics_shard
from tests.conftest import REPO_ROOT
from tests.support.imports import imports_of

# What a source module may build on: the assembly it hands documents to imports no adapter.
SOURCE_SIDE = ("diagnosis.edge.sources", "diagnosis.edge.assemble")


def test_no_source_imports_a_scheduler_adapter() -> None:
    wrong = [
        f"{edge.importer} imports {edge.imported} (line {edge.line})"
        for edge in imports_of(REPO_ROOT)
        if edge.importer.startswith(SOURCE_SIDE)
        and edge.imported.startswith("diagnosis.edge.schedulers")
    ]
    assert wrong == []


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ({"source": "graphite", "nodes": []}, "no collector for metrics source 'graphite'"),
        ({"source": "slurm_tres", "nodes": []}, "metrics source 'slurm_tres' does not shard"),
        ({"nodes": [], "as_of": 0}, "no collector for metrics source 'None'"),
        ({"source": "prometheus", "nodes": []}, "malformed prometheus shard payload"),
    ],
)
def test_a_shard_no_source_can_run_comes_back_as_a_permanent_error(payload, says) -> None:
    result = run_shard(payload)

    assert result["permanent"] is True
    assert says in result["error"]


def test_the_shard_task_returns_an_unknown_sources_failure_as_a_value() -> None:
    outcome = collect_metrics_shard.apply(args=({"source": "graphite"},)).get()

    assert outcome["permanent"] is True
    assert "graphite" in outcome["error"]
    assert outcome["worker"]
