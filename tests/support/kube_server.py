"""A small Kubernetes API server on loopback, for tests only (no Kubernetes can run here).

It serves what the Volcano and Kueue adapters use, the way the real API server does: lists with
``limit``/``continue`` and a ``resourceVersion``; watches (``watch=true``) that stream the changes
after a resourceVersion as JSON lines and close after ``timeoutSeconds``, or answer an ERROR
event with a ``410 Expired`` Status when that version was compacted away; GET and PATCH
(merge patch; ``metadata.resourceVersion`` in a patch is a precondition, 409 Conflict when it is
stale; ``dryRun=All`` checks and stores nothing); pod eviction; bearer-token authentication.
When the CRDs of ``../shared/data/crds`` are given, custom objects are validated against their
OpenAPI schema on every write, as the real server does (422 Invalid).

Objects are plain dicts shaped exactly like the API's; tests load them from
``tests/fixtures/kubernetes/*.yaml`` and change them with :meth:`KubeApiServer.put` and
:meth:`KubeApiServer.delete`, which record watch events. :meth:`compact` forgets the history
(later watches from an older version get 410); :attr:`hang_watches` makes watches send nothing
(a client read timeout); :attr:`requests` logs every request.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import json
import secrets
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema
import pytest
import yaml

from diagnosis.edge.schedulers.kubernetes import client as kube_client
from tests.conftest import SHARED_DATA, running_in_ci

TESTS = Path(__file__).resolve().parent.parent
FIXTURES = TESTS / "fixtures" / "kubernetes"
CRD_ROOT = SHARED_DATA / "crds"


@dataclass(frozen=True)
class Kind:
    """A resource the server serves: where it lives and what its objects are called."""

    kind: str
    api_version: str  # "v1" or "group/version"
    plural: str
    namespaced: bool

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def key(self) -> str:  # one store per kind, whatever version it is served at
        return f"{self.plural}.{self.group}" if self.group else self.plural


CORE_KINDS = [
    Kind("Node", "v1", "nodes", False),
    Kind("Pod", "v1", "pods", True),
    Kind("Event", "v1", "events", True),
    Kind("ConfigMap", "v1", "configmaps", True),
]
CUSTOM_KINDS = [
    Kind("Queue", "scheduling.volcano.sh/v1beta1", "queues", False),
    Kind("PodGroup", "scheduling.volcano.sh/v1beta1", "podgroups", True),
    Kind("ClusterQueue", "kueue.x-k8s.io/v1beta1", "clusterqueues", False),
    Kind("LocalQueue", "kueue.x-k8s.io/v1beta1", "localqueues", True),
    Kind("Workload", "kueue.x-k8s.io/v1beta1", "workloads", True),
    Kind("Cohort", "kueue.x-k8s.io/v1beta1", "cohorts", False),
    Kind("Queue", "scheduling.run.ai/v2", "queues", False),
    Kind("PodGroup", "scheduling.run.ai/v2alpha2", "podgroups", True),
]
# Built-in kinds of later Kubernetes releases (DRA, the native gang API): validated against the
# kubernetes client's models by tests/edge/test_kubernetes_schemas.py.
BUILTIN_KINDS = [
    Kind("ResourceSlice", "resource.k8s.io/v1", "resourceslices", False),
    Kind("ResourceClaim", "resource.k8s.io/v1", "resourceclaims", True),
    Kind("ResourceClaimTemplate", "resource.k8s.io/v1", "resourceclaimtemplates", True),
    Kind("DeviceClass", "resource.k8s.io/v1", "deviceclasses", False),
    Kind("Workload", "scheduling.k8s.io/v1alpha1", "workloads", True),
]
ALL_KINDS = CORE_KINDS + CUSTOM_KINDS + BUILTIN_KINDS
# By kind, and by "Kind.group" where two groups share a kind name (Queue, PodGroup, Workload).
KINDS = {k.kind: k for k in reversed(ALL_KINDS)} | {f"{k.kind}.{k.group}": k for k in ALL_KINDS}
BY_PLURAL = {(k.group, k.plural): k for k in ALL_KINDS}
TESTS_CRDS = TESTS / "fixtures" / "crds"
CRD_FILES = {
    "Queue": "volcano/scheduling.volcano.sh_queues.yaml",
    "PodGroup": "volcano/scheduling.volcano.sh_podgroups.yaml",
    "ClusterQueue": "kueue/kueue.x-k8s.io_clusterqueues.yaml",
    "LocalQueue": "kueue/kueue.x-k8s.io_localqueues.yaml",
    "Workload": "kueue/kueue.x-k8s.io_workloads.yaml",
    "Cohort": "kueue/kueue.x-k8s.io_cohorts.yaml",
}
# The KAI scheduler's CRDs live in the project's own fixtures (tests/fixtures/crds/README.md).
PROJECT_CRD_FILES = {
    "Queue.scheduling.run.ai": "kai/scheduling.run.ai_queues.yaml",
    "PodGroup.scheduling.run.ai": "kai/scheduling.run.ai_podgroups.yaml",
}


def kind_of(obj: Mapping[str, Any]) -> Kind:
    """The served kind of an object, by its kind and its apiVersion's group."""
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    return KINDS.get(f"{obj['kind']}.{group}") or KINDS[obj["kind"]]


def crd_key(obj: Mapping[str, Any]) -> str:
    """The key of an object's CRD in CRD_FILES / PROJECT_CRD_FILES ("" for built-in kinds)."""
    kind = kind_of(obj)
    if f"{kind.kind}.{kind.group}" in PROJECT_CRD_FILES:
        return f"{kind.kind}.{kind.group}"
    if kind in CUSTOM_KINDS and kind.kind in CRD_FILES:
        return kind.kind
    return ""


# -- CRD schemas ---------------------------------------------------------------------------------


def strict(schema: Any) -> Any:
    """An OpenAPI v3 structural schema as a JSON schema that also refuses unknown fields (the
    real API server prunes them silently; a fixture or a patch with one is a mistake here)."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.cache
def _crd_document(path: Path) -> dict[str, Any]:
    # The Workload CRD is 1.4 MB of YAML: read it once per process, with libyaml when present.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(encoding="utf-8"), Loader=loader)  # noqa: S506 (a safe loader)


@functools.cache
def crd_schema(kind: str, version: str, root: Path = CRD_ROOT) -> dict[str, Any]:
    """The strict JSON schema of a custom kind at a served version, from its CRD file (the
    shared data's, or for the KAI kinds the project's own)."""
    if kind in PROJECT_CRD_FILES:
        path = TESTS_CRDS / PROJECT_CRD_FILES[kind]
    else:
        path = root / CRD_FILES[kind]
    document = _crd_document(path)
    for served in document["spec"]["versions"]:
        if served["name"] == version:
            return strict(served["schema"]["openAPIV3Schema"])
    raise KeyError(f"{kind} has no version {version} in {path.name}")


def validator(kind: str, version: str, root: Path = CRD_ROOT) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(crd_schema(kind, version, root))


def schema_errors(obj: Mapping[str, Any], check: jsonschema.Draft7Validator) -> list[str]:
    return [
        f"{'.'.join(str(p) for p in error.absolute_path) or '$'}: {error.message}"
        for error in sorted(check.iter_errors(obj), key=lambda e: list(e.absolute_path))
    ]


# -- fixtures ------------------------------------------------------------------------------------

KUBECONFIG_ENV = "GPUOBS_SECRET_TEST_KUBECONFIG"


@contextlib.contextmanager
def serving(
    workdir: Path, monkeypatch: Any, versions: Iterable[str] = ()
) -> Iterator[KubeApiServer]:
    """A fresh loopback API server (validating custom objects against the shared CRDs when they
    are present) and a kubeconfig pointing at it, named by $GPUOBS_SECRET_TEST_KUBECONFIG; the
    adapters' per-process mirrors are dropped before and after."""
    kube_client.forget_mirrors()
    server = KubeApiServer(
        token=secrets.token_hex(16),
        crd_root=CRD_ROOT if CRD_ROOT.is_dir() else None,
        versions=versions,
    ).start()
    monkeypatch.setenv(KUBECONFIG_ENV, str(server.kubeconfig(workdir / "kubeconfig")))
    try:
        yield server
    finally:
        server.stop()
        kube_client.forget_mirrors()


def kube_api_fixture(*loads: str, versions: Iterable[str] = (), crds_required: bool = False) -> Any:
    """A test module's ``kube_api`` fixture: a fresh loopback server (:func:`serving`) holding
    the objects of the named ``tests/fixtures/kubernetes/<name>.yaml`` files, loaded in order.
    With ``crds_required``, a server without the shared CRDs (custom objects unvalidated) fails
    the test under CI=true and skips it elsewhere. A module says only what it serves::

        kube_api = kube_api_fixture("nodes", "volcano")
    """
    served = tuple(versions)

    @pytest.fixture
    def kube_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeApiServer]:
        with serving(tmp_path, monkeypatch, versions=served) as server:
            if crds_required and not server.validators:
                message = f"no CRDs under {CRD_ROOT}: custom objects go unvalidated"
                if running_in_ci():
                    pytest.fail(message, pytrace=False)
                pytest.skip(message)
            for name in loads:
                server.load(load_fixture(name))
            yield server

    return kube_api


def adapter_config(**extra: Any) -> dict[str, Any]:
    """A Volcano or Kueue ``scheduler_config`` for the loopback server (short watches)."""
    return {"kubeconfig_env": KUBECONFIG_ENV, "watch_timeout_s": 1, **extra}


def load_fixture(name: str) -> list[dict[str, Any]]:
    """The objects of ``tests/fixtures/kubernetes/<name>.yaml`` (a multi-document YAML file)."""
    text = (FIXTURES / f"{name}.yaml").read_text(encoding="utf-8")
    return [doc for doc in yaml.safe_load_all(text) if doc]


# -- the server ----------------------------------------------------------------------------------


def go_bool(values: list[str] | None) -> bool:
    """A query flag as the API server (Go's strconv.ParseBool) reads it."""
    return bool(values) and values[0] in ("1", "t", "T", "true", "TRUE", "True")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (strategic merge patches of maps and scalars behave the same)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


class KubeApiServer:
    """The store, its history and the HTTP server; start with :meth:`start`, end with
    :meth:`stop`."""

    def __init__(
        self, token: str, crd_root: Path | None = None, versions: Iterable[str] = ()
    ) -> None:
        self.token = token
        self.lock = threading.Condition()
        self.version = 100
        self.compacted = 0  # watches from a version below this get 410
        self.store: dict[str, dict[str, dict[str, Any]]] = {k.key: {} for k in KINDS.values()}
        self.history: list[tuple[int, str, str, dict[str, Any]]] = []
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        self.hang_watches = False
        self.blocked_evictions: set[str] = set()  # "ns/name" that a PDB protects
        self.validators: dict[tuple[str, str], jsonschema.Draft7Validator] = {}
        self.forbidden: set[str] = set()  # "plural.group" (or "plural") answering 403
        self.unserved: set[str] = set()  # "group/version" left out of discovery, 404 when asked
        if crd_root is not None:
            for kind in CRD_FILES:
                for version in {KINDS[kind].api_version.rpartition("/")[2], *versions}:
                    try:
                        self.validators[(kind, version)] = validator(kind, version, crd_root)
                    except KeyError:
                        continue
        for kind in PROJECT_CRD_FILES:  # always: the project carries these CRDs
            version = KINDS[kind].api_version.rpartition("/")[2]
            self.validators[(kind, version)] = validator(kind, version)
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> KubeApiServer:
        server = self

        class Handler(_Handler):
            api = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self.lock:
            self.lock.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def kubeconfig(self, path: Path) -> Path:
        """Write a kubeconfig that points at this server with its token; returns the path."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "loopback", "cluster": {"server": self.url}}],
            "users": [{"name": "gpuobs", "user": {"token": self.token}}],
            "contexts": [
                {"name": "loopback", "context": {"cluster": "loopback", "user": "gpuobs"}}
            ],
            "current-context": "loopback",
        }
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path

    # -- the store -------------------------------------------------------------------------------

    def _bump(self) -> str:
        self.version += 1
        return str(self.version)

    def put(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Add or replace an object (by kind, namespace, name); records ADDED or MODIFIED."""
        kind = kind_of(obj)
        with self.lock:
            stored = copy.deepcopy(dict(obj))
            metadata = stored.setdefault("metadata", {})
            existing = self._find(kind, metadata.get("namespace"), metadata["name"])
            if existing is not None:
                metadata["uid"] = existing["metadata"]["uid"]
                metadata.setdefault(
                    "creationTimestamp", existing["metadata"].get("creationTimestamp")
                )
            metadata.setdefault("uid", str(uuid.uuid4()))
            metadata.setdefault("creationTimestamp", _now())
            metadata["resourceVersion"] = self._bump()
            self._validate(stored)
            self.store[kind.key][metadata["uid"]] = stored
            self._record("MODIFIED" if existing is not None else "ADDED", kind, stored)
            return copy.deepcopy(stored)

    def load(self, objects: Iterable[Mapping[str, Any]]) -> None:
        for obj in objects:
            self.put(obj)

    def delete(self, kind_name: str, name: str, namespace: str | None = None) -> None:
        kind = KINDS[kind_name]
        with self.lock:
            existing = self._find(kind, namespace, name)
            if existing is None:
                raise KeyError(f"{kind_name} {namespace}/{name}")
            del self.store[kind.key][existing["metadata"]["uid"]]
            gone = copy.deepcopy(existing)
            gone["metadata"]["resourceVersion"] = self._bump()
            self._record("DELETED", kind, gone)

    def get(self, kind_name: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        with self.lock:
            found = self._find(KINDS[kind_name], namespace, name)
            if found is None:
                raise KeyError(f"{kind_name} {namespace}/{name}")
            return copy.deepcopy(found)

    def compact(self) -> None:
        """Forget the history: a watch from any version before now gets 410 Gone."""
        with self.lock:
            self.history.clear()
            self.compacted = self.version

    def _record(self, event_type: str, kind: Kind, obj: dict[str, Any]) -> None:
        self.history.append((self.version, kind.key, event_type, copy.deepcopy(obj)))
        self.lock.notify_all()

    def _find(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any] | None:
        for obj in self.store[kind.key].values():
            metadata = obj["metadata"]
            if metadata["name"] == name and (
                not kind.namespaced or metadata.get("namespace") == namespace
            ):
                return obj
        return None

    def _validate(self, obj: Mapping[str, Any]) -> None:
        version = str(obj.get("apiVersion", "")).rpartition("/")[2]
        check = self.validators.get((crd_key(obj), version))
        if check is None:
            return
        problems = schema_errors(obj, check)
        if problems:
            name = obj.get("metadata", {}).get("name")
            raise ApiError(422, "Invalid", f"{obj['kind']} {name!r} is invalid: {problems}")

    def requests_to(self, method: str, path_part: str) -> list[dict[str, list[str]]]:
        """The query parameters of every logged request of a method whose path contains a part."""
        return [q for m, p, q in self.requests if m == method and path_part in p]

    def collection_reads(self) -> tuple[Counter[str], Counter[str]]:
        """How often each collection (``/api/v1/pods``, ``/apis/<group>/<version>/<plural>``)
        was listed (a LIST's first page: pages after it carry ``continue``) and watched."""
        lists: Counter[str] = Counter()
        watches: Counter[str] = Counter()
        plurals = {plural for _, plural in BY_PLURAL}
        with self.lock:
            logged = list(self.requests)
        for method, path, query in logged:
            if method != "GET" or path.rstrip("/").rpartition("/")[2] not in plurals:
                continue
            if go_bool(query.get("watch")):
                watches[path] += 1
            elif "continue" not in query:
                lists[path] += 1
        return lists, watches


# -- HTTP ----------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    api: KubeApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet in tests
        return

    # -- plumbing --------------------------------------------------------------------------------

    def _send(self, code: int, body: Mapping[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self) -> tuple[Kind, str | None, str | None, str | None, dict[str, list[str]]]:
        """(kind, namespace, name, subresource, query) of the request path."""
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        segments = [s for s in parts.path.split("/") if s]
        if segments[:2] == ["api", "v1"]:
            group, rest = "", segments[2:]
        elif segments[:1] == ["apis"] and len(segments) >= 3:
            group, rest = segments[1], segments[3:]
            version = segments[2]
        else:
            raise ApiError(404, "NotFound", f"no API at {parts.path}")
        namespace = None
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or (group, rest[0]) not in BY_PLURAL:
            raise ApiError(404, "NotFound", f"the server could not find {parts.path}")
        kind = BY_PLURAL[(group, rest[0])]
        if group and f"{group}/{version}" in self.api.unserved:
            raise ApiError(404, "NotFound", f"the server could not find {parts.path}")
        if group and version != kind.api_version.rpartition("/")[2]:
            kind = Kind(kind.kind, f"{group}/{version}", kind.plural, kind.namespaced)
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        return kind, namespace, name, subresource, query

    def _authorized(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {self.api.token}":
            return True
        self._send(401, ApiError(401, "Unauthorized", "Unauthorized").status())
        return False

    def _discovery(self) -> dict[str, Any]:
        """``GET /apis``: the APIGroupList of the groups served (the kinds' versions, the
        versions validators were loaded for, minus :attr:`KubeApiServer.unserved`)."""
        versions: dict[str, list[str]] = {}
        for kind in ALL_KINDS:
            if kind.group:
                versions.setdefault(kind.group, []).append(kind.api_version.rpartition("/")[2])
        for crd, version in self.api.validators:
            group = kind_of({"kind": crd.partition(".")[0], "apiVersion": ""}).group
            if "." in crd:
                group = crd.partition(".")[2]
            if version not in versions.setdefault(group, []):
                versions[group].append(version)
        groups = []
        for group, names in sorted(versions.items()):
            kept = sorted(
                {v for v in names if f"{group}/{v}" not in self.api.unserved}, reverse=True
            )
            if not kept:
                continue
            entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in kept]
            groups.append({"name": group, "versions": entries, "preferredVersion": entries[0]})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _handle(self, method: str) -> None:
        if method == "GET" and urlsplit(self.path).path.rstrip("/") == "/apis":
            if self._authorized():
                self._send(200, self._discovery())
            return
        try:
            kind, namespace, name, subresource, query = self._route()
        except ApiError as exc:
            self._send(exc.code, exc.status())
            return
        resource = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
        if resource in self.api.forbidden:
            denied = ApiError(
                403,
                "Forbidden",
                f'{kind.plural}.{kind.group or ""} is forbidden: User "system:serviceaccount:'
                f'gpuobs:gpuobs" cannot {method.lower()} resource "{kind.plural}" in API group '
                f'"{kind.group}" at the cluster scope',
            )
            self._send(403, denied.status())
            return
        with self.api.lock:
            self.api.requests.append((method, urlsplit(self.path).path, query))
        if not self._authorized():
            return
        try:
            if method == "GET" and name is None and go_bool(query.get("watch")):
                self._watch(kind, query)
            elif method == "GET" and name is None:
                self._send(200, self._list(kind, namespace, query))
            elif method == "GET":
                self._send(200, self._get(kind, namespace, name))
            elif method == "PATCH" and name is not None and subresource is None:
                self._send(200, self._patch(kind, namespace, name, query))
            elif method == "POST" and kind.kind == "Pod" and subresource == "eviction":
                self._send(201, self._evict(namespace, name or "", query))
            else:
                raise ApiError(405, "MethodNotAllowed", f"{method} {self.path} is not served")
        except ApiError as exc:
            self._send(exc.code, exc.status())

    def do_GET(self) -> None:
        self._handle("GET")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_POST(self) -> None:
        self._handle("POST")

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            return json.loads(self.rfile.read(length) or b"null")
        except ValueError:
            raise ApiError(400, "BadRequest", "the body is not JSON") from None

    # -- verbs -----------------------------------------------------------------------------------

    def _objects(self, kind: Kind, namespace: str | None) -> list[dict[str, Any]]:
        items = self.api.store[kind.key].values()
        if namespace is not None:
            items = [o for o in items if o["metadata"].get("namespace") == namespace]
        return sorted(
            items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])
        )

    def _served(self, kind: Kind, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The object as served at the request's version (apiVersion follows the URL)."""
        served = copy.deepcopy(dict(obj))
        served["apiVersion"] = kind.api_version
        return served

    def _list(
        self, kind: Kind, namespace: str | None, query: dict[str, list[str]]
    ) -> dict[str, Any]:
        with self.api.lock:
            items = self._objects(kind, namespace)
            selector = query.get("fieldSelector", [""])[0]
            if selector.startswith("spec.nodeName="):
                node = selector.partition("=")[2]
                items = [o for o in items if (o.get("spec") or {}).get("nodeName") == node]
            version = str(self.api.version)
            offset = 0
            token = query.get("continue", [""])[0]
            if token:
                state = json.loads(base64.b64decode(token))
                if state["rv"] < self.api.compacted:
                    raise ApiError(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent "
                        "list result. You can start a new list without the continue parameter.",
                    )
                offset, version = state["offset"], str(state["rv"])
            limit = int(query.get("limit", ["0"])[0] or 0)
            page = items[offset : offset + limit] if limit else items[offset:]
            metadata: dict[str, Any] = {"resourceVersion": version}
            if limit and offset + limit < len(items):
                metadata["continue"] = base64.b64encode(
                    json.dumps({"rv": int(version), "offset": offset + limit}).encode()
                ).decode()
                metadata["remainingItemCount"] = len(items) - offset - limit
            served = [self._served(kind, o) for o in page]
            if not kind.group:  # core list items carry no kind/apiVersion
                for item in served:
                    item.pop("kind", None)
                    item.pop("apiVersion", None)
            return {
                "kind": f"{kind.kind}List",
                "apiVersion": kind.api_version,
                "metadata": metadata,
                "items": served,
            }

    def _get(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any]:
        with self.api.lock:
            found = self.api._find(kind, namespace, name)
            if found is None:
                raise ApiError(404, "NotFound", f'{kind.plural} "{name}" not found')
            return self._served(kind, found)

    def _patch(
        self, kind: Kind, namespace: str | None, name: str, query: dict[str, list[str]]
    ) -> dict[str, Any]:
        patch = self._body()
        if not isinstance(patch, dict):
            raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
        with self.api.lock:
            found = self.api._find(kind, namespace, name)
            if found is None:
                raise ApiError(404, "NotFound", f'{kind.plural} "{name}" not found')
            wanted = (patch.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and wanted != found["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {kind.plural} "{name}": the object has '
                    "been modified; please apply your changes to the latest version and try again",
                )
            result = merge_patch(found, patch)
            result["apiVersion"] = kind.api_version
            if query.get("dryRun") == ["All"]:
                self.api._validate(result)
                return result
            return self._served(kind, self.api.put(result))

    def _evict(self, namespace: str | None, name: str, query: dict[str, list[str]]):
        body = self._body()
        if not isinstance(body, dict) or body.get("kind") != "Eviction":
            raise ApiError(400, "BadRequest", "expected an Eviction")
        key = f"{namespace}/{name}"
        with self.api.lock:
            if self.api._find(KINDS["Pod"], namespace, name) is None:
                raise ApiError(404, "NotFound", f'pods "{name}" not found')
            if key in self.api.blocked_evictions:
                raise ApiError(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                )
            if query.get("dryRun") != ["All"]:
                self.api.delete("Pod", name, namespace)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}

    def _watch(self, kind: Kind, query: dict[str, list[str]]) -> None:
        since = int(query.get("resourceVersion", ["0"])[0] or 0)
        timeout = float(query.get("timeoutSeconds", ["30"])[0])
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deadline = time.monotonic() + timeout
        if self.api.hang_watches:
            # Headers sent, then silence: the client's read timeout must end it.
            self.api._stopping.wait(timeout)
            return
        if since < self.api.compacted:
            gone = ApiError(
                410, "Expired", f"too old resource version: {since} ({self.api.compacted})"
            )
            self._chunk({"type": "ERROR", "object": gone.status()})
            self._chunk(None)
            return
        sent = since
        bookmarks = go_bool(query.get("allowWatchBookmarks"))
        while True:
            with self.api.lock:
                pending = [
                    (version, event_type, obj)
                    for version, key, event_type, obj in self.api.history
                    if key == kind.key and version > sent
                ]
                if not pending:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self.api._stopping.is_set():
                        latest = str(self.api.version)  # nothing of this kind up to here
                        break
                    self.api.lock.wait(min(remaining, 0.2))
                    continue
            for version, event_type, obj in pending:
                self._chunk({"type": event_type, "object": self._served(kind, obj)})
                sent = version
        if bookmarks:
            self._chunk(
                {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": kind.kind,
                        "apiVersion": kind.api_version,
                        "metadata": {"resourceVersion": latest},
                    },
                }
            )
        self._chunk(None)

    def _chunk(self, event: Mapping[str, Any] | None) -> None:
        data = b"" if event is None else (json.dumps(event) + "\n").encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()
