"""The ``nvidia-smi topo -m`` matrix as NVLink domains and a NUMA node per GPU.

The text nvidia-smi prints (real examples: ``../shared/data/topology/``)::

            GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity   GPU NUMA ID
    GPU0     X      NV12    PXB     0-31,64-95      0               N/A
    GPU1    NV12     X      PXB     0-31,64-95      0               N/A
    NIC0    PXB     PXB      X

    Legend: ...

Every GPU-to-GPU cell is read: ``X`` (self), ``NV#`` (a bonded set of # NVLinks), ``SYS``,
``NODE``, ``PHB``, ``PXB``, ``PIX`` (and ``SOC``, older drivers' name for ``SYS``). NIC rows and
columns are ignored. NVLink domains are the connected components of the ``NV#`` links; a GPU
whose row shows no NVLink peer is a domain of its own (it really has none), while a GPU the
matrix has no row for is listed only when an ``NV#`` cell of another row links it — otherwise
its NVLink topology is unknown and no domain lists it. The NUMA node of a GPU is its
``NUMA Affinity`` (``N/A`` or a range: unknown); ``numa`` is None when the column is missing or
no GPU's is known. ``GPU NUMA ID`` (the GPU's own memory as a NUMA node on Grace systems) is kept
apart as ``gpu_numa_id``.

Cells are separated by tabs or runs of spaces. The work is bounded whatever the input: at most
:data:`MAX_TEXT_BYTES` of text, :data:`MAX_GPUS` GPU columns, one pass over the lines. Every
number is bounded too (a NUMA node at most :data:`MAX_NUMA_NODE`, at most :data:`MAX_NVLINKS`
links per pair of GPUs, ASCII digits only), and a control character other than a tab or a line
end (a NUL, which no database text column holds) refuses the whole text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_TEXT_BYTES = 256 * 1024
MAX_GPUS = 64
MAX_LINE = 4096
MAX_NUMA_NODE = 4095  # Linux's largest NUMA node number, as the snapshot loader bounds it
MAX_NVLINKS = 64  # NVLinks between two GPUs (NV18 on H100 today)

_GPU = re.compile(r"^GPU([0-9]{1,4})\Z")
_NVLINK = re.compile(r"^NV([0-9]{1,4})\Z")
_PCIE = frozenset({"SYS", "NODE", "PHB", "PXB", "PIX", "SOC"})
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_NUMBER = re.compile(r"[0-9]{1,6}\Z")
_MULTI_WORD = (("GPU", "NUMA", "ID"), ("CPU", "Affinity"), ("NUMA", "Affinity"))


class TopologyError(ValueError):
    """The text is no ``nvidia-smi topo -m`` matrix gpuobs can read; the message says why."""


@dataclass(frozen=True)
class Topology:
    """One node's GPU topology: ``gpus`` (GPU columns of the matrix), ``nvlink_domains``
    (sorted groups of GPU indexes), ``numa`` (NUMA node per GPU, None where unknown; None when
    unknown for all), ``gpu_numa_id`` (likewise, from ``GPU NUMA ID``) and ``links``
    ((a, b, n) for each pair of GPUs joined by n NVLinks, a < b)."""

    gpus: int
    nvlink_domains: tuple[tuple[int, ...], ...]
    numa: tuple[int | None, ...] | None
    gpu_numa_id: tuple[int | None, ...] | None = None
    links: tuple[tuple[int, int, int], ...] = ()

    def summary(self) -> dict:
        """What ``manage.py topology --json`` prints."""
        return {
            "gpus": self.gpus,
            "nvlink_domains": [list(domain) for domain in self.nvlink_domains],
            "numa": None if self.numa is None else list(self.numa),
        }

    def snapshot_topology(self) -> dict:
        """The snapshot's ``nodes[].topology`` object."""
        topology: dict = {"nvlink_domains": [list(domain) for domain in self.nvlink_domains]}
        if self.numa is not None:
            topology["numa"] = list(self.numa)
        return topology


TEXTFILE_METRIC = "gpuobs_gpu_topology"


def textfile(topology: Topology, hostname: str) -> str:
    """The node-exporter textfile metric of a node's topology (what the Prometheus source reads
    with one query): one series per GPU whose NVLink domain is known, labels ``hostname``,
    ``gpu``, ``nvlink_domain`` (its domain's number on this node) and ``numa`` (empty: unknown)."""
    lines = [
        f"# HELP {TEXTFILE_METRIC} GPU topology from nvidia-smi topo -m: NVLink domain and NUMA "
        "node per GPU (always 1).",
        f"# TYPE {TEXTFILE_METRIC} gauge",
    ]
    host = hostname.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    for number, domain in enumerate(topology.nvlink_domains):
        for gpu in domain:
            numa = topology.numa[gpu] if topology.numa is not None else None
            lines.append(
                f'{TEXTFILE_METRIC}{{hostname="{host}",gpu="{gpu}",nvlink_domain="{number}",'
                f'numa="{"" if numa is None else numa}"}} 1'
            )
    return "\n".join(lines) + "\n"


def parse_topo_tables(text: str | bytes) -> list[Topology]:
    """Every matrix in the text (a file may quote several), in order; :class:`TopologyError`
    when there is none or one is malformed."""
    if isinstance(text, bytes):
        if len(text) > MAX_TEXT_BYTES:
            raise TopologyError(f"topology text is {len(text)} bytes (at most {MAX_TEXT_BYTES})")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TopologyError(f"topology text is not UTF-8 ({exc.reason})") from exc
    if not isinstance(text, str):
        raise TopologyError(f"expected topology text, got {type(text).__name__}")
    if len(text) > MAX_TEXT_BYTES:
        raise TopologyError(f"topology text is {len(text)} characters (at most {MAX_TEXT_BYTES})")
    control = _CONTROL.search(text)
    if control is not None:
        line = text.count("\n", 0, control.start()) + 1
        raise TopologyError(f"line {line}: control character {control.group(0)!r} in the text")
    tables: list[Topology] = []
    header: list[str] | None = None
    rows: dict[int, list[str]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if len(raw) > MAX_LINE:
            raise TopologyError(f"line {number} is longer than {MAX_LINE} characters")
        tokens = raw.split()
        if not tokens or raw.lstrip().startswith("#"):
            continue
        if _is_header(tokens):  # a table starts (and ends the one before)
            if header is not None:
                tables.append(_build(header, rows))
            header = _header(tokens, number)
            rows = {}
            continue
        if header is None:
            continue
        match = _GPU.match(tokens[0])
        if match and len(tokens) > 1:
            index = int(match.group(1))
            if index in rows:
                raise TopologyError(f"line {number}: a second row for GPU{index}")
            rows[index] = tokens[1:]
        elif tokens[0].endswith(":"):  # "Legend:" ends the matrix
            tables.append(_build(header, rows))
            header = None
            rows = {}
    if header is not None:
        tables.append(_build(header, rows))
    if not tables:
        raise TopologyError("no `nvidia-smi topo -m` matrix found (a header row GPU0 GPU1 ...)")
    return tables


def parse_topo_matrix(text: str | bytes) -> Topology:
    """The one matrix of an ``nvidia-smi topo -m`` output (see :func:`parse_topo_tables`)."""
    tables = parse_topo_tables(text)
    if len(tables) > 1:
        raise TopologyError(
            f"the text holds {len(tables)} `nvidia-smi topo -m` matrices; give one per node"
        )
    return tables[0]


def _is_header(tokens: list[str]) -> bool:
    """A header row: column names only, the first GPU0 (a data row's second cell is X/NV#...)."""
    return tokens[0] == "GPU0" and len(tokens) > 1 and tokens[1] != "X"


def _header(tokens: list[str], number: int) -> list[str]:
    """Column names, the multi-word ones (``CPU Affinity``...) joined back."""
    names: list[str] = []
    i = 0
    while i < len(tokens):
        for words in _MULTI_WORD:
            if tuple(tokens[i : i + len(words)]) == words:
                names.append(" ".join(words))
                i += len(words)
                break
        else:
            names.append(tokens[i])
            i += 1
    gpus = [name for name in names if _GPU.match(name)]
    if len(gpus) > MAX_GPUS:
        raise TopologyError(f"line {number}: {len(gpus)} GPU columns (at most {MAX_GPUS})")
    expected = [f"GPU{i}" for i in range(len(gpus))]
    if names[: len(gpus)] != expected:
        raise TopologyError(f"line {number}: GPU columns must come first as GPU0, GPU1, ...")
    return names


def _build(header: list[str], rows: dict[int, list[str]]) -> Topology:
    gpus = sum(1 for name in header if _GPU.match(name))
    if not rows:
        raise TopologyError("the matrix has a header but no GPU rows")
    parent = list(range(gpus))

    def find(g: int) -> int:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    seen = [False] * gpus
    links: dict[tuple[int, int], int] = {}
    numa: list[int | None] = [None] * gpus
    gpu_numa: list[int | None] = [None] * gpus
    numa_column = header.index("NUMA Affinity") if "NUMA Affinity" in header else None
    gpu_numa_column = header.index("GPU NUMA ID") if "GPU NUMA ID" in header else None
    for index, cells in sorted(rows.items()):
        if index >= gpus:
            raise TopologyError(f"row GPU{index}: the header has only {gpus} GPU columns")
        if len(cells) < gpus:
            raise TopologyError(f"row GPU{index}: {len(cells)} cells for {gpus} GPU columns")
        seen[index] = True
        for peer, cell in enumerate(cells[:gpus]):
            if peer == index:
                if cell != "X":
                    raise TopologyError(f"row GPU{index}: its own cell is {cell!r}, expected X")
                continue
            nvlink = _NVLINK.match(cell)
            if nvlink:
                seen[peer] = True
                count = int(nvlink.group(1))
                if count > MAX_NVLINKS:
                    raise TopologyError(
                        f"row GPU{index}, column GPU{peer}: {cell} is more than {MAX_NVLINKS} links"
                    )
                key = (min(index, peer), max(index, peer))
                links[key] = max(links.get(key, 0), count)
                parent[find(index)] = find(peer)
            elif cell not in _PCIE:
                raise TopologyError(
                    f"row GPU{index}, column GPU{peer}: unknown link {cell!r} "
                    "(expected X, NV#, SYS, NODE, PHB, PXB or PIX)"
                )
        numa[index] = _number(cells, numa_column, index)
        gpu_numa[index] = _number(cells, gpu_numa_column, index)
    groups: dict[int, list[int]] = {}
    for g in range(gpus):
        if seen[g]:
            groups.setdefault(find(g), []).append(g)
    domains = tuple(sorted(tuple(group) for group in groups.values()))
    return Topology(
        gpus=gpus,
        nvlink_domains=domains,
        numa=tuple(numa) if any(n is not None for n in numa) else None,
        gpu_numa_id=tuple(gpu_numa) if any(n is not None for n in gpu_numa) else None,
        links=tuple((a, b, n) for (a, b), n in sorted(links.items())),
    )


def _number(cells: list[str], column: int | None, index: int) -> int | None:
    """The cell of a named column as a NUMA node number; None for N/A, a range, anything but
    ASCII digits (``²``) or absence; :class:`TopologyError` above :data:`MAX_NUMA_NODE`.

    Data rows hold one cell per column after the row label, so column ``c`` of the header is
    ``cells[c]``; a row may end early (then unknown)."""
    if column is None or column >= len(cells):
        return None
    value = cells[column]
    if value.isascii() and value.isdigit():
        if not _NUMBER.match(value) or int(value) > MAX_NUMA_NODE:
            raise TopologyError(
                f"row GPU{index}: NUMA node {value[:12]!r} is above {MAX_NUMA_NODE}"
            )
        return int(value)
    return None
