"""Alertmanager webhook payloads (version 4) parsed into typed objects (the edge).

:func:`parse_webhook` checks an untrusted body and returns a :class:`WebhookMessage`, or raises
:class:`AlertmanagerPayloadError` listing every bad field by its path (``alerts[2].startsAt``).
:func:`classify` says whether an alert is about a GPU: an **Xid** (an ``err_code`` or ``xid``
label, as dcgm-exporter's ``DCGM_FI_DEV_XID_ERRORS`` carries, or an alert name configured as an
Xid alert) or a **GPU health failure** (an alert name configured as one), and where: node
(``Hostname``/``hostname``/``node``/``instance``), GPU index (``gpu``), UUID, and the pods or
Slurm job the exporter mapped onto that GPU.

Pure: no Django, no I/O. See docs/integrations.md (Alertmanager).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from diagnosis.core.vocabulary import parse_time

WEBHOOK_VERSION = "4"
# Alertmanager sends this for "no end time" (Go's zero time).
ZERO_TIME_PREFIX = "0001-01-01"

DEFAULT_XID_ALERTS = frozenset({"GPUXidError", "GpuXidError", "DCGMXidError", "NvidiaXidError"})
DEFAULT_HEALTH_ALERTS = frozenset(
    {"GPUHealthFailure", "GpuUnhealthy", "GPUUnhealthy", "DCGMHealthFailure", "GPUFellOffTheBus"}
)
XID_LABELS = ("err_code", "xid")
NODE_LABELS = ("Hostname", "hostname", "node", "kubernetes_node", "instance")
GPU_LABELS = ("gpu", "GPU", "gpu_index")
UUID_LABELS = ("UUID", "uuid", "gpu_uuid")

# What one stored alert may hold (the incident's columns): longer or odd values make the alert
# rejected, with a reason, while the rest of its batch is stored.
MAX_FINGERPRINT = 100
MAX_NODE = 253  # a DNS name
MAX_GPU_INDEX = 32767
MAX_XID = 2**31 - 1
MAX_TEXT = 64 * 1024
# Alert times gpuobs can compute with (windows around them, ages): a year-9999 startsAt is
# rejected by name, never an OverflowError in the receiver.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)


class AlertmanagerPayloadError(ValueError):
    """A webhook body that is not a version-4 Alertmanager payload; ``errors`` names each bad
    field by its path."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("; ".join(errors))


@dataclass(frozen=True)
class Alert:
    status: Literal["firing", "resolved"]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: datetime
    ends_at: datetime | None  # None while firing without an end
    generator_url: str
    fingerprint: str

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")

    def as_webhook(self) -> dict[str, Any]:
        """The alert in the webhook's own shape (version 4), which :func:`parse_webhook` reads
        back: what the receiver stores for a worker to turn into an incident."""
        raw: dict[str, Any] = {
            "status": self.status,
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "startsAt": self.starts_at.isoformat(),
            "generatorURL": self.generator_url,
            "fingerprint": self.fingerprint,
        }
        if self.ends_at is not None:
            raw["endsAt"] = self.ends_at.isoformat()
        return raw

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for an incident's details."""
        return {
            "status": self.status,
            "name": self.name,
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "starts_at": self.starts_at.isoformat(),
            "ends_at": self.ends_at.isoformat() if self.ends_at else None,
            "generator_url": self.generator_url,
            "fingerprint": self.fingerprint,
        }


@dataclass(frozen=True)
class WebhookMessage:
    version: str
    status: Literal["firing", "resolved"]
    receiver: str
    group_key: str
    group_labels: Mapping[str, str]
    common_labels: Mapping[str, str]
    common_annotations: Mapping[str, str]
    external_url: str
    truncated_alerts: int
    alerts: tuple[Alert, ...]


class _Checker:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def fail(self, path: str, message: str) -> None:
        self.errors.append(f"{path}: {message}")

    def text(self, obj: Mapping[str, Any], key: str, path: str, *, required: bool = True) -> str:
        value = obj.get(key)
        if value is None:
            if required:
                self.fail(_join(path, key), "required field is missing")
            return ""
        if not isinstance(value, str):
            self.fail(_join(path, key), f"expected a string, got {type(value).__name__}")
            return ""
        return value

    def status(self, obj: Mapping[str, Any], path: str) -> Any:
        value = obj.get("status")
        if value not in ("firing", "resolved"):
            self.fail(_join(path, "status"), f"expected 'firing' or 'resolved', got {value!r}")
            return "firing"
        return value

    def strings(self, obj: Mapping[str, Any], key: str, path: str) -> dict[str, str]:
        value = obj.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            self.fail(_join(path, key), "expected an object of string values")
            return {}
        return dict(value)

    def time(
        self, obj: Mapping[str, Any], key: str, path: str, *, required: bool
    ) -> datetime | None:
        raw = self.text(obj, key, path, required=required)
        if not raw or raw.startswith(ZERO_TIME_PREFIX):
            return None
        moment = parse_time(raw)
        if moment is None:
            self.fail(_join(path, key), f"{raw!r} is not an RFC 3339 time with a zone")
        return moment


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def parse_webhook(payload: Any) -> WebhookMessage:
    """The typed message of a webhook body, or :class:`AlertmanagerPayloadError`."""
    check = _Checker()
    if not isinstance(payload, Mapping):
        raise AlertmanagerPayloadError(["$: expected a JSON object"])
    version = payload.get("version")
    if version != WEBHOOK_VERSION:
        check.fail("version", f"expected {WEBHOOK_VERSION!r} (Alertmanager's webhook format)")
    raw_alerts = payload.get("alerts")
    if not isinstance(raw_alerts, list):
        check.fail("alerts", "required list is missing")
        raw_alerts = []
    alerts = []
    for number, raw in enumerate(raw_alerts):
        path = f"alerts[{number}]"
        if not isinstance(raw, Mapping):
            check.fail(path, "expected an object")
            continue
        starts_at = check.time(raw, "startsAt", path, required=True)
        alert = Alert(
            status=check.status(raw, path),
            labels=check.strings(raw, "labels", path),
            annotations=check.strings(raw, "annotations", path),
            starts_at=starts_at or datetime.min.replace(tzinfo=UTC),
            ends_at=check.time(raw, "endsAt", path, required=False),
            generator_url=check.text(raw, "generatorURL", path, required=False),
            fingerprint=check.text(raw, "fingerprint", path),
        )
        if alert.status == "resolved" and alert.ends_at is None:
            check.fail(f"{path}.endsAt", "a resolved alert needs its end time")
        alerts.append(alert)
    truncated = payload.get("truncatedAlerts", 0)
    if isinstance(truncated, bool) or not isinstance(truncated, int) or truncated < 0:
        check.fail("truncatedAlerts", f"expected a count, got {truncated!r}")
        truncated = 0
    message = WebhookMessage(
        version=str(version),
        status=check.status(payload, ""),
        receiver=check.text(payload, "receiver", ""),
        group_key=check.text(payload, "groupKey", ""),
        group_labels=check.strings(payload, "groupLabels", ""),
        common_labels=check.strings(payload, "commonLabels", ""),
        common_annotations=check.strings(payload, "commonAnnotations", ""),
        external_url=check.text(payload, "externalURL", "", required=False),
        truncated_alerts=truncated,
        alerts=tuple(alerts),
    )
    if check.errors:
        raise AlertmanagerPayloadError(check.errors)
    return message


# -- which alerts are about GPUs -----------------------------------------------------------------


@dataclass(frozen=True)
class AlertRules:
    """Which alert names mean an Xid or a GPU health failure, and the label naming the cluster."""

    xid_alerts: frozenset[str] = DEFAULT_XID_ALERTS
    health_alerts: frozenset[str] = DEFAULT_HEALTH_ALERTS
    cluster_label: str = "cluster"

    @classmethod
    def of(
        cls,
        xid_alerts: Iterable[str] | None = None,
        health_alerts: Iterable[str] | None = None,
        cluster_label: str | None = None,
    ) -> AlertRules:
        """Rules from configured lists; an empty or absent list keeps the default."""
        return cls(
            xid_alerts=frozenset(xid_alerts or ()) or DEFAULT_XID_ALERTS,
            health_alerts=frozenset(health_alerts or ()) or DEFAULT_HEALTH_ALERTS,
            cluster_label=cluster_label or "cluster",
        )


@dataclass(frozen=True)
class GpuAlert:
    """What an alert says about a GPU."""

    kind: Literal["xid", "gpu-health"]
    cluster: str | None
    node: str | None
    gpu_index: int | None
    gpu_uuid: str | None
    xid: int | None
    pods: tuple[str, ...] = field(default=())  # "namespace/pod" the exporter mapped to the GPU
    hpc_job: str | None = None  # the Slurm job dcgm-exporter mapped to the GPU


def _first(labels: Mapping[str, str], names: Iterable[str]) -> str | None:
    for name in names:
        value = labels.get(name, "").strip()
        if value:
            return value
    return None


def _node(labels: Mapping[str, str]) -> str | None:
    value = _first(labels, NODE_LABELS)
    if value and value == labels.get("instance", "").strip():
        host, _, port = value.rpartition(":")
        if host and port.isdigit():  # "gpu-117:9400" (the exporter's scrape target)
            value = host.strip("[]")
    return value


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()  # "²".isdigit() is True, yet no int()


def _integer(value: str | None) -> int | None:
    if value is None:
        return None
    text = value.strip()
    if text.startswith("nvidia") and _is_number(text[6:]):  # the `device` label: nvidia3
        text = text[6:]
    return int(text) if _is_number(text) and len(text) <= 20 else None


def _has_bad_text(value: str) -> bool:
    """NUL (PostgreSQL stores none) or a lone surrogate (no UTF-8 for it)."""
    return "\x00" in value or any("\ud800" <= ch <= "\udfff" for ch in value)


def shown(value: str, limit: int = MAX_FINGERPRINT) -> str:
    """``value`` safe to echo in an answer: clipped, NUL and lone surrogates escaped."""
    clipped = value[:limit].replace("\x00", "\\x00")
    return clipped.encode("utf-8", "backslashreplace").decode("utf-8")


def alert_problems(alert: Alert, gpu_alert: GpuAlert | None) -> list[str]:
    """Why one alert cannot be stored (empty when it can): a value gpuobs cannot keep. The
    receiver rejects such an alert, says why, and stores the others of its batch."""
    problems = []
    texts = [alert.fingerprint, alert.generator_url, *alert.labels, *alert.labels.values()]
    texts += [*alert.annotations, *alert.annotations.values()]
    if any(_has_bad_text(t) for t in texts):
        problems.append("a label, annotation or the fingerprint holds NUL or a lone surrogate")
    if not alert.fingerprint.strip():
        problems.append("fingerprint: empty")
    if len(alert.fingerprint) > MAX_FINGERPRINT:
        problems.append(f"fingerprint: longer than {MAX_FINGERPRINT} characters")
    if sum(map(len, texts)) > MAX_TEXT:
        problems.append(f"labels and annotations: more than {MAX_TEXT} characters")
    for key, moment in (("startsAt", alert.starts_at), ("endsAt", alert.ends_at)):
        if moment is not None and not EARLIEST <= moment < LATEST:
            problems.append(f"{key}: {moment:%Y-%m-%d} is not between 1970 and 2200")
    if gpu_alert is not None:
        if gpu_alert.node is not None and len(gpu_alert.node) > MAX_NODE:
            problems.append(f"node: longer than {MAX_NODE} characters")
        if gpu_alert.gpu_index is not None and gpu_alert.gpu_index > MAX_GPU_INDEX:
            problems.append(f"gpu: index above {MAX_GPU_INDEX}")
        if gpu_alert.xid is not None and gpu_alert.xid > MAX_XID:
            problems.append(f"xid: code above {MAX_XID}")
    return problems


def classify(alert: Alert, rules: AlertRules) -> GpuAlert | None:
    """The GPU an alert is about, or None when it is neither an Xid nor a GPU health failure."""
    labels = alert.labels
    xid = _integer(_first(labels, XID_LABELS))
    if xid == 0:  # dcgm-exporter's gauge reads 0 when there was no Xid
        xid = None
    if xid is not None or alert.name in rules.xid_alerts:
        kind: Literal["xid", "gpu-health"] = "xid"
    elif alert.name in rules.health_alerts:
        kind = "gpu-health"
    else:
        return None
    namespace = _first(labels, ("namespace", "exported_namespace"))
    pod = _first(labels, ("pod", "exported_pod"))
    return GpuAlert(
        kind=kind,
        cluster=labels.get(rules.cluster_label) or None,
        node=_node(labels),
        gpu_index=_integer(_first(labels, (*GPU_LABELS, "device"))),
        gpu_uuid=_first(labels, UUID_LABELS),
        xid=xid,
        pods=(f"{namespace}/{pod}",) if pod and namespace else ((pod,) if pod else ()),
        hpc_job=_first(labels, ("hpc_job",)),
    )
