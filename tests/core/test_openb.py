"""The OpenB trace replay: placement policies on hand-built clusters, the fragmentation measure,
workload inflation, the trace reader, the `simulate openb` command, and the published figures."""

from __future__ import annotations

import json
import os
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from diagnosis.core.simulate.openb.frag import FragMeasure, PodShape, typical_pod_shapes
from diagnosis.core.simulate.openb.replay import (
    PUBLISHED_DEFAULT_TRACE,
    Placement,
    arrival_order,
    place_pods,
    replay_openb,
)
from diagnosis.core.simulate.openb.trace import (
    NodeTable,
    PodTable,
    TraceFormatError,
    read_nodes,
    read_pods,
)
from tests.conftest import SHARED_DATA

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


def make_nodes(*nodes: tuple[int, int, str]) -> NodeTable:
    """Nodes as (cpu_milli, gpu_count, model), each with 256 GiB of memory."""
    return NodeTable(
        names=tuple(f"node-{i}" for i in range(len(nodes))),
        cpu_milli=np.array([cpu for cpu, _, _ in nodes], dtype=np.int64),
        memory_mib=np.full(len(nodes), 262_144, dtype=np.int64),
        gpu_count=np.array([gpus for _, gpus, _ in nodes], dtype=np.int64),
        gpu_model=tuple(model for _, _, model in nodes),
    )


def make_pods(*pods: tuple, memory_mib: int = 1024) -> PodTable:
    """Pods as (cpu_milli, num_gpu, gpu_milli[, allowed models])."""
    return PodTable(
        names=tuple(f"pod-{i:04d}" for i in range(len(pods))),
        cpu_milli=np.array([p[0] for p in pods], dtype=np.int64),
        memory_mib=np.full(len(pods), memory_mib, dtype=np.int64),
        num_gpu=np.array([p[1] for p in pods], dtype=np.int64),
        gpu_milli=np.array([p[2] for p in pods], dtype=np.int64),
        gpu_spec=tuple(tuple(p[3]) if len(p) > 3 else () for p in pods),
        creation_time=None,
    )


def place_in_order(
    nodes: NodeTable, pods: PodTable, policy: str, shapes: tuple[PodShape, ...] | None = None
) -> Placement:
    return place_pods(
        nodes, pods, np.arange(len(pods)), policy, np.random.default_rng(7), shapes=shapes
    )


# --- Placement ------------------------------------------------------------------------------


def test_bestfit_picks_the_fullest_node_that_fits():
    nodes = make_nodes((64_000, 8, "V100"), (64_000, 8, "V100"), (64_000, 8, "V100"))
    pods = make_pods((4000, 4, 1000), (4000, 1, 1000), (4000, 6, 1000))
    placed = place_in_order(nodes, pods, "bestfit")
    first, second, third = placed.node
    assert second == first
    assert third not in (first, -1)


def test_bestfit_prefers_the_smaller_node_for_a_small_pod():
    nodes = make_nodes((96_000, 8, "G2"), (16_000, 2, "P100"))
    placed = place_in_order(nodes, make_pods((4000, 1, 1000)), "bestfit")
    assert placed.node.tolist() == [1]


def test_packing_puts_a_shared_pod_on_a_partly_used_gpu():
    nodes = make_nodes((32_000, 2, "T4"), (32_000, 2, "T4"))
    pods = make_pods((1000, 1, 500), (1000, 1, 300))
    placed = place_in_order(nodes, pods, "packing")
    assert placed.node[1] == placed.node[0]
    assert placed.gpus[1] == placed.gpus[0]


def test_packing_opens_a_gpu_on_a_partly_used_node_before_an_idle_node():
    nodes = make_nodes((32_000, 2, "T4"), (32_000, 2, "T4"))
    pods = make_pods((1000, 1, 500), (1000, 1, 1000))
    placed = place_in_order(nodes, pods, "packing")
    assert placed.node[1] == placed.node[0]
    assert placed.gpus[1] != placed.gpus[0]


def test_a_shared_pod_takes_the_tightest_gpu_that_fits():
    nodes = make_nodes((32_000, 3, "T4"))
    pods = make_pods((1000, 1, 600), (1000, 1, 300), (1000, 1, 500))
    placed = place_in_order(nodes, pods, "bestfit")
    assert placed.gpus == ((0,), (0,), (1,))
    assert placed.cluster.gpu_free[0].tolist() == [100, 500, 1000]


def test_spread_picks_the_emptiest_node():
    nodes = make_nodes((32_000, 4, "T4"), (32_000, 4, "T4"))
    placed = place_in_order(nodes, make_pods((1000, 1, 1000), (1000, 1, 1000)), "spread")
    assert placed.node[1] != placed.node[0]


def test_random_places_only_where_the_pod_fits():
    nodes = make_nodes(*[(8000, 1, "T4")] * 5, (64_000, 8, "V100"))
    placed = place_in_order(nodes, make_pods(*[(2000, 4, 1000)] * 2), "random")
    assert placed.node.tolist() == [5, 5]


def test_gpu_spec_restricts_the_models_a_pod_accepts():
    nodes = make_nodes((8000, 1, "V100M16"), (96_000, 8, "T4"))
    pods = make_pods((1000, 1, 1000, ["T4"]), (1000, 1, 1000, ["A10", "P100"]))
    placed = place_in_order(nodes, pods, "bestfit")
    assert placed.node.tolist() == [1, -1]


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        ((1000, 4, 1000), "more GPUs than any node has"),
        ((99_000, 1, 1000), "more CPU than any node has"),
    ],
)
def test_a_pod_that_fits_nowhere_fails(pod, why):
    nodes = make_nodes((32_000, 2, "T4"), (32_000, 2, "T4"))
    assert place_in_order(nodes, make_pods(pod), "bestfit").node.tolist() == [-1], why


def test_a_pod_asking_more_memory_than_any_node_has_fails():
    nodes = make_nodes((32_000, 2, "T4"))
    placed = place_in_order(nodes, make_pods((1000, 1, 1000), memory_mib=300_000), "bestfit")
    assert placed.node.tolist() == [-1]


def test_a_whole_gpu_pod_never_takes_a_shared_gpu():
    nodes = make_nodes((32_000, 2, "T4"))
    placed = place_in_order(nodes, make_pods((1000, 1, 100), (1000, 2, 1000)), "packing")
    assert placed.node.tolist() == [0, -1]


def test_fgd_chooses_the_node_whose_fragmentation_grows_least():
    # Typical pods take two whole GPUs: a shared pod on the 2-GPU node would strand both GPUs,
    # on the 3-GPU node only the half it leaves. Best fit would pick the smaller node.
    nodes = make_nodes((32_000, 2, "T4"), (32_000, 3, "T4"))
    shapes = (PodShape(1000, 1000, 2, (), 1.0),)
    assert place_in_order(nodes, make_pods((1000, 1, 500)), "fgd", shapes).node.tolist() == [1]
    assert place_in_order(nodes, make_pods((1000, 1, 500)), "bestfit").node.tolist() == [0]


def test_fgd_fills_the_gpu_whose_leftover_would_be_a_fragment():
    nodes = make_nodes((32_000, 2, "T4"))
    shapes = (PodShape(1000, 1000, 1, (), 1.0),)
    placed = place_in_order(nodes, make_pods((1000, 1, 500), (1000, 1, 500)), "fgd", shapes)
    assert placed.gpus == ((0,), (0,))
    assert placed.frag_gpu_milli.tolist() == [500.0, 0.0]


# --- Fragmentation measure ---------------------------------------------------------------


def test_fragmentation_of_a_node_matches_the_hand_computed_value():
    # Node: 8 CPUs free, two GPUs with 300 and 1000 milli free (1300 in all).
    # Shape A (p=0.5): 4 CPUs, 500 milli of one GPU -> fits; the 300 slice is fragment: 150.
    # Shape B (p=0.25): two whole GPUs -> does not fit; all 1300 is fragment: 325.
    # Shape C (p=0.25): CPU only -> all free GPU is fragment for it: 325.
    shapes = (
        PodShape(4000, 500, 1, (), 0.5),
        PodShape(2000, 1000, 2, (), 0.25),
        PodShape(1000, 0, 0, (), 0.25),
    )
    measure = FragMeasure.build(shapes, ("T4",))
    fitting, small = measure.gpu_stats(np.array([[300, 1000]]))
    access = measure.node_access
    enough_cpu = measure.node_frag(np.array([8000]), np.array([1300]), fitting, small, access)
    short_of_cpu = measure.node_frag(np.array([3000]), np.array([1300]), fitting, small, access)
    assert enough_cpu.tolist() == pytest.approx([800.0])
    assert short_of_cpu.tolist() == pytest.approx([1300.0])


def test_fragmentation_counts_all_free_gpu_of_a_model_the_pod_refuses():
    shapes = (PodShape(1000, 500, 1, ("V100",), 1.0),)
    measure = FragMeasure.build(shapes, ("T4", "V100"))
    fitting, small = measure.gpu_stats(np.array([[1000, 1000], [1000, 1000]]))
    frag = measure.node_frag(
        np.array([8000, 8000]), np.array([2000, 2000]), fitting, small, measure.node_access
    )
    assert frag.tolist() == pytest.approx([2000.0, 0.0])


def test_typical_shapes_cover_95_percent_of_pods_and_renormalise():
    pods = make_pods(
        *[(1000, 1, 1000)] * 10, *[(2000, 1, 500)] * 6, *[(4000, 0, 0)] * 3, (1, 8, 1000)
    )
    shapes = typical_pod_shapes(pods)
    assert [(s.cpu_milli, s.num_gpu) for s in shapes] == [(1000, 1), (2000, 1), (4000, 0)]
    assert [s.popularity for s in shapes] == pytest.approx([10 / 19, 6 / 19, 3 / 19])


# --- Workload inflation and determinism -------------------------------------------------------


def test_inflation_stops_at_the_first_copy_that_would_pass_the_arrive_target():
    pods = make_pods((1000, 1, 1000), (1000, 2, 1000), (1000, 1, 300), (1000, 0, 0))
    capacity = 20 * 1000
    order = arrival_order(pods, capacity, 1.3, np.random.default_rng(3))
    asked = pods.total_gpu_milli[order].sum()
    assert sorted(order[: len(pods)].tolist()) == [0, 1, 2, 3]
    assert 1.3 * capacity - pods.total_gpu_milli.max() < asked <= 1.3 * capacity


def test_a_trace_asking_too_much_is_thinned_to_the_target():
    pods = make_pods(*[(1000, 2, 1000)] * 20)
    order = arrival_order(pods, 10 * 1000, 1.3, np.random.default_rng(3))
    assert len(set(order.tolist())) == len(order) == 6


def test_a_trace_asking_no_gpu_is_not_inflated():
    pods = make_pods((1000, 0, 0), (2000, 0, 0))
    order = arrival_order(pods, 8 * 1000, 1.3, np.random.default_rng(3))
    assert sorted(order.tolist()) == [0, 1]


def test_replay_is_deterministic_for_a_seed():
    nodes = make_nodes(*[(32_000, 2, "T4")] * 4, *[(96_000, 8, "G2")] * 2)
    pods = make_pods((4000, 1, 1000), (2000, 1, 300), (6000, 1, 600), (8000, 2, 1000), (1000, 0, 0))
    first = replay_openb(nodes, pods, "random", seed=11)
    again = replay_openb(nodes, pods, "random", seed=11)
    assert first == again
    assert first.arrived_gpu_pct <= 130.0
    assert first.pods_placed + first.pods_failed == first.pods_arrived


def test_replay_refuses_an_unknown_policy():
    with pytest.raises(ValueError, match="unknown policy"):
        replay_openb(make_nodes((8000, 1, "T4")), make_pods((1000, 1, 1000)), "first-fit")


# --- Reading the trace ------------------------------------------------------------------------


def test_reader_names_the_file_line_and_column_of_a_bad_value(tmp_path):
    pods = tmp_path / "pods.csv"
    pods.write_text(POD_HEADER + "p0,1000,1024,1,1000,\np1,1000,1024,1,half,\n")
    with pytest.raises(TraceFormatError) as caught:
        read_pods(pods)
    assert (
        str(caught.value)
        == f"{pods}, line 3, column 'gpu_milli': expected an integer, found 'half'"
    )


def test_reader_names_a_missing_column(tmp_path):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,model\nn0,8000,1024,T4\n")
    with pytest.raises(TraceFormatError, match=r"line 1, column 'gpu': header lacks column"):
        read_nodes(nodes)


def test_reader_splits_gpu_spec_into_allowed_models(tmp_path):
    pods = tmp_path / "pods.csv"
    pods.write_text(POD_HEADER + "p0,1000,1024,1,1000,V100M16|V100M32\np1,1000,1024,0,0,T4\n")
    assert read_pods(pods).gpu_spec == (("V100M16", "V100M32"), ())


# --- The management command ---------------------------------------------------------------


def write_small_trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODE_HEADER + "n0,32000,131072,2,T4\nn1,96000,393216,8,G2\n")
    pods = tmp_path / "pods.csv"
    pods.write_text(POD_HEADER + "p0,4000,8192,1,1000,\np1,2000,4096,1,250,\np2,1000,1024,0,0,\n")
    return nodes, pods


def test_simulate_openb_prints_one_json_object(tmp_path):
    nodes, pods = write_small_trace(tmp_path)
    out = StringIO()
    call_command(
        "simulate", "openb", "--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd",
        "--seed", "3", "--json", stdout=out,
    )  # fmt: skip
    figures = json.loads(out.getvalue())
    assert figures["policy"] == "fgd"
    assert figures["gpus"] == 10
    assert figures["pods_placed"] + figures["pods_failed"] == figures["pods_arrived"]
    assert {"gpu_alloc_pct", "frag_gpu_pct", "seconds"} <= figures.keys()


def test_simulate_openb_exits_2_naming_the_bad_csv(tmp_path):
    nodes, pods = write_small_trace(tmp_path)
    nodes.write_text(NODE_HEADER + "n0,32000,131072,two,T4\n")
    with pytest.raises(CommandError) as caught:
        call_command(
            "simulate", "openb", "--nodes", str(nodes), "--pods", str(pods), "--policy", "random"
        )
    assert caught.value.returncode == 2
    assert f"{nodes}, line 2, column 'gpu'" in str(caught.value)


def test_simulate_openb_exits_2_on_a_missing_file(tmp_path):
    _, pods = write_small_trace(tmp_path)
    missing = tmp_path / "absent.csv"
    with pytest.raises(CommandError) as caught:
        call_command(
            "simulate", "openb", "--nodes", str(missing), "--pods", str(pods), "--policy", "random"
        )
    assert caught.value.returncode == 2
    assert str(missing) in str(caught.value)


# --- The published figures on the real trace --------------------------------------------------


def openb_csv_dir() -> Path:
    csv_dir = SHARED_DATA / "alibaba-gpu-v2023" / "csv"
    if not (csv_dir / "openb_pod_list_default.csv").is_file():
        message = f"the OpenB trace is not at {csv_dir} (set GPUOBS_SHARED_DATA)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return csv_dir


@pytest.mark.shared_data
@pytest.mark.parametrize("policy", list(PUBLISHED_DEFAULT_TRACE))
def test_replay_of_the_default_trace_matches_the_published_figures(policy):
    csv_dir = openb_csv_dir()
    nodes = read_nodes(csv_dir / "openb_node_list_gpu_node.csv")
    pods = read_pods(csv_dir / "openb_pod_list_default.csv")
    result = replay_openb(nodes, pods, policy, arrive=1.3, seed=42)
    allocated, fragmented = PUBLISHED_DEFAULT_TRACE[policy]
    assert result.gpu_alloc_pct_at_arrive == pytest.approx(allocated, abs=2.0)
    assert result.frag_gpu_pct_at_arrive == pytest.approx(fragmented, abs=2.0)
