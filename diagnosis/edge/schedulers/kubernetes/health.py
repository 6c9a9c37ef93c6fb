"""GPU health that NVIDIA's own tools publish on Kubernetes, read as health input of the
snapshot's ``gpus`` entries (issue #16): node conditions set by NVIDIA NVSentinel, on top of
the DRA view's device taints (ResourceSlice ``devices[].taints`` and DeviceTaintRules, see
:mod:`.dra`).

**NVSentinel node conditions.** NVSentinel's platform connector turns each fatal health event
into a node condition whose ``type`` is the health check's name and whose ``status`` is
``"True"`` while the fault lasts (``"False"``, message ``No Health Failures``, once healthy):
``SysLogsXIDError``, ``SysLogsSXIDError``, ``SysLogsGPUFallenOff`` (syslog-health-monitor) and
``Gpu*Watch`` (gpu-health-monitor, DCGM), among others. Its ``message`` holds one entry per
impacted entity, separated by ``;``, each ``ErrorCode:<code> ... <entityType>:<value> ...
<text> Recommended Action=<ACTION>``; the entities are ``GPU:<index>``, ``PCI:<address>`` and
``GPU_UUID:<uuid>`` (NVIDIA/NVSentinel, platform-connectors/pkg/connectors/kubernetes/
process_node_events.go ``constructHealthEventMessage``; docs/INTEGRATIONS.md "Condition
Types"). A ``SysLogsXIDError`` entry
``ErrorCode:79 PCI:0000:ef:00 GPU_UUID:GPU-b5f2... MESSAGE=NVRM: Xid (PCI:0000:ef:00): 79, ...
Recommended Action=RESTART_BM`` is that GPU's Xid 79.

So that one fault is one incident, not two: an entry that names its GPU (by UUID, through the
DRA inventory, or by ``GPU:<index>``) marks that GPU ``unhealthy`` with the reason, and an Xid
entry adds the Xid to the GPU's ``xid`` list at the condition's ``lastTransitionTime`` -- the
same GPU and code dcgm-exporter reports, so the ``xid`` rule sees one GPU with one code, and
on-call's incident is the GPU's one incident. An entry that names no GPU the snapshot knows
marks every GPU of its node unhealthy (NVSentinel cordons the whole node for it) without an
Xid row: the rule then keeps an Xid finding of that node's GPUs open, but opens none, and
on-call gets a node incident for it (``diagnosis.actions.oncall.incidents``). When it
names the GPU by a UUID the scheduler does not know (the device plugin publishes none), the
entries also carry it as ``faults_by_uuid``: the Prometheus source, which knows every GPU's
UUID from dcgm-exporter, moves the fault and its Xid to that GPU and gives the node's other GPUs
their health back (``merge_gpus``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from diagnosis.edge.schedulers.kubernetes import dra
from diagnosis.edge.schedulers.kubernetes.client import meta
from diagnosis.edge.schedulers.kubernetes.objects import rfc3339

# NVSentinel's condition types (docs/INTEGRATIONS.md "Standard Condition Types"); any other
# type starting ``Gpu`` or ``SysLogs`` is taken as one of theirs too.
NVSENTINEL_CONDITIONS = frozenset(
    {
        "SysLogsXIDError",
        "SysLogsSXIDError",
        "SysLogsGPUFallenOff",
        "GpuMemWatch",
        "GpuThermalWatch",
        "GpuPcieWatch",
        "GpuPowerWatch",
        "GpuInforomWatch",
        "GpuSmWatch",
        "GpuNvlinkWatch",
        "GpuMcuWatch",
        "GpuPmuWatch",
        "GpuDriverWatch",
        "GpuCpusetWatch",
        "NVSwitchFatalError",
        "NVSwitchDown",
        "DCGMError",
    }
)
NVSENTINEL_PREFIXES = ("Gpu", "SysLogs")
XID_CONDITION = "SysLogsXIDError"
_ENTITY = re.compile(r"\b(ErrorCode|GPU_UUID|GPU|PCI):(\S+)")
_ACTION = re.compile(r"Recommended Action=(\w+)")


@dataclass(frozen=True)
class HealthEntry:
    """One entry of an NVSentinel condition's message: one fault on one entity."""

    node: str
    condition: str
    since: str | None  # the condition's lastTransitionTime
    codes: tuple[str, ...]
    gpu_index: int | None
    gpu_uuid: str | None
    pci: str | None
    action: str | None

    @property
    def xid_codes(self) -> tuple[int, ...]:
        if self.condition != XID_CONDITION:
            return ()
        return tuple(int(code) for code in self.codes if code.isdigit())

    @property
    def reason(self) -> str:
        what = self.condition + (f" {','.join(self.codes)}" if self.codes else "")
        return f"NVSentinel {what}" + (f" ({self.action})" if self.action else "")


def is_nvsentinel_condition(kind: str) -> bool:
    return kind in NVSENTINEL_CONDITIONS or kind.startswith(NVSENTINEL_PREFIXES)


def nvsentinel_entries(nodes: Iterable[Mapping[str, Any]]) -> list[HealthEntry]:
    """The faults NVSentinel reports on the nodes: one per message entry of each of its node
    conditions whose status is ``True``."""
    found = []
    for node in nodes:
        name = str(meta(node).get("name") or "")
        for condition in (node.get("status") or {}).get("conditions") or ():
            kind = str(condition.get("type") or "")
            if condition.get("status") != "True" or not is_nvsentinel_condition(kind):
                continue
            since = rfc3339(condition.get("lastTransitionTime"))
            message = str(condition.get("message") or "")
            for text in [part.strip() for part in message.split(";")] or [""]:
                if not text and message:
                    continue
                found.append(_entry(name, kind, since, text))
    return found


def _entry(node: str, condition: str, since: str | None, text: str) -> HealthEntry:
    codes, index, uuid, pci = [], None, None, None
    for key, value in _ENTITY.findall(text):
        if key == "ErrorCode":
            codes.append(value)
        elif key == "GPU" and value.isdigit() and index is None:
            index = int(value)
        elif key == "GPU_UUID" and uuid is None:
            uuid = value
        elif key == "PCI" and pci is None:
            pci = value
    action = _ACTION.search(text)
    return HealthEntry(
        node=node,
        condition=condition,
        since=since,
        codes=tuple(codes),
        gpu_index=index,
        gpu_uuid=uuid,
        pci=pci,
        action=action.group(1) if action else None,
    )


def gpu_rows(
    view: dra.DraView,
    nodes: Iterable[Mapping[str, Any]],
    node_rows: Iterable[Mapping[str, Any]],
    clique_of: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The snapshot's ``gpus`` entries: the DRA inventory's (:func:`dra.gpu_rows`, health from
    device taints, DeviceTaintRules and claim conditions) with NVSentinel's faults applied, plus
    an entry for each device-plugin GPU a fault names. ``node_rows``: the snapshot's nodes
    (their GPU counts bound the indexes a fault may name)."""
    nodes = list(nodes)
    rows = dra.gpu_rows(view, clique_of)
    entries = nvsentinel_entries(nodes)
    if not entries:
        return rows
    gpu_count = {str(n["name"]): int(n.get("gpus") or 0) for n in node_rows}
    by_uuid = {r["uuid"]: r for r in rows if r.get("uuid")}
    for entry in entries:
        if entry.node not in gpu_count:
            continue  # not a GPU node of the snapshot
        targets = _targets(entry, by_uuid, rows, gpu_count[entry.node])
        unplaced = len(targets) > 1 and entry.gpu_uuid is not None
        for row in targets:
            if unplaced:  # the metrics may know the UUID's index: they place it (merge_gpus)
                _note_unplaced(row, entry)
            _mark(row, entry, alone=len(targets) == 1)
            if not any(row is r for r in rows):
                rows.append(row)
    return sorted(rows, key=_order)


def _note_unplaced(row: dict[str, Any], entry: HealthEntry) -> None:
    """A fault whose GPU (by UUID) the scheduler cannot place, on every GPU of its node:
    ``faults_by_uuid`` for the metrics source, which knows each GPU's UUID, to move it to its
    GPU; ``health_only_by_uuid`` while nothing else made this GPU unhealthy."""
    if row.get("health", "ok") == "ok" or row.get("health_only_by_uuid"):
        row["health_only_by_uuid"] = True
    fault = {
        "uuid": entry.gpu_uuid,
        "reason": entry.reason,
        "xid": [{"code": code, "time": entry.since} for code in entry.xid_codes if entry.since],
    }
    row["faults_by_uuid"] = [*(row.get("faults_by_uuid") or ()), fault]


def _order(row: Mapping[str, Any]) -> tuple[str, int, int]:
    index = row.get("index")
    instance = (row.get("mig") or {}).get("instance")
    return (str(row["node"]), -1 if index is None else index, -1 if instance is None else instance)


def _targets(
    entry: HealthEntry,
    by_uuid: Mapping[str, dict[str, Any]],
    rows: list[dict[str, Any]],
    count: int,
) -> list[dict[str, Any]]:
    """The GPU entries an entry is about: the GPU it names (by UUID, else by index), or every
    GPU of its node when it names none the snapshot knows (new entries for the device-plugin
    GPUs the DRA inventory does not list)."""
    if entry.gpu_uuid and entry.gpu_uuid in by_uuid:
        named = by_uuid[entry.gpu_uuid]
        return [
            r for r in rows if r["node"] == named["node"] and r.get("index") == named.get("index")
        ]
    on_node = [r for r in rows if r["node"] == entry.node]
    if entry.gpu_index is not None and 0 <= entry.gpu_index < count:
        on_gpu = [r for r in on_node if r.get("index") == entry.gpu_index]
        return on_gpu or [_plain(entry, entry.gpu_index)]
    known = {r.get("index") for r in on_node}
    return on_node + [{"node": entry.node, "index": i} for i in range(count) if i not in known]


def _plain(entry: HealthEntry, index: int) -> dict[str, Any]:
    row: dict[str, Any] = {"node": entry.node, "index": index}
    if entry.gpu_uuid:
        row["uuid"] = entry.gpu_uuid
    return row


def _mark(row: dict[str, Any], entry: HealthEntry, *, alone: bool) -> None:
    row["health"] = "unhealthy"
    reasons = [r for r in str(row.get("health_reason") or "").split("; ") if r]
    if entry.reason not in reasons:
        reasons.append(entry.reason)
    row["health_reason"] = "; ".join(reasons)
    if alone and entry.since and "mig" not in row:  # an Xid belongs to one physical GPU
        xids = list(row.get("xid") or ())
        for code in entry.xid_codes:
            if not any(x["code"] == code and x["time"] == entry.since for x in xids):
                xids.append({"code": code, "time": entry.since})
        if xids:
            row["xid"] = xids
