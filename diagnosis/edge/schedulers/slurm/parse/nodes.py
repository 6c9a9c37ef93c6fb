"""``sinfo --json`` nodes, ``scontrol show partition -o`` partitions, and accounts as queues
(``sshare -P``, ``sacctmgr -P``), in the snapshot's vocabulary."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from diagnosis.core.numbers import finite_number
from diagnosis.edge.schedulers.slurm.parse.values import (
    HOSTLIST_LIMIT,
    ExpansionError,
    ParseSettings,
    flag_set,
    gpu_count,
    gpu_type,
    int_value,
    text_value,
)

# -- nodes ---------------------------------------------------------------------------------------

DRAIN_FLAGS = frozenset({"DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING"})
DOWN_STATES = frozenset({"DOWN", "FUTURE", "UNKNOWN", "INVAL", "ERROR"})
BUSY_STATES = frozenset({"MIXED", "ALLOCATED", "COMPLETING"})


def node_state(record: Mapping[str, Any]) -> str:
    """``ready | cordoned | drained | down`` from a node's base state and flags.

    DRAIN on a node still running jobs (Slurm's "draining") is ``cordoned``: no new work, the
    running jobs go on; DRAIN with nothing left running is ``drained``.
    """
    base = text_value(record.get("state")).upper()
    flags = flag_set(record.get("state_flags"))
    if isinstance(record.get("state"), list):  # v0.0.39+: ["MIXED", "DRAIN", ...], base first
        words = [str(w).upper() for w in record["state"]]
        base = next((w for w in words if w not in DRAIN_FLAGS), "")
        flags |= set(words)
    if base in DOWN_STATES or "DOWN" in flags:
        return "down"
    if flags & DRAIN_FLAGS:
        return "cordoned" if base in BUSY_STATES or "DRAINING" in flags else "drained"
    return "ready"


def node_pool(record: Mapping[str, Any], settings: ParseSettings) -> str | None:
    partitions = [str(p) for p in record.get("partitions") or [] if p]
    if settings.partitions:
        partitions = [p for p in partitions if p in settings.partitions]
        return partitions[0] if partitions else None
    return partitions[0] if partitions else "(none)"


def node_records(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The node records of a nodes document, whichever layout it has.

    - ``{"nodes": [...]}``: ``sinfo --json`` of Slurm 22.05 (v0.0.38), ``scontrol show nodes
      --json`` and slurmrestd's ``/nodes`` (v0.0.39+): one record per node;
    - ``{"sinfo": [...]}``: ``sinfo --json`` since 23.02 (v0.0.39+), one entry per partition
      and group of alike nodes (``nodes.nodes`` their names, ``node.state``, ``gres.total``,
      ``reason.{description,time,user}``). Entries become one record per node, a node in
      several partitions keeping them in order. A group's CPU load is kept only for a group
      of one node (for several it is their minimum and maximum, nobody's own).
    """
    if "nodes" in document or "sinfo" not in document:
        return [r for r in document.get("nodes") or [] if isinstance(r, Mapping)]
    records: dict[str, dict[str, Any]] = {}
    for entry in document.get("sinfo") or []:
        if not isinstance(entry, Mapping):
            continue
        group = _mapping(entry.get("nodes"))
        names = [n for n in group.get("nodes") or [] if isinstance(n, str) and n]
        partition = text_value(_mapping(entry.get("partition")).get("name")) or None
        for name in names[:HOSTLIST_LIMIT]:
            record = records.get(name)
            if record is None:
                if len(records) >= HOSTLIST_LIMIT:
                    break
                record = records[name] = _sinfo_record(name, entry, alone=len(names) == 1)
            if partition and partition not in record["partitions"]:
                record["partitions"].append(partition)
    return list(records.values())


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _sinfo_record(name: str, entry: Mapping[str, Any], *, alone: bool) -> dict[str, Any]:
    """One node's record, in the ``nodes`` layout's keys, from a v0.0.39+ ``sinfo`` entry."""
    reason = entry.get("reason")
    reason = reason if isinstance(reason, Mapping) else {"description": reason}
    cpus = _mapping(entry.get("cpus"))
    record: dict[str, Any] = {
        "name": name,
        "partitions": [],
        "state": [str(s) for s in _mapping(entry.get("node")).get("state") or []],
        "gres": text_value(_mapping(entry.get("gres")).get("total")),
        "gres_used": text_value(_mapping(entry.get("gres")).get("used")),
        "reason": text_value(reason.get("description")),
        "reason_changed_at": reason.get("time"),
        "reason_set_by_user": text_value(reason.get("user")) or None,
        "sockets": _mapping(entry.get("sockets")).get("maximum"),
        "cores": _mapping(entry.get("cores")).get("maximum"),
    }
    if alone:
        record["cpus"] = cpus.get("maximum")
        record["cpu_load"] = _mapping(cpus.get("load")).get("maximum")
    return record


def parse_nodes(document: Mapping[str, Any], settings: ParseSettings) -> list[dict[str, Any]]:
    """``sinfo --json`` (either layout, :func:`node_records`) → snapshot nodes (only nodes of
    the configured partitions, if any)."""
    nodes: list[dict[str, Any]] = []
    seen: set[str] = set()
    for record in node_records(document):
        name = text_value(record.get("name") or record.get("hostname"))
        pool = node_pool(record, settings)
        if not name or name in seen or pool is None:
            continue
        try:
            gres_type = gpu_type(record.get("gres"), settings.gres_name)
            gpus = gpu_count(record.get("gres"), settings.gres_name)
        except ExpansionError:
            continue  # a GRES string no node has (indexes past 1023): not a node we can read
        seen.add(name)
        node: dict[str, Any] = {
            "name": name,
            "pool": pool,
            "gpu_model": settings.gpu_models.get(gres_type or "", gres_type),
            "gpus": gpus,
            "state": node_state(record),
        }
        load, cpus = int_value(record.get("cpu_load")), int_value(record.get("cpus"))
        if load is not None and cpus:
            # cpu_load is the load average × 100; as a share of the node's CPUs, at most 1.
            node["cpu_util"] = round(min(1.0, max(0.0, load / 100 / cpus)), 4)
        nodes.append(node)
    return nodes


def node_drain(record: Mapping[str, Any]) -> tuple[str, int | None] | None:
    """(reason, epoch it was set) of a drained or draining node; None otherwise."""
    if node_state(record) not in {"drained", "cordoned"}:
        return None
    return text_value(record.get("reason")), int_value(record.get("reason_changed_at"))


# -- partitions ----------------------------------------------------------------------------------


def parse_key_values(line: str) -> dict[str, str]:
    """A ``scontrol show ... -o`` line as a dict. Values may contain spaces only when they are
    the last key's (``Reason=...``), which this keeps whole."""
    pairs: dict[str, str] = {}
    tokens = re.split(r"\s+(?=[A-Za-z][A-Za-z0-9_/:]*=)", line.strip())
    for token in tokens:
        key, sep, value = token.partition("=")
        if sep:
            pairs[key] = value
    return pairs


def parse_partitions(text: str) -> dict[str, dict[str, str]]:
    """``scontrol show partition -o`` → partition name → its settings."""
    partitions: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        pairs = parse_key_values(line)
        if "PartitionName" in pairs:
            partitions[pairs["PartitionName"]] = pairs
    return partitions


def placement_of(settings: Mapping[str, str]) -> str:
    """A partition's GPU placement: ``LLN=YES`` (least-loaded node first) spreads; otherwise
    Slurm's cons_tres best fit packs (binpack)."""
    return "spread" if settings.get("LLN", "NO").upper() == "YES" else "binpack"


# -- accounts (sshare, sacctmgr) -----------------------------------------------------------------

SSHARE_FIELDS = ("Cluster", "Account", "User", "RawShares", "NormShares", "RawUsage", "FairShare")
ASSOC_FIELDS = ("Cluster", "Account", "User", "Partition", "GrpTRES", "MaxTRES")


def parse_parsable(text: str, fields: Iterable[str]) -> list[dict[str, str]]:
    """``-P -n -o F1,F2`` output (``|``-separated, no header) as dicts, values stripped
    (sshare indents accounts by depth)."""
    names = list(fields)
    rows: list[dict[str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [v.strip() for v in line.split("|")]
        rows.append(dict(zip(names, values + [""] * (len(names) - len(values)), strict=False)))
    return rows


def parse_queues(
    sshare_text: str, assoc_text: str | None, gres_name: str = "gpu"
) -> list[dict[str, Any]]:
    """Accounts as queues: ``fairshare`` (sshare's RawShares) as weight, the account's
    ``GrpTRES`` GPU limit (sacctmgr) as capability. The ``root`` account is left out."""
    limits: dict[str, float] = {}
    for row in parse_parsable(assoc_text or "", ASSOC_FIELDS):
        if row.get("User") or row.get("Partition") or not row.get("Account"):
            continue
        limit = tres_gpus(row.get("GrpTRES", ""), gres_name)
        if limit is not None:
            limits[row["Account"]] = limit
    queues: list[dict[str, Any]] = []
    seen: set[str] = set()
    for row in parse_parsable(sshare_text, SSHARE_FIELDS):
        account = row.get("Account", "")
        if row.get("User") or not account or account == "root" or account in seen:
            continue
        seen.add(account)
        queue: dict[str, Any] = {"name": account, "tenant": account}
        shares = finite_number(row.get("RawShares", ""))
        if shares is not None:
            queue["weight"] = shares
        if account in limits:
            queue["capability_gpus"] = limits[account]
        queues.append(queue)
    return queues


def tres_gpus(text: str, gres_name: str = "gpu") -> float | None:
    """The GPU count of a TRES string (``cpu=8,gres/gpu=4`` or typed ``gres/gpu:h100=4``)."""
    total: float | None = None
    for item in (text or "").split(","):
        key, _, value = item.partition("=")
        if key == f"gres/{gres_name}" or key.startswith(f"gres/{gres_name}:"):
            number = finite_number(value)
            if number is not None:
                total = (total or 0) + number
    return total
