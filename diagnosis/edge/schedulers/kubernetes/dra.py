"""GPUs through Dynamic Resource Allocation (``resource.k8s.io/v1``), NVIDIA's DRA driver
``gpu.nvidia.com``: the inventory from ResourceSlices, the allocation from ResourceClaims.

Pure functions over the API's plain dicts; the adapters list ResourceSlices, ResourceClaims and
DeviceClasses where the API serves them and hand them here.

- **Inventory.** Each node's devices of driver ``gpu.nvidia.com`` in the newest
  ``pool.generation`` of its pool (older generations are being replaced). A device of attribute
  ``type: gpu`` is a physical GPU; ``type: mig`` a MIG instance of the GPU ``parentUUID``. A MIG
  device that draws on a counter set (``consumesCounters``, partitionable devices) is one of
  several alternative ways to cut its GPU, not extra capacity: it counts only once a claim holds
  it. The device name carries the GPU's minor number (``gpu-3``), not the NVML index that
  dcgm-exporter's ``gpu`` label reports, so the snapshot's index is the GPU's rank by minor
  number on its node, **marked guessed** (``index_guessed``); the UUID is exact and is what
  joins metrics and jobs. A MIG instance's ``instance`` is its ordinal on its GPU in placement
  order (the driver's names carry the placement, not DCGM's ``GPU_I_ID``): join by UUID.
- **Allocation.** ``status.allocation.devices.results[]`` of each ResourceClaim (driver, pool,
  device; ``consumedCapacity`` for a share of a device), to the pods of ``status.reservedFor``
  (a shared claim serves several: each holds an equal share). Results with ``adminAccess``
  (monitoring agents) hold nothing.
- **Health.** A device taint with effect ``NoSchedule``/``NoExecute`` (DRA device taints, in
  the ResourceSlice or put there by a DeviceTaintRule), a claim's ``status.devices[].conditions``
  ``Ready``/``Healthy`` False, or a pod's ``allocatedResourcesStatus`` ``Unhealthy`` for the
  device makes it ``unhealthy`` with the reason. A DeviceTaintRule (``resource.k8s.io``
  ``devicetaintrules``, cluster-scoped) taints every device its ``spec.deviceSelector`` matches
  by ``driver``, ``pool`` and ``device`` (all given must match; an empty selector matches all);
  a rule that selects by ``deviceClassName`` or CEL ``selectors`` is not evaluated here and
  taints nothing, and effect ``None`` is informational (Kubernetes reference: DeviceTaintRule
  v1beta2; "Device Taints and Tolerations"). NVSentinel's node conditions are applied on top
  (:mod:`.health`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from diagnosis.edge.schedulers.kubernetes.client import quantity

DRIVER = "gpu.nvidia.com"
# NVIDIA's DRA driver installs these DeviceClasses; any class whose CEL selector names the
# driver counts too.
GPU_DEVICE_CLASSES = frozenset({"gpu.nvidia.com", "mig.nvidia.com"})
TAINT_EFFECTS = ("NoSchedule", "NoExecute")
_MINOR = re.compile(r"^gpu-(\d+)")
_SLICES = re.compile(r"^(\d+)g\.")
# gpu-<minor>-mig-<profile>-<profile id>-<placement start> (the driver's canonical MIG name)
_MIG_PLACEMENT = re.compile(r"^gpu-\d+-mig-.+-\d+-(\d+)\Z")


def count(value: Any, default: int = 0) -> int:
    """A whole number from an API field (an int, or a numeric string); ``default`` for anything
    else -- a malformed object is read as if the field were absent, never a crash."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return default


def attribute(device: Mapping[str, Any], name: str) -> Any:
    """A device attribute's value (``string``, ``int``, ``bool`` or ``version``), by its short
    name or qualified with the driver's domain; None when absent."""
    attributes = device.get("attributes") or {}
    entry = attributes.get(name) or attributes.get(f"{DRIVER}/{name}")
    if not isinstance(entry, Mapping):
        return None
    for kind in ("string", "int", "bool", "version"):
        if kind in entry:
            return entry[kind]
    return None


def pool_model(product: str | None) -> str | None:
    """A productName as GPU Feature Discovery writes it in ``nvidia.com/gpu.product`` (spaces
    become dashes), so a DRA node falls in the same pool as its device-plugin twin."""
    return None if not product else product.strip().replace(" ", "-")


@dataclass(frozen=True)
class Device:
    """One published device of the driver."""

    node: str
    pool: str
    name: str
    uuid: str | None
    product: str | None
    type: str  # "gpu", "mig", or what the driver says
    parent_uuid: str | None
    profile: str | None
    minor: int | None
    alternative: bool  # draws on a counter set: one of several ways to cut its GPU
    capacity: Mapping[str, Decimal]
    taints: tuple[str, ...]

    @property
    def key(self) -> tuple[str, str]:
        return (self.pool, self.name)


@dataclass
class NodeGpus:
    """A node's physical GPUs (by UUID, ranked by minor number) and its MIG devices."""

    node: str
    gpus: list[Device] = field(default_factory=list)
    migs: list[Device] = field(default_factory=list)
    parents: dict[str, int] = field(default_factory=dict)  # parent UUID -> index

    def index_of(self, device: Device) -> int | None:
        key = device.parent_uuid if device.type == "mig" else gpu_key(device)
        return self.parents.get(key or "")

    @property
    def model(self) -> str | None:
        for device in (*self.gpus, *self.migs):
            if device.product:
                return device.product
        return None


def gpu_key(device: Device) -> str:
    """A physical GPU's key on its node: its UUID, or (a driver that publishes none) its pool
    and device name."""
    return device.uuid or f"device:{device.pool}/{device.name}"


def newest_slices(slices: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The driver's ResourceSlices of the newest generation of each pool."""
    ours = [s for s in slices if (s.get("spec") or {}).get("driver") == DRIVER]
    newest: dict[str, int] = {}
    for piece in ours:
        pool = (piece.get("spec") or {}).get("pool") or {}
        name = str(pool.get("name") or "")
        newest[name] = max(newest.get(name, 0), count(pool.get("generation")))
    return [
        s
        for s in ours
        if count(((s.get("spec") or {}).get("pool") or {}).get("generation"))
        == newest[str(((s.get("spec") or {}).get("pool") or {}).get("name") or "")]
    ]


def _taints(device: Mapping[str, Any]) -> tuple[str, ...]:
    reasons = []
    for taint in device.get("taints") or ():
        if taint.get("effect") in TAINT_EFFECTS:
            value = taint.get("value")
            reasons.append(f"taint {taint.get('key')}" + (f"={value}" if value else ""))
    return tuple(reasons)


def taint_rule_taints(
    found: Iterable[Device], rules: Iterable[Mapping[str, Any]]
) -> dict[tuple[str, str], tuple[str, ...]]:
    """The taints DeviceTaintRules put on the devices, by (pool, device): effect ``NoSchedule``
    or ``NoExecute`` only, and only rules selecting by driver, pool and device name."""
    found = list(found)
    added: dict[tuple[str, str], list[str]] = {}
    for rule in rules:
        spec = rule.get("spec") or {}
        taint = spec.get("taint") or {}
        selector = spec.get("deviceSelector")
        if taint.get("effect") not in TAINT_EFFECTS or selector is None:
            continue
        if selector.get("deviceClassName") or selector.get("selectors"):
            continue  # CEL and class selectors: not evaluated here
        value = taint.get("value")
        name = str(meta_name(rule))
        reason = f"taint {taint.get('key')}" + (f"={value}" if value else "") + f" (rule {name})"
        for device in found:
            if selector.get("driver") and selector["driver"] != DRIVER:
                continue
            if selector.get("pool") and selector["pool"] != device.pool:
                continue
            if selector.get("device") and selector["device"] != device.name:
                continue
            added.setdefault(device.key, []).append(reason)
    return {key: tuple(reasons) for key, reasons in added.items()}


def meta_name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _text(value: Any) -> str | None:
    """A string attribute; anything else (a number where a name belongs) is unknown."""
    return value if isinstance(value, str) and value else None


def devices(slices: Iterable[Mapping[str, Any]]) -> list[Device]:
    """Every device of the driver's newest ResourceSlices that sits on one node."""
    found = []
    for piece in newest_slices(slices):
        spec = piece.get("spec") or {}
        node = spec.get("nodeName")
        if not node:
            continue  # network-attached pools (allNodes / nodeSelector) hold no node's GPUs
        pool = str((spec.get("pool") or {}).get("name") or "")
        for device in spec.get("devices") or ():
            name = str(device.get("name") or "")
            match = _MINOR.match(name)
            capacity = {
                str(k): q
                for k, v in (device.get("capacity") or {}).items()
                if (q := quantity((v or {}).get("value"))) is not None
            }
            found.append(
                Device(
                    node=str(node),
                    pool=pool,
                    name=name,
                    uuid=_text(attribute(device, "uuid")),
                    product=_text(attribute(device, "productName")),
                    type=_text(attribute(device, "type")) or "gpu",
                    parent_uuid=_text(attribute(device, "parentUUID")),
                    profile=_text(attribute(device, "profile")),
                    minor=int(match.group(1)) if match else None,
                    alternative=bool(device.get("consumesCounters")),
                    capacity=capacity,
                    taints=_taints(device),
                )
            )
    return found


def inventory(
    found: Iterable[Device], allocated: Iterable[tuple[str, str]] = ()
) -> dict[str, NodeGpus]:
    """Each node's GPUs. A static MIG device (no counters) always counts; an alternative one only
    when ``allocated`` names it. A MIG device's parent counts as a GPU of the node even when the
    driver does not publish the parent itself (a MIG-enabled GPU shows only its instances)."""
    held = set(allocated)
    nodes: dict[str, NodeGpus] = {}
    parent_minor: dict[tuple[str, str], int | None] = {}
    for device in found:
        entry = nodes.setdefault(device.node, NodeGpus(device.node))
        if device.type == "mig":
            if device.alternative and device.key not in held:
                continue
            entry.migs.append(device)
            if device.parent_uuid:
                parent_minor.setdefault((device.node, device.parent_uuid), device.minor)
        elif device.type == "gpu":
            entry.gpus.append(device)
            parent_minor[(device.node, gpu_key(device))] = device.minor
    for (node, uuid), minor in parent_minor.items():
        nodes[node].parents[uuid] = minor if minor is not None else 1 << 30
    for entry in nodes.values():
        ranked = sorted(entry.parents.items(), key=lambda item: (item[1], item[0]))
        entry.parents = {uuid: rank for rank, (uuid, _) in enumerate(ranked)}
    return {name: entry for name, entry in nodes.items() if entry.parents}


def compute_fraction(profile: str | None, product: str | None) -> float | None:
    """A MIG profile's share of its GPU's compute (``3g.40gb`` on an A100/H100: 3 of 7 slices;
    A30: of 4); None when the profile does not say."""
    match = _SLICES.match(profile or "")
    if match is None:
        return None
    slices = 4 if "A30" in (product or "") else 7
    return min(int(match.group(1)) / slices, 1.0)


# -- claims --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Held:
    """One device a pod holds through a claim."""

    pool: str
    device: str
    share: float | None  # None: the whole device


def _share(result: Mapping[str, Any], device: Device | None) -> float | None:
    consumed = result.get("consumedCapacity") or {}
    if not consumed or device is None:
        return None
    shares = []
    for name, value in consumed.items():
        total = device.capacity.get(str(name))
        amount = quantity(value)
        if total and amount is not None and total > 0:
            shares.append(float(amount / total))
    return min(max(shares), 1.0) if shares else None


def claim_holdings(
    claims: Iterable[Mapping[str, Any]], by_key: Mapping[tuple[str, str], Device]
) -> dict[str, list[Held]]:
    """The devices each pod (by uid) holds through allocated, reserved claims of the driver.

    A claim reserved for several pods (a shared claim) gives each an equal share of its devices
    (or of its ``consumedCapacity`` share); ``adminAccess`` results hold nothing."""
    result: dict[str, list[Held]] = defaultdict(list)
    for claim in claims:
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or ()
        pods = [
            str(r.get("uid"))
            for r in status.get("reservedFor") or ()
            if r.get("resource") == "pods" and r.get("uid")
        ]
        if not pods:
            continue
        for entry in results:
            if entry.get("driver") != DRIVER or entry.get("adminAccess"):
                continue
            key = (str(entry.get("pool") or ""), str(entry.get("device") or ""))
            share = _share(entry, by_key.get(key))
            if len(pods) > 1:
                share = (share or 1.0) / len(pods)
            for uid in pods:
                result[uid].append(Held(key[0], key[1], share))
    return result


def claim_health(
    claims: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> dict[tuple[str, str], str]:
    """Devices reported unhealthy, by (pool, device): a claim's device condition ``Ready`` or
    ``Healthy`` False, or a pod's ``allocatedResourcesStatus`` ``Unhealthy`` (resource IDs
    ``driver/pool/device``)."""
    bad: dict[tuple[str, str], str] = {}
    for claim in claims:
        for entry in (claim.get("status") or {}).get("devices") or ():
            if entry.get("driver") != DRIVER:
                continue
            for condition in entry.get("conditions") or ():
                if (
                    condition.get("type") in ("Ready", "Healthy")
                    and condition.get("status") == "False"
                ):
                    reason = condition.get("reason") or condition.get("type")
                    message = condition.get("message")
                    key = (str(entry.get("pool") or ""), str(entry.get("device") or ""))
                    bad[key] = f"{reason}: {message}" if message else str(reason)
    for pod in pods:
        statuses = (pod.get("status") or {}).get("containerStatuses") or ()
        for container in statuses:
            for resource in container.get("allocatedResourcesStatus") or ():
                for item in resource.get("resources") or ():
                    if item.get("health") != "Unhealthy":
                        continue
                    driver, _, rest = str(item.get("resourceID") or "").partition("/")
                    pool, _, device = rest.rpartition("/")
                    if driver == DRIVER and device:
                        bad.setdefault((pool, device), f"pod resource health Unhealthy ({pool})")
    return bad


def is_gpu_class(device_class: Mapping[str, Any]) -> bool:
    """A DeviceClass that selects the driver's devices."""
    name = str((device_class.get("metadata") or {}).get("name") or "")
    if name in GPU_DEVICE_CLASSES:
        return True
    selectors = (device_class.get("spec") or {}).get("selectors") or ()
    return any(DRIVER in str((s.get("cel") or {}).get("expression") or "") for s in selectors)


def claim_gpu_request(claim_spec: Mapping[str, Any], gpu_classes: set[str]) -> int:
    """Whole GPUs a claim (or claim template) asks: ``exactly`` requests of a GPU class with
    ``allocationMode: ExactCount`` (``count``, default 1), or the first such alternative."""
    total = 0
    for request in (claim_spec.get("devices") or {}).get("requests") or ():
        options = [request.get("exactly")] if request.get("exactly") else []
        options += list(request.get("firstAvailable") or ())
        for option in options:
            if not option or option.get("deviceClassName") not in gpu_classes:
                continue
            if option.get("adminAccess"):
                break
            if (option.get("allocationMode") or "ExactCount") == "ExactCount":
                total += max(count(option.get("count"), 1), 0)
            break
    return total


@dataclass(frozen=True)
class DraView:
    """What the adapters need from DRA: each node's GPUs, each pod's devices, bad devices, and the
    GPUs each pending pod's claims ask."""

    nodes: Mapping[str, NodeGpus]
    by_key: Mapping[tuple[str, str], Device]
    holdings: Mapping[str, list[Held]]
    unhealthy: Mapping[tuple[str, str], str]
    claim_asks: Mapping[tuple[str, str], int]  # (namespace, claim name) -> GPUs
    template_asks: Mapping[tuple[str, str], int]

    @classmethod
    def empty(cls) -> DraView:
        return cls({}, {}, {}, {}, {}, {})

    def pod_ask(self, pod: Mapping[str, Any]) -> int:
        """GPUs a pod asks through its resource claims (named claims, claim templates, or the
        claims its status says were made for it)."""
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        made = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        }
        total = 0
        for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
            claim = entry.get("resourceClaimName") or made.get(entry.get("name"))
            if claim and (namespace, claim) in self.claim_asks:
                total += self.claim_asks[(namespace, claim)]
            elif entry.get("resourceClaimTemplateName"):
                total += self.template_asks.get((namespace, entry["resourceClaimTemplateName"]), 0)
        return total


def build_view(
    slices: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    device_classes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    templates: Iterable[Mapping[str, Any]] = (),
    taint_rules: Iterable[Mapping[str, Any]] = (),
) -> DraView:
    """The DRA view of a cluster from its ResourceSlices, ResourceClaims, DeviceClasses, pods,
    ResourceClaimTemplates and DeviceTaintRules (pure)."""
    claims, pods = list(claims), list(pods)
    found = devices(slices)
    ruled = taint_rule_taints(found, taint_rules)
    found = [replace(d, taints=d.taints + ruled[d.key]) if d.key in ruled else d for d in found]
    by_key = {d.key: d for d in found}
    holdings = claim_holdings(claims, by_key)
    allocated = {(h.pool, h.device) for held in holdings.values() for h in held}
    classes = {
        str((c.get("metadata") or {}).get("name")) for c in device_classes if is_gpu_class(c)
    }
    classes |= GPU_DEVICE_CLASSES

    def named(obj: Mapping[str, Any]) -> tuple[str, str]:
        metadata = obj.get("metadata") or {}
        return (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))

    return DraView(
        nodes=inventory(found, allocated),
        by_key=by_key,
        holdings=holdings,
        unhealthy=claim_health(claims, pods),
        claim_asks={named(c): claim_gpu_request(c.get("spec") or {}, classes) for c in claims},
        template_asks={
            named(t): claim_gpu_request(((t.get("spec") or {}).get("spec") or {}), classes)
            for t in templates
        },
    )


def gpu_rows(view: DraView, clique_of: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The snapshot's ``gpus`` entries of the DRA nodes: one per physical GPU (a MIG-enabled GPU:
    one per MIG instance instead), with its UUID, health, guessed index and, for MIG, the
    instance."""
    rows = []
    for _, entry in sorted(view.nodes.items()):
        split = {d.parent_uuid for d in entry.migs}
        for device in entry.gpus:
            if device.uuid in split:
                continue
            rows.append(_gpu_row(view, entry, device, clique_of))
        per_parent: dict[str, int] = defaultdict(int)
        for device in sorted(entry.migs, key=_placement_order):
            row = _gpu_row(view, entry, device, clique_of)
            instance = per_parent[device.parent_uuid or ""]
            per_parent[device.parent_uuid or ""] += 1
            mig = {
                "profile": device.profile,
                "instance": instance,
                "parent_uuid": device.parent_uuid,
            }
            fraction = compute_fraction(device.profile, device.product)
            if fraction is not None:
                mig["compute_fraction"] = round(fraction, 6)
            row["mig"] = {k: v for k, v in mig.items() if v is not None}
            rows.append(row)
    return rows


def _placement_order(device: Device) -> tuple[int, str]:
    """MIG devices of a GPU in the order of their placement on it (the canonical name's last
    number), so an instance number is stable while the GPU's layout is."""
    match = _MIG_PLACEMENT.match(device.name)
    return (int(match.group(1)) if match else 1 << 30, device.name)


def _gpu_row(
    view: DraView, entry: NodeGpus, device: Device, clique_of: Mapping[str, str] | None
) -> dict[str, Any]:
    reasons = list(device.taints)
    if device.key in view.unhealthy:
        reasons.append(view.unhealthy[device.key])
    row: dict[str, Any] = {
        "node": entry.node,
        "index": entry.index_of(device),
        "index_guessed": True,
        "uuid": device.uuid,
        "health": "unhealthy" if reasons else "ok",
    }
    if reasons:
        row["health_reason"] = "; ".join(reasons)
    clique = (clique_of or {}).get(entry.node)
    if clique:
        row["nvlink_clique"] = clique
    return {k: v for k, v in row.items() if v is not None}
