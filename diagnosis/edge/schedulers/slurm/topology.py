"""GPU topology from Slurm's own configuration files: ``gres.conf`` ``Links=`` and
``Cores=`` per GPU, and the block topology of ``topology.yaml`` (Slurm 25.05+) or
``topology.conf`` (``BlockName=``, 23.11+).

- **NVLink domains** of a node: the connected components of its GPUs' ``Links=`` (the number
  of NVLink connections to each other GPU; ``-1`` itself, ``0`` none). Only when every GPU line
  of the node has ``Links=`` (with ``AutoDetect=nvml`` Slurm learns them itself and the file
  has none: then nothing is judged).
- **NUMA node per GPU**: the socket holding the GPU's ``Cores=`` (Slurm's core numbering is
  socket-major, so core ``c`` is on socket ``c // cores_per_socket``); only when all of a
  GPU's cores are on one socket and the node's cores per socket are known, for every GPU of
  the node. A socket is a NUMA node unless the BIOS splits it (AMD NPS>1, Intel SNC): say so
  in the docs, never silently.
- **GPU order** (:func:`slurm_order`), as Slurm numbers a node's GPUs (its GRES indexes,
  ``IDX:``). From gres.conf alone (no ``AutoDetect``): the types in the order of the node's
  ``Gres=`` (as ``sinfo`` prints it), each type's GPUs by device file (``/dev/nvidiaN``);
  ``Links=`` does not reorder them (checked on a real Slurm 22.05: ``slurmd -G`` and the
  indexes jobs get, tests/edge/slurm/test_slurm_gpu_types.py). With ``AutoDetect`` (NVML),
  slurmd merges the detected GPUs and sorts them by device file, then by ``Links=`` (each GPU's
  own ``-1``; GPUs without ``Links=`` last): SchedMD's ``_merge_system_gres_conf`` in
  ``src/plugins/gres/gpu/gres_gpu.c`` and its testsuite's test39.18 (tests 2.28, 2.42), where
  types interleave as their files do. Each GPU's type follows the same order
  (:attr:`FoundTopology.gpu_types`).
- **Blocks** (opt-in, ``nvlink_blocks``): the base blocks of a block topology as cluster-wide
  NVLink domains (GB200/GB300 NVL72 racks), ``slurm-block:<name>``.

Bounded like the other parsers: at most :data:`MAX_LINES` lines and :data:`values.INDEX_LIMIT`
GPUs per node; host lists through :func:`values.expand_hostlist`. The parsers are pure;
:func:`read_beside` is the one read, of the files beside ``slurm.conf`` (at most
:data:`MAX_BYTES` each; an absent or unreadable file is no topology, never an error).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from diagnosis.edge.schedulers.slurm.parse.values import (
    INDEX_LIMIT,
    ExpansionError,
    expand_hostlist,
    expand_indexes,
    gpu_types_listed,
)

MAX_LINES = 100_000
MAX_BYTES = 16 * 2**20
_DEVICE = re.compile(r"(\d+)\Z")


@dataclass
class GpuLine:
    device: int | None  # the N of /dev/nvidiaN
    links: list[int] | None
    cores: list[int] | None
    type: str | None = None  # Type=

    @property
    def own_link(self) -> int | None:
        """Where its ``Links=`` puts the GPU itself (the position of its one ``-1``); None
        without a valid ``Links=`` (Slurm ignores one without exactly one ``-1``)."""
        if self.links is None or self.links.count(-1) != 1:
            return None
        return self.links.index(-1)


def slurm_order(
    lines: Sequence[GpuLine], type_order: Sequence[str | None] = (), *, autodetect: bool = False
) -> list[GpuLine]:
    """A node's GPU lines in Slurm's index order (see the module doc): by ``type_order`` (the
    types of the node's ``Gres=`` in order; a type it lacks goes last), then device file; with
    ``autodetect``, by device file, then ``Links=``. A node whose lines do not all name a
    numbered device file keeps the file's order."""
    if not all(line.device is not None for line in lines):
        return list(lines)
    by_file = sorted(lines, key=lambda line: line.device or 0)
    if autodetect:
        linked = [line for line in by_file if line.own_link is not None]
        return [
            *sorted(linked, key=lambda line: line.own_link or 0),
            *(line for line in by_file if line.own_link is None),
        ]
    rank = {kind: i for i, kind in enumerate(type_order)}
    return sorted(by_file, key=lambda line: rank.get(line.type, len(rank)))


@dataclass
class GresConf:
    """Per node, its GPU lines; ``everywhere``: lines without ``NodeName`` (every node)."""

    nodes: dict[str, list[GpuLine]] = field(default_factory=dict)
    everywhere: list[GpuLine] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # AutoDetect= per node ("" key: lines without NodeName); absent or "off": none
    autodetect: dict[str, str] = field(default_factory=dict)

    def gpus_of(self, node: str) -> list[GpuLine]:
        return self.nodes.get(node, []) or self.everywhere

    def autodetects(self, node: str) -> bool:
        value = self.autodetect.get(node, self.autodetect.get("", "off"))
        return value.lower() not in ("", "off", "none")


def _pairs(line: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep:
            pairs[key.lower()] = value
    return pairs


def parse_gres_conf(text: str, gres_name: str = "gpu") -> GresConf:
    """``gres.conf`` → the GPU lines per node. Lines of other GRES, ``AutoDetect`` lines and
    comments are skipped; a line that does not parse is listed in ``problems``."""
    conf = GresConf()
    for number, raw in enumerate(text[:MAX_BYTES].splitlines()[:MAX_LINES], start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        pairs = _pairs(line)
        if "autodetect" in pairs:  # global, or for the line's nodes
            try:
                names = expand_hostlist(pairs["nodename"]) if "nodename" in pairs else [""]
            except ExpansionError as exc:
                conf.problems.append(f"gres.conf line {number}: {exc}")
                continue
            for name in names:
                conf.autodetect[name] = pairs["autodetect"]
        if pairs.get("name") != gres_name:
            continue
        try:
            files = _files(pairs.get("file", ""))
            links = (
                [int(v) for v in pairs["links"].split(",")[:INDEX_LIMIT]]
                if "links" in pairs
                else None
            )
            cores = expand_indexes(pairs["cores"], limit=1 << 16) if "cores" in pairs else None
            names = expand_hostlist(pairs["nodename"]) if "nodename" in pairs else None
        except (ValueError, ExpansionError) as exc:
            conf.problems.append(f"gres.conf line {number}: {exc}")
            continue
        if links is not None and len(files) > 1:
            conf.problems.append(f"gres.conf line {number}: Links= with more than one File=")
            links = None
        kind = pairs.get("type") or None
        entries = [GpuLine(device, links, cores, kind) for device in files or [None]]
        for name in names if names is not None else [None]:
            target = conf.everywhere if name is None else conf.nodes.setdefault(name, [])
            if len(target) + len(entries) > INDEX_LIMIT:
                conf.problems.append(f"gres.conf line {number}: more than {INDEX_LIMIT} GPUs")
                break
            target.extend(entries)
    return conf


def _files(text: str) -> list[int | None]:
    """Device numbers of ``File=/dev/nvidia[0-3]`` (None for a file without a number)."""
    if not text:
        return []
    devices: list[int | None] = []
    for path in expand_hostlist(text, limit=INDEX_LIMIT):
        match = _DEVICE.search(path)
        devices.append(int(match.group(1)) if match else None)
    return devices


def node_topology(
    lines: list[GpuLine],
    cores_per_socket: int | None,
    type_order: Sequence[str | None] = (),
    *,
    autodetect: bool = False,
) -> dict[str, Any] | None:
    """A node's ``topology`` in the snapshot's words, its GPUs in Slurm's order
    (:func:`slurm_order`), or None when nothing can be judged."""
    if not lines:
        return None
    lines = slurm_order(lines, type_order, autodetect=autodetect)
    topology: dict[str, Any] = {}
    count = len(lines)
    if all(line.links is not None and len(line.links) >= count for line in lines):
        parent = list(range(count))

        def root(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for i, line in enumerate(lines):
            for j in range(count):
                if j != i and (line.links or [])[j] > 0:
                    parent[root(i)] = root(j)
        groups: dict[int, list[int]] = {}
        for i in range(count):
            groups.setdefault(root(i), []).append(i)
        topology["nvlink_domains"] = sorted(groups.values())
    if cores_per_socket and all(line.cores for line in lines):
        sockets = [{core // cores_per_socket for core in line.cores or []} for line in lines]
        if all(len(s) == 1 for s in sockets):
            topology["numa"] = [next(iter(s)) for s in sockets]
    return topology or None


# -- block topology ------------------------------------------------------------------------------


def parse_blocks(text: str, *, yaml_format: bool) -> dict[str, str]:
    """Node → its base block, from ``topology.yaml`` (``- topology: NAME`` / ``block:`` /
    ``blocks: [{block, nodes}]``) or ``topology.conf`` (``BlockName=b1 Nodes=n[1-18]``)."""
    blocks: dict[str, str] = {}
    if yaml_format:
        try:
            document = yaml.safe_load(text[:MAX_BYTES])
        except yaml.YAMLError as exc:
            raise ValueError(f"topology.yaml is not YAML: {exc}") from None
        entries = document if isinstance(document, list) else []
        for entry in entries:
            block = entry.get("block") if isinstance(entry, Mapping) else None
            for item in _records(block.get("blocks") if isinstance(block, Mapping) else None):
                _add_block(blocks, item.get("block"), item.get("nodes"))
        return blocks
    for raw in text[:MAX_BYTES].splitlines()[:MAX_LINES]:
        pairs = _pairs(raw.split("#", 1)[0])
        if "blockname" in pairs:
            _add_block(blocks, pairs["blockname"], pairs.get("nodes"))
    return blocks


def _records(value: Any) -> Iterable[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _add_block(blocks: dict[str, str], name: Any, nodes: Any) -> None:
    if not isinstance(name, str) or not isinstance(nodes, str) or not name:
        return
    for node in expand_hostlist(nodes):
        blocks.setdefault(node, name)


# -- the files beside slurm.conf -----------------------------------------------------------------


@dataclass
class FoundTopology:
    topology: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> topology
    blocks: dict[str, str] = field(default_factory=dict)  # node -> its NVLink block
    problems: list[str] = field(default_factory=list)
    gpu_types: dict[str, list[str | None]] = field(default_factory=dict)  # node -> type per GPU


def read_small(path: Path) -> str:
    """A configuration file's text; "" when it is absent, unreadable or over MAX_BYTES."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError:
        return ""
    return "" if len(data) > MAX_BYTES else data.decode("utf-8", errors="replace")


def read_beside(
    folder: Path,
    node_records: Iterable[Mapping[str, Any]],
    *,
    gres_name: str = "gpu",
    nvlink_blocks: bool = False,
) -> FoundTopology:
    """Each node's topology from ``folder/gres.conf`` (cores per socket from its node record),
    and with ``nvlink_blocks`` each node's block from ``topology.yaml``, else
    ``topology.conf`` (Slurm reads the YAML first and then ignores the other)."""
    found = FoundTopology()
    gres_text = read_small(folder / "gres.conf")
    if gres_text:
        conf = parse_gres_conf(gres_text, gres_name)
        found.problems.extend(conf.problems)
        for record in node_records:
            name = record.get("name")
            cores = record.get("cores")
            per_socket = cores if isinstance(cores, int) and cores > 0 else None
            if not name:
                continue
            types = list(dict.fromkeys(gpu_types_listed(record.get("gres"), gres_name)))
            autodetect = conf.autodetects(str(name))
            lines = slurm_order(conf.gpus_of(str(name)), types, autodetect=autodetect)
            topology = node_topology(lines, per_socket, types, autodetect=autodetect)
            if topology:
                found.topology[str(name)] = topology
            if lines and all(line.type for line in lines):
                found.gpu_types[str(name)] = [line.type for line in lines]
    if nvlink_blocks:
        for file_name, yaml_format in (("topology.yaml", True), ("topology.conf", False)):
            text = read_small(folder / file_name)
            if text:
                try:
                    found.blocks = parse_blocks(text, yaml_format=yaml_format)
                except (ValueError, ExpansionError) as exc:
                    found.problems.append(f"{file_name}: {exc}")
                break
    return found
