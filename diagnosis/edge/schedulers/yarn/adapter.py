"""The YARN adapter: reads the ResourceManager's REST API, writes nothing.

One cycle is four GETs whatever the cluster's size: ``/ws/v1/cluster/nodes``,
``/ws/v1/cluster/scheduler``, ``/ws/v1/cluster/apps?states=<live states>`` and the applications
finished since the previous read (``finishedTimeBegin``), at most ``apps_limit`` of each; and
with ``read_node_gpus`` one GET per node whose containers hold GPUs, to its NodeManager's
``/ws/v1/node/resources/yarn.io%2Fgpu`` (which container holds which GPU indexes), at most
``max_node_requests``. A cluster's ``scheduler_config``::

    {"url": "http://rm.example:8088",   # the ResourceManager's web address
     "timeout_s": 10,                    # per request
     "default_pool": "default",          # the pool of nodes without a node label
     "gpu_models": {"gpu": "A100-SXM4-80GB"},  # node label -> GPU model
     "apps_limit": 5000, "event_overlap_s": 300}

YARN is read and advised only: a queue-weight recommendation's dry run shows the
configuration change an admin would make (capacity-scheduler.xml / the Fair Scheduler's
allocation file); applying it is refused (docs/integrations.md says why).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import requests

from diagnosis.edge.config import REQUIRED, ConfigSpec, Setting
from diagnosis.edge.schedulers import rest
from diagnosis.edge.schedulers.base import (
    Capabilities,
    ChangeError,
    ChangeResult,
    EventBatch,
    SchedulerError,
    SchedulerState,
    parse_config,
)
from diagnosis.edge.schedulers.targets import target_name
from diagnosis.edge.schedulers.yarn import parse


def _http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")) or "@" in value.split("/")[2]:
        raise ValueError("expected an http(s) URL without user or password")
    return value.rstrip("/")


def _positive(value: float) -> float:
    if value <= 0:
        raise ValueError(f"expected a positive number, got {value!r}")
    return float(value)


def _at_least(minimum: int):
    def check(value: int) -> int:
        if value < minimum:
            raise ValueError(f"expected an integer >= {minimum}, got {value!r}")
        return value

    return check


def _gpu_models(value: dict[str, Any]) -> dict[str, str]:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"expected an object of node label -> GPU model name, got {value!r}")
    return dict(value)


CONFIG = ConfigSpec(
    (
        Setting("url", str, REQUIRED, "the ResourceManager's web address", check=_http_url),
        Setting("timeout_s", float, 10.0, "per request", check=_positive),
        Setting("default_pool", str, "default", "the pool of nodes without a node label"),
        Setting("gpu_models", dict, {}, "node label -> GPU model name", check=_gpu_models),
        Setting("apps_limit", int, 5000, "applications read per request", check=_at_least(1)),
        Setting(
            "event_overlap_s", int, 300, "how far back each read looks again", check=_at_least(0)
        ),
        Setting(
            "read_node_gpus",
            bool,
            True,
            "ask the NodeManagers of nodes with GPUs in use which containers hold which GPUs",
        ),
        Setting(
            "max_node_requests",
            int,
            1000,
            "NodeManagers asked per cycle (the others' GPUs stay unattributed)",
            check=_at_least(0),
        ),
    ),
    what="scheduler_config",
)


class YarnAdapter:
    id: ClassVar[str] = "yarn"
    capabilities: ClassVar[Capabilities] = Capabilities(change_kinds=frozenset(), dry_run=True)

    def __init__(
        self,
        config: Mapping[str, Any] | None,
        *,
        cluster: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        values = parse_config(CONFIG, config)
        self.cluster = cluster
        self.url = values["url"]
        self.timeout_s = values["timeout_s"]
        self.apps_limit = values["apps_limit"]
        self.read_node_gpus = values["read_node_gpus"]
        self.max_node_requests = values["max_node_requests"]
        self.scheme = self.url.split("://", 1)[0]
        self.overlap_ms = values["event_overlap_s"] * 1000
        self.settings = parse.YarnSettings(
            default_pool=values["default_pool"], gpu_models=values["gpu_models"]
        )
        self.clock = clock
        self.session = requests.Session()
        self.requests: list[dict[str, Any]] = []
        self._unconsumed: tuple[dict[str, Any], int] | None = None
        self._scheduler_kind = ""

    # -- reading -----------------------------------------------------------------------------

    def _get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        started = time.perf_counter()
        ok = False
        try:
            document = rest.get_json(
                self.session,
                f"{self.url}{path}",
                what=f"the ResourceManager ({path})",
                timeout_s=self.timeout_s,
                headers={"Accept": "application/json"},
                params=params,
            )
            ok = True
            return document
        finally:
            self.requests.append(
                {
                    "command": f"GET {path}",
                    "seconds": round(time.perf_counter() - started, 4),
                    "ok": ok,
                }
            )

    def _live_apps(self) -> dict[str, Any]:
        params = {"states": ",".join(parse.LIVE_STATES), "limit": str(self.apps_limit)}
        return self._get("/ws/v1/cluster/apps", params)

    def _finished_apps(self, since_ms: int) -> dict[str, Any]:
        params = {
            "states": "FINISHED,FAILED,KILLED",
            "finishedTimeBegin": str(max(0, since_ms)),
            "limit": str(self.apps_limit),
        }
        return self._get("/ws/v1/cluster/apps", params)

    def read_state(self) -> SchedulerState:
        """Nodes, leaf queues and the live applications (a following :meth:`read_events`
        reuses the applications' answer)."""
        nodes_document = self._get("/ws/v1/cluster/nodes")
        nodes = parse.parse_nodes(nodes_document, self.settings)
        scheduler = self._get("/ws/v1/cluster/scheduler")
        self._scheduler_kind = parse.scheduler_type(scheduler)
        queues = parse.parse_queues(scheduler, sum(node["gpus"] for node in nodes))
        live = self._live_apps()
        self._unconsumed = (live, int(self.clock() * 1000))
        apps = parse.parse_apps([live], self.settings)
        problems: list[str] = []
        if self.read_node_gpus:
            held, problems = self._node_gpus(
                parse.gpu_node_addresses(nodes_document, self.settings)
            )
            parse.attach_allocations(apps, held)
        known = {queue["name"] for queue in queues}
        for job in apps.jobs:
            if job["queue"] and job["queue"] not in known:
                known.add(job["queue"])
                queues.append({"name": job["queue"], "tenant": job["tenant"]})
        scheduler_section: dict[str, Any] = {"kind": "yarn", "placement": {}}
        if problems:
            scheduler_section["node_gpu_problems"] = problems[:100]
        return SchedulerState(
            nodes=nodes, queues=queues, jobs=apps.jobs, scheduler=scheduler_section
        )

    def _node_gpus(
        self, addresses: Mapping[str, str]
    ) -> tuple[dict[str, dict[str, list[int]]], list[str]]:
        """Per node, container → GPU indexes, from the NodeManagers' GPU resource pages (at most
        ``max_node_requests``, 8 at a time). A NodeManager that does not answer leaves its
        node's GPUs unattributed and is named in the problems; the read goes on."""
        chosen = sorted(addresses.items())[: self.max_node_requests]
        problems = (
            [f"{len(addresses) - len(chosen)} NodeManager(s) not asked (max_node_requests)"]
            if len(addresses) > len(chosen)
            else []
        )

        def ask(item: tuple[str, str]) -> tuple[str, dict[str, list[int]] | str]:
            node, address = item
            try:
                with requests.Session() as session:  # one per thread
                    document = rest.get_json(
                        session,
                        f"{self.scheme}://{address}/ws/v1/node/resources/yarn.io%2Fgpu",
                        what=f"the NodeManager of {node}",
                        timeout_s=self.timeout_s,
                        headers={"Accept": "application/json"},
                    )
            except SchedulerError as exc:
                return node, str(exc)
            return node, parse.assigned_gpus(document)

        held: dict[str, dict[str, list[int]]] = {}
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=8) as pool:
            for node, answer in pool.map(ask, chosen):
                if isinstance(answer, str):
                    problems.append(answer)
                else:
                    held[node] = answer
        if chosen:
            self.requests.append(
                {
                    "command": f"GET /ws/v1/node/resources/yarn.io%2Fgpu on {len(chosen)} node(s)",
                    "seconds": round(time.perf_counter() - started, 4),
                    "ok": len(held) == len(chosen),
                }
            )
        return held, problems

    def read_events(self, cursor: str | None) -> EventBatch:
        """Events since ``cursor``: from the live applications (reused from a preceding
        :meth:`read_state`) and those finished since the cursor (less the overlap)."""
        previous = parse.EventCursor.parse(cursor)
        unconsumed, self._unconsumed = self._unconsumed, None
        live, now_ms = unconsumed or (self._live_apps(), int(self.clock() * 1000))
        since = (previous.time_ms if previous.time_ms is not None else now_ms) - self.overlap_ms
        apps = parse.parse_apps([live, self._finished_apps(since)], self.settings)
        events, after = parse.derive_events(
            apps, previous, now_ms=now_ms, overlap_ms=self.overlap_ms
        )
        return EventBatch(events=events, cursor=after.dump())

    @property
    def log(self) -> Any:
        return _RequestLog(self.requests)

    # -- advising ----------------------------------------------------------------------------

    def apply(self, change: Mapping[str, Any], *, dry_run: bool) -> ChangeResult:
        """Nothing is written to YARN. A ``queue-weight`` change's dry run returns the
        configuration change to make by hand; every real change is refused."""
        kind = change.get("kind")
        if kind != "queue-weight":
            raise ChangeError(f"YARN is read and advise only: no {kind!r} changes")
        queue = target_name(change)
        scheduler = self._get("/ws/v1/cluster/scheduler")  # the target as it is now
        kind_name = parse.scheduler_type(scheduler)
        leaf = parse.capacity_leaves(scheduler).get(queue)
        if kind_name == "capacityScheduler" and leaf is None:
            raise ChangeError(f"no leaf queue {queue!r} in the Capacity Scheduler")
        advice = parse.queue_advice(kind_name, queue, change.get("to"), leaf)
        if not dry_run:
            raise ChangeError(f"YARN is read and advise only; to make this change, {advice}")
        return ChangeResult(
            applied=False,
            dry_run=True,
            before=leaf.absolute if leaf is not None else change.get("from"),
            after=change.get("to"),
            command=advice,
            message="advisory: gpuobs does not write YARN's queue configuration",
        )


class _RequestLog:
    """The requests one adapter made, as the cycle's source report lists commands."""

    def __init__(self, commands: list[dict[str, Any]]) -> None:
        self.commands = commands
