"""Shared GPUs (time-slicing, MPS) as dcgm-exporter writes them, planted into the tests' Prometheus
history (tests/support/prometheus_fixtures.py), and a cardinality bomb.

Where each shape comes from (NVIDIA/dcgm-exporter, read at release 4.5.3-4.8.2;
``internal/pkg/transformation/kubernetes.go``, ``PodMapper.Process``, and
``process_metrics.go``):

- **copies** (``--kubernetes-virtual-gpus`` from 4.1.1-4.0.3, PR #432, up to 4.4.1-4.5.2): every
  field of a GPU that pods share is deep-copied to one series per pod, with ``pod``,
  ``namespace``, ``container`` and ``vgpu`` (the replica of the device plugin's device ID
  ``<uuid>::<n>``); there is no series without pod labels while a pod holds the GPU. The values
  are the device's: issue #587 (4.4.1-4.5.2) shows three pods at the same 0.714
  ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``.
- **per-process** (4.5.3-4.8.2, PR #594): ``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_DEV_FB_USED``
  (``isPerProcessMetric``) keep the device-level series as it was (no pod labels) and add one
  series per pod whose value is its processes' SM utilisation (percent, from
  ``nvmlDeviceGetProcessUtilization``) or used memory (MiB), labelled ``pod``, ``namespace``,
  ``container``, ``pod_uid`` (always) and ``vgpu``; a pod without processes gets ``0``. Every
  other field (``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, ``FB_FREE``, power...) is still copied per pod.

The series are written through the exporter's own format (``dcgm/exporter.py``: label order,
``Hostname`` as these releases spell it, integer fields as integers). The GPU is a Tesla T4
(15,360 MiB), the card of the GPU Operator's time-slicing examples.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from diagnosis.edge.sources.dcgm import fields as dcgm
from diagnosis.edge.sources.dcgm.exporter import GpuIdentity

T4 = "Tesla T4"
T4_FB_MIB = 15360
RESERVED_MIB = 256
NAMESPACE = "team-z"


@dataclass(frozen=True)
class SharedGpu:
    """One physical GPU's device-level reading, and the pods sharing it with their own part of
    it (what a 4.5.3 exporter reads per process: SM util in percent, memory in MiB)."""

    util: float
    fb_used_mib: float
    pods: Sequence[tuple[str, float, float]]  # (pod, util percent, used MiB)
    power_w: float = 40.0

    @property
    def fb_frac(self) -> float:
        return self.fb_used_mib / T4_FB_MIB


# Issue 27's figures: one GPU at 45% seen by two pods (copies); device 50%, pods 30% + 20%,
# framebuffer a third (per-process); and an idle shared GPU next to an idle unshared one.
COPIES = "ts-copies"
COPIES_GPU = SharedGpu(0.45, 5120, (("pod-a", 45, 5120), ("pod-b", 45, 5120)))
PER_PROCESS = "ts-process"
PER_PROCESS_GPU = SharedGpu(0.50, 5120, (("pod-a", 30, 3072), ("pod-b", 20, 2048)))
IDLE = "ts-idle"
IDLE_SHARED_GPU = SharedGpu(0.03, 6144, (("note-a", 3, 3072), ("note-b", 0, 3072)))
IDLE_SOLO_GPU = SharedGpu(0.03, 6144, (("note-c", 3, 6144),))
# Issue 29's cardinality bomb: 50 copies of one pod's series per GPU (a relabelling that mints a
# new ``pod`` value per scrape target), on four GPUs whose device-level util mean is 0.243.
BOMB = "bomb"
BOMB_UTIL = (0.10, 0.20, 0.30, 0.372)
BOMB_COPIES = 50


def _identity(host: str, index: int) -> GpuIdentity:
    digest = hashlib.blake2b(f"shared/{host}/{index}".encode(), digest_size=16).hexdigest()
    uuid = f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:]}"
    return GpuIdentity(host, index, uuid, T4)


def _labels(
    identity: GpuIdentity, cluster: str, pod: str | None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    labels = identity.labels(
        "Hostname",
        pod=(NAMESPACE, pod, "main") if pod else None,
        extra={"cluster": cluster},
    )
    labels.update(extra or {})
    return labels


def _device_fields(gpu: SharedGpu, profiling: bool) -> dict[str, float]:
    fields = {
        dcgm.GPU_UTIL: round(gpu.util * 100),
        dcgm.FB_USED: gpu.fb_used_mib,
        dcgm.FB_FREE: T4_FB_MIB - gpu.fb_used_mib - RESERVED_MIB,
        dcgm.FB_RESERVED: RESERVED_MIB,
        dcgm.POWER_USAGE: gpu.power_w,
        dcgm.GPU_TEMP: 50,
    }
    if profiling:
        fields[dcgm.GR_ENGINE_ACTIVE] = gpu.util
    return fields


def _pod_uid(replica: int) -> dict[str, str]:
    return {"pod_uid": f"7f3c2a10-0000-4000-8000-0000000000{replica:02d}"}


def plant_copies(
    history,
    cluster: str,
    host: str,
    index: int,
    gpu: SharedGpu,
    profiling: bool = True,
    pod_uid: bool = False,
) -> None:
    """Before 4.5.3: each pod's series carries a copy of every device field (labelled
    ``pod_uid`` too with ``--kubernetes-enable-pod-uid``)."""
    identity = _identity(host, index)
    for replica, (pod, _, _) in enumerate(gpu.pods):
        extra = {**(_pod_uid(replica) if pod_uid else {}), "vgpu": str(replica)}
        labels = _labels(identity, cluster, pod, extra)
        for name, value in _device_fields(gpu, profiling).items():
            history.add(name, labels, value)


def plant_per_process(
    history, cluster: str, host: str, index: int, gpu: SharedGpu, profiling: bool = True
) -> None:
    """4.5.3 on: the device-level util and framebuffer series, each pod's own part beside it,
    and copies of the other fields."""
    identity = _identity(host, index)
    device = _device_fields(gpu, profiling)
    for name in (dcgm.GPU_UTIL, dcgm.FB_USED):
        history.add(name, _labels(identity, cluster, None), device[name])
    for replica, (pod, util_pct, used_mib) in enumerate(gpu.pods):
        own = _labels(identity, cluster, pod, {**_pod_uid(replica), "vgpu": str(replica)})
        history.add(dcgm.GPU_UTIL, own, util_pct)
        history.add(dcgm.FB_USED, own, used_mib)
        copy = _labels(identity, cluster, pod, {"vgpu": str(replica)})
        for name, value in device.items():
            if name not in (dcgm.GPU_UTIL, dcgm.FB_USED):
                history.add(name, copy, value)


def plant_bomb(history) -> None:
    for index, util in enumerate(BOMB_UTIL):
        identity = _identity("bomb-0", index)
        gpu = SharedGpu(util, 4096, ())
        for copy in range(BOMB_COPIES):
            labels = _labels(identity, BOMB, f"infer-{index}-{copy:02d}")
            for name, value in _device_fields(gpu, True).items():
                history.add(name, labels, value)


def plant_shared(history) -> None:
    plant_copies(history, COPIES, "tc-0", 0, COPIES_GPU)
    plant_copies(history, COPIES, "tc-0", 1, COPIES_GPU, profiling=False)
    plant_copies(history, COPIES, "tc-1", 0, COPIES_GPU, profiling=False, pod_uid=True)
    plant_per_process(history, PER_PROCESS, "tp-0", 0, PER_PROCESS_GPU)
    plant_per_process(history, PER_PROCESS, "tp-0", 1, PER_PROCESS_GPU, profiling=False)
    plant_copies(history, IDLE, "ti-0", 0, IDLE_SHARED_GPU)
    plant_per_process(history, IDLE, "ti-1", 0, IDLE_SHARED_GPU)
    plant_copies(history, IDLE, "ti-2", 0, IDLE_SOLO_GPU)
    plant_per_process(history, IDLE, "ti-3", 0, IDLE_SOLO_GPU)
    plant_bomb(history)


def uuid_of(host: str, index: int) -> str:
    return _identity(host, index).uuid
