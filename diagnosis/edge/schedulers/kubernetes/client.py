"""Kubernetes list + watch machinery shared by the Volcano and Kueue adapters (the edge).

Connection: the kubeconfig comes from the environment, never from the database. A cluster's
``scheduler_config`` names the environment variable that holds the kubeconfig's *path*
(``kubeconfig_env``, default ``KUBECONFIG``) and optionally a ``context``; ``in_cluster: true``
uses the pod's service account instead. Nothing of the kubeconfig is stored or shown back.

Reading: each resource (nodes, pods, events, PodGroups, ...) is mirrored in a
:class:`ResourceCache`. The first sync *lists* it (paged with ``limit``/``continue``) and keeps
the list's ``resourceVersion``; later syncs *watch* from that version for a few seconds
(``timeoutSeconds``) and fold the ADDED/MODIFIED/DELETED events in. A ``410 Gone`` (the version
was compacted away) restarts the list; a watch that times out on the client keeps what it had
and resumes from the last version it applied. Caches live for the process (keyed by the
adapter's config), so a Celery worker watches deltas from one cycle to the next and a new
worker starts with a list; the cycles of such a cluster go to its mirror queue, consumed by one
process, so that a cluster has one mirror (docs/operations.md, "One Kubernetes mirror per
cluster").

Objects stay plain dicts exactly as the API server sent them (``_preload_content=False``); the
adapters normalise them into the snapshot's vocabulary.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from decimal import Decimal
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.utils.quantity import parse_quantity
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import ReadTimeoutError

from diagnosis.edge import secrets
from diagnosis.edge.config import ConfigSpec, Setting
from diagnosis.edge.schedulers.base import SchedulerError, parse_config

HTTP_GONE = 410
HTTP_CONFLICT = 409


# -- configuration -------------------------------------------------------------------------------


def _at_least_one(value: int) -> int:
    if value < 1:
        raise ValueError("must be >= 1")
    return value


def _positive(value: float) -> float:
    if value <= 0:
        raise ValueError("must be > 0")
    return float(value)


# The settings both Kubernetes adapters take; each adapter's CONFIG adds its own.
KUBE_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "kubeconfig_env",
        str,
        "KUBECONFIG",
        "the environment variable holding the kubeconfig's path",
        secret=True,
    ),
    Setting(
        "kubeconfig_file",
        str,
        "",
        "the kubeconfig as a file under the secrets directory (GPUOBS_SECRETS_DIR); "
        "wins over kubeconfig_env",
        secret=True,
        reference="file",
    ),
    Setting("context", str, "", "a context of that kubeconfig (empty: its current context)"),
    Setting("in_cluster", bool, False, "use the pod's service account instead of a kubeconfig"),
    Setting(
        "request_timeout_s",
        float,
        30.0,
        "a list page or a write must answer within this",
        check=_positive,
    ),
    Setting(
        "watch_timeout_s",
        int,
        2,
        "how long each sync watches for changes (timeoutSeconds)",
        check=_at_least_one,
    ),
    Setting("page_size", int, 500, "list page size (limit/continue)", check=_at_least_one),
    Setting("gpu_resource", str, "nvidia.com/gpu", "the extended resource that counts GPUs"),
    Setting("pool_label", str, "nvidia.com/gpu.product", "node label naming the node's pool"),
    Setting("model_label", str, "nvidia.com/gpu.product", "node label naming the GPU model"),
    Setting("default_pool", str, "default", "pool of a GPU node without the pool label"),
    Setting(
        "gpu_index_annotation", str, "volcano.sh/gpu-index", "'0,1,2,3' on a bound pod, if present"
    ),
    Setting("tenant_label", str, "gpuobs.io/tenant", "label on a queue naming its tenant"),
    Setting(
        "kind_label", str, "gpuobs.io/kind", "label (PodGroup/Workload/pod) naming the job's kind"
    ),
)


def kube_config(*own: Setting) -> ConfigSpec:
    """A Kubernetes adapter's ``scheduler_config``: :data:`KUBE_SETTINGS` and its ``own``."""
    return ConfigSpec((*KUBE_SETTINGS, *own), what="scheduler_config")


@dataclass(frozen=True)
class KubeSettings:
    """The Kubernetes part of a Volcano or Kueue cluster's ``scheduler_config``
    (:data:`KUBE_SETTINGS`: every key is optional; an unknown key or a value of the wrong type
    is refused with an error naming it -- a typo must not silently fall back to a default)."""

    kubeconfig_env: str = "KUBECONFIG"
    kubeconfig_file: str = ""
    context: str = ""
    in_cluster: bool = False
    request_timeout_s: float = 30.0
    watch_timeout_s: int = 2
    page_size: int = 500
    gpu_resource: str = "nvidia.com/gpu"
    pool_label: str = "nvidia.com/gpu.product"
    model_label: str = "nvidia.com/gpu.product"
    default_pool: str = "default"
    gpu_index_annotation: str = "volcano.sh/gpu-index"
    tenant_label: str = "gpuobs.io/tenant"
    kind_label: str = "gpuobs.io/kind"

    @classmethod
    def parse(
        cls, config: Mapping[str, Any] | None, spec: ConfigSpec
    ) -> tuple[KubeSettings, dict[str, Any]]:
        """The common settings and the adapter's own keys, checked against the adapter's
        ``spec`` (:data:`KUBE_SETTINGS` plus its own), or a permanent :class:`SchedulerError`
        naming every bad key."""
        values = parse_config(spec, config)
        common = {f.name for f in fields(cls)}
        settings = cls(**{k: v for k, v in values.items() if k in common})
        return settings, {k: v for k, v in values.items() if k not in common}


def kubeconfig_path(settings: KubeSettings) -> str:
    """The kubeconfig's path: the secret file ``kubeconfig_file`` (under the secrets directory)
    when given, else the value of the environment variable ``kubeconfig_env``."""
    if settings.kubeconfig_file:
        try:
            return str(secrets.resolve_file(settings.kubeconfig_file))
        except secrets.SecretError as exc:
            raise SchedulerError(
                f"scheduler_config.kubeconfig_file: {exc}", permanent=True
            ) from None
    return os.environ.get(settings.kubeconfig_env, "")


def api_client(settings: KubeSettings) -> k8s.ApiClient:
    """An API client for the cluster, from the service account or the kubeconfig whose path is in
    the environment variable ``settings.kubeconfig_env``."""
    configuration = k8s.Configuration()
    try:
        if settings.in_cluster:
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            path = kubeconfig_path(settings)
            if not path:
                raise SchedulerError(
                    f"the environment variable {settings.kubeconfig_env} (the kubeconfig's path) "
                    "is not set",
                    permanent=True,
                )
            k8s_config.load_kube_config(
                config_file=path,
                context=settings.context or None,
                client_configuration=configuration,
                persist_config=False,
            )
    except (ConfigException, OSError) as exc:
        # The message names the file or the missing key, never its contents.
        raise SchedulerError(
            f"cannot load the Kubernetes configuration: {exc}", permanent=True
        ) from None
    return k8s.ApiClient(configuration)


def describe_api_error(exc: ApiException) -> str:
    """The API server's own message (its Status object), else the HTTP reason."""
    try:
        status = json.loads(exc.body or "")
        message = status.get("message")
    except (TypeError, ValueError, AttributeError):
        message = None
    return f"HTTP {exc.status}: {message or exc.reason}"


def transport_errors_as_scheduler_errors(what: str):
    """Decorate an adapter call so that a connection failure (urllib3, socket) surfaces as a
    transient :class:`SchedulerError` naming ``what``, like every other failure of the call."""

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except (Urllib3Error, OSError) as exc:
                raise scheduler_error(exc, what) from exc

        return wrapper

    return decorate


def scheduler_error(exc: Exception, what: str) -> SchedulerError:
    """A :class:`SchedulerError` for a failed call; 4xx other than 408/429 are permanent."""
    if isinstance(exc, ApiException):
        permanent = (
            exc.status is not None
            and 400 <= exc.status < 500
            and exc.status
            not in (
                408,
                409,
                429,
            )
        )
        return SchedulerError(f"{what}: {describe_api_error(exc)}", permanent=permanent)
    return SchedulerError(f"{what}: {type(exc).__name__}: {exc}")


# -- resources -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    """One listable, watchable kind: its name (for messages and cache keys) and the client
    method that lists it across all namespaces."""

    name: str
    lister: Callable[[k8s.ApiClient], Callable[..., Any]]


def core_resource(name: str, method: str) -> Resource:
    """A core/v1 kind listed with ``CoreV1Api.<method>`` (e.g. ``list_pod_for_all_namespaces``)."""
    return Resource(name, lambda api: getattr(k8s.CoreV1Api(api), method))


def custom_resource(group: str, version: str, plural: str) -> Resource:
    """A custom resource, listed across namespaces with ``CustomObjectsApi``."""

    def lister(api: k8s.ApiClient) -> Callable[..., Any]:
        objects = k8s.CustomObjectsApi(api)

        def list_objects(**kwargs: Any) -> Any:
            return objects.list_cluster_custom_object(group, version, plural, **kwargs)

        # Watch reads the return type from the docstring; custom objects stay plain dicts.
        list_objects.__doc__ = ":return: object"
        return list_objects

    return Resource(f"{plural}.{group}/{version}", lister)


NODES = core_resource("nodes", "list_node")
PODS = core_resource("pods", "list_pod_for_all_namespaces")
EVENTS = core_resource("events", "list_event_for_all_namespaces")


def served_versions(api: k8s.ApiClient, settings: KubeSettings) -> dict[str, tuple[str, ...]]:
    """The API groups the server serves (discovery, ``GET /apis``), each with its versions, the
    preferred one first. A 403 here is a permanent error (discovery is granted to every
    authenticated user by ``system:discovery``: without it nothing else will work either)."""
    try:
        response = k8s.ApisApi(api).get_api_versions(
            _preload_content=False, _request_timeout=settings.request_timeout_s
        )
        listed = json.loads(response.data)
    except ApiException as exc:
        raise scheduler_error(exc, "discovering the served API groups (GET /apis)") from exc
    except (Urllib3Error, ValueError) as exc:
        raise scheduler_error(exc, "discovering the served API groups (GET /apis)") from exc
    served: dict[str, tuple[str, ...]] = {}
    for group in listed.get("groups") or ():
        versions = [str(v.get("version")) for v in group.get("versions") or () if v.get("version")]
        preferred = (group.get("preferredVersion") or {}).get("version")
        if preferred in versions:
            versions.remove(preferred)
            versions.insert(0, preferred)
        served[str(group.get("name"))] = tuple(versions)
    return served


class Gone(Exception):
    """The watched resourceVersion is too old (HTTP 410): list again."""


@dataclass
class SyncStats:
    lists: int = 0
    watches: int = 0
    relists_after_gone: int = 0
    watch_timeouts: int = 0
    events: int = 0


@dataclass(frozen=True)
class Synced:
    """What one sync did: listed afresh, or watched and folded in ``changes`` (watch events,
    each ``{"type", "raw_object"}``)."""

    listed: bool
    changes: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ResourceCache:
    """The objects of one resource, by uid, as of ``resource_version``."""

    resource: Resource
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    resource_version: str | None = None
    stats: SyncStats = field(default_factory=SyncStats)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def sync(self, api: k8s.ApiClient, settings: KubeSettings) -> Synced:
        """Bring the mirror up to date: the first sync lists; later ones watch from the kept
        version and fold the changes in; a 410 lists again."""
        with self.lock:
            if self.resource_version is None:
                self._list(api, settings)
                return Synced(listed=True)
            try:
                return Synced(listed=False, changes=self._watch(api, settings))
            except Gone:
                self.stats.relists_after_gone += 1
                self._list(api, settings)
                return Synced(listed=True)

    def resume_from(self, version: str | None) -> None:
        """Continue from a stored cursor (None: list afresh at the next sync)."""
        with self.lock:
            self.resource_version = version or None

    def _list(self, api: k8s.ApiClient, settings: KubeSettings) -> None:
        """List every object, page by page. A continue token that expired mid-way (410) starts
        the list over once."""
        for attempt in range(2):
            try:
                items, version = list_objects(api, self.resource, settings)
            except Gone:
                if attempt == 0:
                    continue
                raise SchedulerError(
                    f"listing {self.resource.name}: continue token expired twice"
                ) from None
            self.items = {uid_of(item): item for item in items}
            self.resource_version = version
            self.stats.lists += 1
            return

    def _watch(self, api: k8s.ApiClient, settings: KubeSettings) -> list[dict[str, Any]]:
        watcher = k8s_watch.Watch(return_type="object")
        folded: list[dict[str, Any]] = []
        self.stats.watches += 1
        try:
            for event in watcher.stream(
                self.resource.lister(api),
                resource_version=self.resource_version,
                timeout_seconds=settings.watch_timeout_s,
                allow_watch_bookmarks=True,
                _request_timeout=(
                    settings.request_timeout_s,
                    settings.watch_timeout_s + settings.request_timeout_s,
                ),
            ):
                self._fold(event)
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    folded.append(event)
        except ApiException as exc:
            if exc.status == HTTP_GONE:
                raise Gone from exc
            raise scheduler_error(exc, f"watching {self.resource.name}") from exc
        except ReadTimeoutError:
            # The server stopped answering mid-watch: keep what arrived, resume from there.
            self.stats.watch_timeouts += 1
        except Urllib3Error as exc:
            raise scheduler_error(exc, f"watching {self.resource.name}") from exc
        finally:
            watcher.stop()
        self.stats.events += len(folded)
        return folded

    def _fold(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("raw_object") or event.get("object") or {}
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED"):
            self.items[uid_of(obj)] = obj
        elif kind == "DELETED":
            self.items.pop(uid_of(obj), None)
        if version:
            self.resource_version = version


def uid_of(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("uid") or f"{metadata.get('namespace', '')}/{metadata.get('name', '')}")


def list_objects(
    api: k8s.ApiClient, resource: Resource, settings: KubeSettings
) -> tuple[list[dict[str, Any]], str]:
    """Every object of a resource (paged) and the list's resourceVersion. Raises :class:`Gone`
    when a continue token expired, :class:`SchedulerError` for anything else."""
    method = resource.lister(api)
    items: list[dict[str, Any]] = []
    version = ""
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {
            "limit": settings.page_size,
            "_preload_content": False,
            "_request_timeout": settings.request_timeout_s,
        }
        if token:
            kwargs["_continue"] = token
        try:
            response = method(**kwargs)
            page = json.loads(response.data)
        except ApiException as exc:
            if exc.status == HTTP_GONE and token:
                raise Gone from exc
            raise scheduler_error(exc, f"listing {resource.name}") from exc
        except (Urllib3Error, ValueError) as exc:
            raise scheduler_error(exc, f"listing {resource.name}") from exc
        metadata = page.get("metadata") or {}
        version = version or str(metadata.get("resourceVersion") or "")
        items.extend(page.get("items") or [])
        token = metadata.get("continue")
        if not token:
            return items, version


# -- the per-process mirrors ---------------------------------------------------------------------


_MIRRORS: dict[tuple[str, str], ResourceCache] = {}
_MIRRORS_LOCK = threading.Lock()


def config_key(config: Mapping[str, Any]) -> str:
    """A stable key of an adapter's config (two clusters with one config share one mirror)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def mirror(key: str, resource: Resource) -> ResourceCache:
    with _MIRRORS_LOCK:
        cache = _MIRRORS.get((key, resource.name))
        if cache is None:
            cache = _MIRRORS[(key, resource.name)] = ResourceCache(resource)
        return cache


def forget_mirrors() -> None:
    """Drop every mirror of this process (tests; a cluster whose config was reset)."""
    with _MIRRORS_LOCK:
        _MIRRORS.clear()


def sync_all(
    api: k8s.ApiClient, settings: KubeSettings, caches: Iterable[ResourceCache]
) -> dict[str, Synced]:
    """Sync several mirrors at once (their watches run side by side, so a cycle waits about one
    ``watch_timeout_s``, not one per resource). Returns what each sync did, by resource name."""
    caches = list(caches)
    with ThreadPoolExecutor(max_workers=max(1, len(caches))) as pool:
        futures = {cache.resource.name: pool.submit(cache.sync, api, settings) for cache in caches}
        return {name: future.result() for name, future in futures.items()}


# -- small readers of API objects ----------------------------------------------------------------


def quantity(value: Any) -> Decimal | None:
    """A resource quantity ("8", 8, "500m", "1k") as a Decimal; None when absent or invalid."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return parse_quantity(value)
    except (ValueError, TypeError, ArithmeticError):
        return None


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta(obj).get("labels") or {}


def annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta(obj).get("annotations") or {}


def namespaced_name(obj: Mapping[str, Any]) -> str:
    metadata = meta(obj)
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata.get('name')}" if namespace else str(metadata.get("name"))


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The status condition of a type, if the object has it."""
    for entry in (obj.get("status") or {}).get("conditions") or ():
        if entry.get("type") == kind:
            return entry
    return None


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    entry = condition(obj, kind)
    return entry is not None and entry.get("status") == "True"


class KubeConnection:
    """What both Kubernetes adapters share: the API client, made on first use, and the
    process-wide mirrors of their resources (keyed by the adapter's config)."""

    settings: KubeSettings
    key: str
    _api: k8s.ApiClient | None = None

    @property
    def api(self) -> k8s.ApiClient:
        if self._api is None:
            self._api = api_client(self.settings)
        return self._api

    def _mirror(self, resource: Resource) -> ResourceCache:
        return mirror(self.key, resource)
