"""``nvidia-smi topo -m`` into NVLink domains and NUMA nodes: the real outputs of
``../shared/data/topology/`` (skipped, or failed under CI, when absent) and made-up matrices on
both sides of every rule (NV# vs PCIe cells, missing rows, N/A, tabs, bounds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.edge.topology import MAX_GPUS, TopologyError, parse_topo_matrix, parse_topo_tables
from tests.conftest import running_in_ci
from tests.support.kube_server import SHARED_DATA

TOPOLOGY = SHARED_DATA / "topology"
ALL_EIGHT = [[0, 1, 2, 3, 4, 5, 6, 7]]
UNKNOWN4 = [None] * 4

# file -> per matrix: (gpus, nvlink_domains, numa); read off each file by hand.
REAL = {
    "dgx_a100_sxm4_80gb_topo_m__DeepEP_issue13.txt": [(8, ALL_EIGHT, [0, 0, 0, 0, 1, 1, 1, 1])],
    # rows GPU0-3 only: their NV12 cells link GPU4-7 too; NUMA of 4-7 unknown
    "dgx_a100_topo_m__nccl_issue707_partial.txt": [(8, ALL_EIGHT, [0, 0, 0, 0, *UNKNOWN4])],
    "hgx_h100_topo_m__excerpts_partial.txt": [
        (8, ALL_EIGHT, [0, *UNKNOWN4, None, None, None]),
        (8, ALL_EIGHT, [0, 0, 0, 0, *UNKNOWN4]),
        (8, ALL_EIGHT, [0, 0, 0, 1, 2, 2, None, None]),
    ],
    "hgx_h20_nv18_topo_m__full_unattributed.txt": [(8, ALL_EIGHT, [0, 0, 0, 0, 1, 1, 1, 1])],
}


def real_file(name: str) -> Path:
    path = TOPOLOGY / name
    if not path.is_file():
        message = f"{path} is missing (set GPUOBS_SHARED_DATA)"
        if running_in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_outputs(name):
    tables = parse_topo_tables(real_file(name).read_bytes())
    got = [(t.gpus, [list(d) for d in t.nvlink_domains], t.numa and list(t.numa)) for t in tables]
    assert got == REAL[name]


def test_every_real_file_is_covered():
    if TOPOLOGY.is_dir():
        assert sorted(p.name for p in TOPOLOGY.glob("*.txt")) == sorted(REAL)


def test_real_links_count_the_bonded_nvlinks():
    table = parse_topo_matrix(
        real_file("dgx_a100_sxm4_80gb_topo_m__DeepEP_issue13.txt").read_text()
    )
    assert len(table.links) == 28  # every pair of 8 GPUs
    assert {n for _, _, n in table.links} == {12}


def matrix(cells: list[list[str]], *, numa: list[str] | None = None, sep: str = "\t") -> str:
    n = len(cells)
    header = [f"GPU{i}" for i in range(n)] + ["NIC0"]
    if numa is not None:
        header += ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    lines = [sep + sep.join(header)]
    for i, row in enumerate(cells):
        line = [f"GPU{i}", *row, "PXB"]
        if numa is not None:
            line += ["0-7", numa[i], "N/A"]
        lines.append(sep.join(line))
    lines.append(sep.join(["NIC0", *["PXB"] * n, "X"]))
    lines += ["", "Legend:", "", "  X    = Self", "  NV#  = Connection traversing a bonded set"]
    return "\n".join(lines) + "\n"


def two_islands(link: str = "NV4", gap: str = "SYS") -> list[list[str]]:
    """GPUs 0-1 and 2-3 joined inside each pair by ``link``, across pairs by ``gap``."""
    island = [0, 0, 1, 1]
    return [
        ["X" if a == b else (link if island[a] == island[b] else gap) for b in range(4)]
        for a in range(4)
    ]


@pytest.mark.parametrize(
    ("gap", "domains"),
    [
        ("SYS", [[0, 1], [2, 3]]),
        ("NODE", [[0, 1], [2, 3]]),
        ("PHB", [[0, 1], [2, 3]]),
        ("PIX", [[0, 1], [2, 3]]),
        ("NV1", [[0, 1, 2, 3]]),  # one NVLink between the islands joins them
    ],
)
def test_domains_are_connected_components_of_nvlinks(gap, domains):
    table = parse_topo_matrix(matrix(two_islands(gap=gap)))
    assert [list(d) for d in table.nvlink_domains] == domains


def test_chain_of_nvlinks_is_one_domain():
    cells = [
        ["X", "NV2", "SYS", "SYS"],
        ["NV2", "X", "NV2", "SYS"],
        ["SYS", "NV2", "X", "SYS"],
        ["SYS", "SYS", "SYS", "X"],
    ]
    table = parse_topo_matrix(matrix(cells))
    assert [list(d) for d in table.nvlink_domains] == [[0, 1, 2], [3]]


def test_pcie_only_gpus_are_domains_of_their_own():
    cells = [["X", "PXB"], ["PXB", "X"]]
    table = parse_topo_matrix(matrix(cells))
    assert [list(d) for d in table.nvlink_domains] == [[0], [1]]
    assert table.snapshot_topology() == {"nvlink_domains": [[0], [1]]}


def test_single_gpu():
    table = parse_topo_matrix("\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-15\t0\n")
    assert (table.gpus, table.nvlink_domains, table.numa) == (1, ((0,),), (0,))


def test_gpu_without_a_row_or_nvlink_is_unknown():
    text = "\tGPU0\tGPU1\tGPU2\nGPU0\tX\tNV4\tSYS\n"
    table = parse_topo_matrix(text)
    assert [list(d) for d in table.nvlink_domains] == [[0, 1]]  # GPU2: no domain (unknown)


@pytest.mark.parametrize(
    ("numa", "expected"),
    [
        (["0", "0", "1", "1"], (0, 0, 1, 1)),
        (["0", "N/A", "1", "1"], (0, None, 1, 1)),
        (["0-1", "0-1", "0-1", "0-1"], None),  # a range: not one NUMA node
        (["N/A"] * 4, None),
    ],
)
def test_numa_affinity(numa, expected):
    assert parse_topo_matrix(matrix(two_islands(), numa=numa)).numa == expected


def test_no_numa_column_means_unknown():
    assert parse_topo_matrix(matrix(two_islands())).numa is None


def test_spaces_instead_of_tabs():
    assert parse_topo_matrix(matrix(two_islands(), numa=["0"] * 4, sep="    ")).numa == (0,) * 4


def test_sixteen_gpus():
    cells = [["X" if a == b else "NV18" for b in range(16)] for a in range(16)]
    assert parse_topo_matrix(matrix(cells)).nvlink_domains == (tuple(range(16)),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no `nvidia-smi topo -m` matrix found"),
        ("hello\nworld\n", "no `nvidia-smi topo -m` matrix found"),
        ("\tGPU0\tGPU1\nGPU0\tX\tNV4\nGPU1\tNV4\tXX\n", "its own cell is 'XX'"),
        ("\tGPU0\tGPU1\nGPU0\tX\tQPI\n", "unknown link 'QPI'"),
        ("\tGPU0\tGPU1\nGPU0\tX\n", "1 cells for 2 GPU columns"),
        ("\tGPU0\tGPU1\nGPU0\tX\tNV4\nGPU0\tX\tNV4\n", "a second row for GPU0"),
        ("\tGPU0\tGPU1\nGPU5\tX\tNV4\n", "the header has only 2 GPU columns"),
        ("\tGPU0\tGPU2\nGPU0\tX\tNV4\n", "GPU columns must come first as GPU0, GPU1"),
        ("\tGPU0\tGPU1\n", "a header but no GPU rows"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_bad_text_is_a_clear_error(text, message):
    with pytest.raises(TopologyError, match=message):
        parse_topo_matrix(text)


def test_several_matrices_need_a_choice():
    text = matrix(two_islands()) + matrix(two_islands(gap="NV1"))
    assert len(parse_topo_tables(text)) == 2
    with pytest.raises(TopologyError, match="holds 2 `nvidia-smi topo -m` matrices"):
        parse_topo_matrix(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x" * 300_000, "at most"),
        ("a" * 5000 + "\n", "longer than 4096"),
        ("\t" + "\t".join(f"GPU{i}" for i in range(MAX_GPUS + 1)) + "\n", r"GPU columns \(at most"),
    ],
)
def test_work_is_bounded(text, message):
    with pytest.raises(TopologyError, match=message):
        parse_topo_matrix(text)
