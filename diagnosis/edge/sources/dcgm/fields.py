"""dcgm-exporter's vocabulary: field names, label normalisation, and how its fields become the
snapshot's per-GPU statistics (docs/snapshot.md and docs/integrations.md). No I/O.

Label normalisation lives here and only here (:func:`normalize`). The label eras it reads:

- the host from ``hostname`` (the default since the 2026 rename) or ``Hostname`` (older releases,
  most dashboards); when that says ``localhost`` (a known exporter bug without host networking)
  or is missing, from the scrape target's ``node`` / ``kubernetes_node`` label or its
  ``instance`` (``host:port``, the port dropped);
- the GPU's ``UUID`` or ``uuid`` (in MIG mode: the parent GPU's);
- the workload from ``exported_pod``/``exported_namespace``/``exported_container`` (what
  Prometheus writes when a ServiceMonitor scrapes the exporter: ``pod`` then names the exporter's
  own pod), else ``pod``/``namespace``/``container``; Slurm's ``hpc_job``; and the DRA labels
  (``dra_claim_name``, ``dra_claim_namespace``, ``dra_pool_name``, ``dra_device_name``,
  ``dra_mig_profile``, ``dra_mig_device_uuid``);
- MIG instances (``GPU_I_ID``, profile ``GPU_I_PROFILE`` or ``dra_mig_profile``, the instance's
  own UUID from ``dra_mig_device_uuid`` where given) kept apart from each other and from their
  physical GPU: each is its own unit in the snapshot.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

# -- fields --------------------------------------------------------------------------------------

GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # ratio 0..1
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent
TENSOR_ACTIVE = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"  # ratio
FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
FB_FREE = "DCGM_FI_DEV_FB_FREE"  # MiB
FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"  # MiB
POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"  # W
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"  # C
PCIE_RX_BYTES = "DCGM_FI_PROF_PCIE_RX_BYTES"  # B/s (a gauge, whatever older docs say)
PCIE_TX_BYTES = "DCGM_FI_PROF_PCIE_TX_BYTES"  # B/s
NVLINK_RX_BYTES = "DCGM_FI_PROF_NVLINK_RX_BYTES"  # B/s
NVLINK_TX_BYTES = "DCGM_FI_PROF_NVLINK_TX_BYTES"  # B/s
# An instantaneous rate despite "# TYPE counter"; its unit is disputed (NVIDIA/dcgm-exporter#472
# says KB/s, KempnerInstitute/kempnerpulse#11 measured MB/s against nvidia-smi on H200), so the
# factor to bytes/s is a setting (``nvlink_total_unit_Bps``, default 1e6).
NVLINK_BANDWIDTH_TOTAL = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"  # gauge: the last Xid seen (labels err_code/err_msg lately)
XID_ERRORS_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"  # per ``xid`` label: Xids in the exporter's window
# Hardware health and hidden waste (issue 20). DRAM activity is a profiling field
# (etc/dcp-metrics-included.csv); SM clock, the remapper's fields and the violation counters
# are DCGM fields dcgm-exporter writes under their DCGM names (etc/default-counters.csv lists
# SM_CLOCK and the remapper; the violations are there, commented out). The clock-event
# reasons bitmask is field 112, DCGM_FI_DEV_CLOCKS_EVENT_REASONS since DCGM 3.3 and
# DCGM_FI_DEV_CLOCK_THROTTLE_REASONS before (NVIDIA/DCGM testing/python3/dcgm_fields.py).
DRAM_ACTIVE = "DCGM_FI_PROF_DRAM_ACTIVE"  # ratio
POWER_MGMT_LIMIT = "DCGM_FI_DEV_POWER_MGMT_LIMIT"  # W
SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"  # MHz
MAX_SM_CLOCK = "DCGM_FI_DEV_MAX_SM_CLOCK"  # MHz
CLOCKS_EVENT_REASONS = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"  # bitmask
CLOCK_THROTTLE_REASONS = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"  # the same, its older name
THERMAL_VIOLATION = "DCGM_FI_DEV_THERMAL_VIOLATION"  # µs throttled, since boot
POWER_VIOLATION = "DCGM_FI_DEV_POWER_VIOLATION"  # µs throttled, since boot
ROW_REMAP_PENDING = "DCGM_FI_DEV_ROW_REMAP_PENDING"  # 0/1
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"  # 0/1
UNCORRECTABLE_REMAPPED_ROWS = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"  # rows, since made
# The reasons' bits (DCGM_CLOCKS_EVENT_REASON_*): thermal = SW_THERMAL 0x20 | HW_THERMAL 0x40,
# power = SW_POWER_CAP 0x4 | HW_POWER_BRAKE 0x80.
THERMAL_REASON_BITS = (0x20, 0x40)
POWER_REASON_BITS = (0x4, 0x80)

# Multi-node NVLink (GB200/GB300 NVL72): the GPU's fabric clique (DCGM field 173, an integer) and
# the fabric cluster's UUID (field 172, a string, so dcgm-exporter can only write it as a label
# when its counters CSV lists it with type ``label``). Together: the cluster-wide NVLink domain,
# written as ``<cluster uuid>.<clique id>`` like the ``nvidia.com/gpu.clique`` node label.
FABRIC_CLIQUE_ID = "DCGM_FI_DEV_FABRIC_CLIQUE_ID"
FABRIC_CLUSTER_UUID = "DCGM_FI_DEV_FABRIC_CLUSTER_UUID"
# The node-exporter textfile metric that deploy/topology/gpuobs-topology-textfile writes from
# ``nvidia-smi topo -m``: one series per GPU, labels hostname, gpu, nvlink_domain, numa.
TOPOLOGY_TEXTFILE = "gpuobs_gpu_topology"

# HELP and TYPE as dcgm-exporter writes them (etc/default-counters.csv, dcp-metrics-included.csv).
FIELD_HELP: dict[str, tuple[str, str]] = {
    GR_ENGINE_ACTIVE: ("gauge", "Ratio of time the graphics engine is active."),
    GPU_UTIL: ("gauge", "GPU utilization (in %)."),
    TENSOR_ACTIVE: ("gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    FB_USED: ("gauge", "Framebuffer memory used (in MiB)."),
    FB_FREE: ("gauge", "Framebuffer memory free (in MiB)."),
    FB_RESERVED: ("gauge", "Framebuffer memory reserved (in MiB)."),
    POWER_USAGE: ("gauge", "Power draw (in W)."),
    GPU_TEMP: ("gauge", "GPU temperature (in C)."),
    PCIE_RX_BYTES: (
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and "
        "data payloads - in bytes per second.",
    ),
    PCIE_TX_BYTES: (
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and "
        "data payloads - in bytes per second.",
    ),
    NVLINK_RX_BYTES: (
        "gauge",
        "The rate of data received over NVLink, not including protocol headers, in bytes per "
        "second.",
    ),
    NVLINK_TX_BYTES: (
        "gauge",
        "The rate of data transmitted over NVLink, not including protocol headers, in bytes per "
        "second.",
    ),
    NVLINK_BANDWIDTH_TOTAL: (
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
    ),
    XID_ERRORS: ("gauge", "Value of the last XID error encountered."),
    DRAM_ACTIVE: (
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
    POWER_MGMT_LIMIT: ("gauge", "Power management limit (in W)."),
    SM_CLOCK: ("gauge", "SM clock frequency (in MHz)."),
    MAX_SM_CLOCK: ("gauge", "Maximum supported SM clock for the device (in MHz)."),
    CLOCKS_EVENT_REASONS: ("gauge", "Current clock event reasons (bitmask)."),
    THERMAL_VIOLATION: ("counter", "Throttling duration due to thermal constraints (in us)."),
    POWER_VIOLATION: ("counter", "Throttling duration due to power constraints (in us)."),
    ROW_REMAP_PENDING: ("gauge", "Whether remapping of rows is pending."),
    ROW_REMAP_FAILURE: ("gauge", "Whether remapping of rows has failed"),
    UNCORRECTABLE_REMAPPED_ROWS: (
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    XID_ERRORS_COUNT: ("counter", "reported XIDs during last window"),
    FABRIC_CLIQUE_ID: ("gauge", "Fabric clique ID."),
    TOPOLOGY_TEXTFILE: (
        "gauge",
        "GPU topology from nvidia-smi topo -m: NVLink domain and NUMA node per GPU (always 1).",
    ),
}


def fabric_clique(cluster_uuid: str, clique_id: float) -> str | None:
    """The cluster-wide NVLink domain of a GPU, ``<cluster uuid>.<clique id>``; None when the GPU
    is in no fabric (no or an all-zero cluster UUID, no clique id)."""
    if not cluster_uuid or not cluster_uuid.strip("0-") or clique_id != clique_id:
        return None
    return f"{cluster_uuid}.{int(clique_id)}"


# -- labels --------------------------------------------------------------------------------------

HOST_LABELS = ("hostname", "Hostname")
# The scrape target's node, for series whose host label is missing or "localhost".
TARGET_HOST_LABELS = ("node", "kubernetes_node", "instance")
LOCALHOST = frozenset({"localhost", "localhost.localdomain", "127.0.0.1"})
DRA_LABELS = (
    "dra_claim_name",
    "dra_claim_namespace",
    "dra_pool_name",
    "dra_device_name",
    "dra_mig_profile",
    "dra_mig_device_uuid",
)
UUID_LABELS = ("UUID", "uuid")
MIG_LABELS = ("GPU_I_PROFILE", "GPU_I_ID")
WORKLOAD_LABELS = (
    "exported_namespace",
    "exported_pod",
    "exported_container",
    "namespace",
    "pod",
    "container",
    "hpc_job",
)
# What the statistics queries group by: the GPU (either UUID spelling) and its MIG instance.
KEY_LABELS = ("UUID", "uuid", "GPU_I_ID")
# What the inventory query keeps: the key plus where the GPU is and who uses it.
INVENTORY_LABELS = (
    *KEY_LABELS,
    *HOST_LABELS,
    "gpu",
    "modelName",
    "GPU_I_PROFILE",
    *WORKLOAD_LABELS,
    *DRA_LABELS,
    *TARGET_HOST_LABELS,
)


def first_of(labels: Mapping[str, str], names: tuple[str, ...]) -> str:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return ""


def uuid_of(labels: Mapping[str, str]) -> str:
    return first_of(labels, UUID_LABELS)


def host_of(labels: Mapping[str, str]) -> str:
    """The GPU's host: its host label, else (missing or ``localhost``) the scrape target's."""
    host = first_of(labels, HOST_LABELS)
    if host and host not in LOCALHOST:
        return host
    target = first_of(labels, TARGET_HOST_LABELS[:2])
    if target:
        return target
    instance = labels.get("instance") or ""
    if instance.startswith("["):  # [ipv6]:port
        instance = instance[1:].split("]", 1)[0]
    elif instance.count(":") == 1:
        instance = instance.split(":", 1)[0]
    return instance if instance and instance not in LOCALHOST else host


def instance_of(labels: Mapping[str, str]) -> str:
    """The MIG GPU instance id, "" for a whole GPU."""
    return labels.get("GPU_I_ID") or ""


def keys_of(series: list[Mapping[str, str]]) -> tuple[list[str], list[str]]:
    """:func:`uuid_of` and :func:`instance_of` of many series at once (the same rules, inlined
    for speed: this runs once per series and statistic)."""
    uuids = [s.get("UUID") or s.get("uuid") or "" for s in series]
    instances = [s.get("GPU_I_ID") or "" for s in series]
    return uuids, instances


class Workload(NamedTuple):
    namespace: str = ""
    pod: str = ""
    container: str = ""
    hpc_job: str = ""
    claim: str = ""  # DRA ResourceClaim as namespace/name
    pool: str = ""  # DRA pool (a node's ResourceSlice pool) and device name
    device: str = ""

    def __bool__(self) -> bool:
        return bool(self.pod or self.hpc_job or self.claim)

    def as_text(self) -> str:
        """``namespace/pod`` (``/container`` when known), or ``hpc_job:<id>``, or
        ``claim:<namespace>/<name>`` (a DRA claim whose pod the exporter did not name)."""
        if self.pod:
            text = f"{self.namespace}/{self.pod}" if self.namespace else self.pod
            return f"{text}/{self.container}" if self.container else text
        if self.hpc_job:
            return f"hpc_job:{self.hpc_job}"
        return f"claim:{self.claim}" if self.claim else ""


def workload_of(labels: Mapping[str, str]) -> Workload:
    """Who uses the GPU. ``exported_*`` wins: when Prometheus scraped the exporter through a
    ServiceMonitor, ``pod``/``namespace``/``container`` name the exporter's own pod."""
    claim_name = labels.get("dra_claim_name") or ""
    claim_namespace = labels.get("dra_claim_namespace") or ""
    dra = {
        "claim": f"{claim_namespace}/{claim_name}"
        if claim_namespace and claim_name
        else claim_name,
        "pool": labels.get("dra_pool_name") or "",
        "device": labels.get("dra_device_name") or "",
    }
    if labels.get("exported_pod"):
        return Workload(
            namespace=labels.get("exported_namespace", ""),
            pod=labels["exported_pod"],
            container=labels.get("exported_container", ""),
            hpc_job=labels.get("hpc_job", ""),
            **dra,
        )
    return Workload(
        namespace=labels.get("namespace", ""),
        pod=labels.get("pod", ""),
        container=labels.get("container", ""),
        hpc_job=labels.get("hpc_job", ""),
        **dra,
    )


class GpuLabels(NamedTuple):
    """A dcgm-exporter series' identity, normalised (a tuple: one is made per series)."""

    uuid: str
    instance: str  # MIG GPU instance id, "" for a whole GPU
    host: str
    gpu: int | None
    model: str
    mig_profile: str
    workload: Workload
    mig_uuid: str = ""  # the MIG instance's own UUID (dra_mig_device_uuid), when given

    @property
    def key(self) -> tuple[str, str]:
        return (self.uuid, self.instance)


def normalize(labels: Mapping[str, str]) -> GpuLabels:
    gpu = labels.get("gpu", "")
    return GpuLabels(
        uuid_of(labels),
        instance_of(labels),
        host_of(labels),
        int(gpu) if gpu.isdigit() else None,
        labels.get("modelName", ""),
        labels.get("GPU_I_PROFILE") or labels.get("dra_mig_profile") or "",
        workload_of(labels),
        labels.get("dra_mig_device_uuid") or "",
    )


# -- MIG -----------------------------------------------------------------------------------------

_PROFILE_SLICES = re.compile(r"^(\d+)g\.")


def mig_share(profile: str, model: str) -> float:
    """The share of a physical GPU's compute a MIG profile holds: ``3g.40gb`` on an A100 is 3/7
    (A30: slices of 4). Unknown profiles count as 0 (their activity cannot be placed)."""
    match = _PROFILE_SLICES.match(profile or "")
    if not match:
        return 0.0
    slices = 4 if "A30" in (model or "") else 7
    return min(1.0, int(match.group(1)) / slices)


# -- hosts ---------------------------------------------------------------------------------------


def host_index(node_names: list[str]) -> dict[str, str]:
    """Host label value -> node name: exact names, and short names (before the first dot) when
    they are unambiguous, so ``gpu-001.example.org`` and ``gpu-001`` find each other."""
    index = {name: name for name in node_names}
    short: dict[str, list[str]] = {}
    for name in node_names:
        short.setdefault(name.split(".", 1)[0], []).append(name)
    for short_name, names in short.items():
        if len(names) == 1 and short_name not in index:
            index[short_name] = names[0]
    return index


def node_for_host(host: str, index: Mapping[str, str]) -> str | None:
    if not host:
        return None
    return index.get(host) or index.get(host.split(".", 1)[0])
