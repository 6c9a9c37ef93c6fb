"""The pages' parts of a new snapshot, rendered by the worker after the cycle (issue #35;
docs/ui.md "One render per page and cycle across processes").

The heatmap of the whole cluster (both colourings), the queue tree and the queues' pending jobs
are computed from one stored snapshot alone and are the same for every reader
(:func:`~diagnosis.pages.support.page_cache.rendered_once`). Without this step the first request
after a cycle computes them, decoding the snapshot index's ``gpus`` or ``queues`` part (~0.3 s
of CPU each at 16,384 GPUs / 20,000 jobs). The task ``prerender_pages``, sent once the cycle
commits (:func:`diagnosis.actions.enqueue.prerender_on_commit`), computes them into the shared
page cache under the keys the pages read, so that request finds them there.

Bounded: the default language only, the pending jobs of at most :data:`MAX_QUEUES` queues
with no queue below them (each pending job kept once), and nothing for a snapshot that is no
longer the cluster's newest. Failure-safe: this only fills a cache; a part it did not render
(it failed, the worker was down, the cache was full) is rendered by the first request as
before, and each failure is logged and said in the task's result.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.utils import translation

from diagnosis.models import Cluster
from diagnosis.pages.inventory import heatmap_view
from diagnosis.pages.queues import pending_by_queue, pending_jobs, queue_rows
from diagnosis.pages.support.snapshots import StoredSnapshot, forget_cached, latest_snapshot

logger = logging.getLogger(__name__)

MAX_QUEUES = 256  # queues whose pending jobs are rendered ahead; others on their first request
COLORINGS = ("util", "health")


def prerender_pages(cluster_id: int, snapshot_id: int) -> dict[str, Any]:
    """Render the pages' parts of the cluster's snapshot ``snapshot_id`` into the shared page
    cache (skipped when it is not the cluster's newest any more, or the cache is off); what it
    rendered, what failed and how long it took."""
    if settings.GPUOBS_PAGE_CACHE_SECONDS <= 0:
        return {"outcome": "skipped", "why": "the page cache is off"}
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    latest = latest_snapshot(cluster) if cluster is not None else None
    if cluster is None or latest is None or latest.id != snapshot_id:
        return {"outcome": "skipped", "why": "not the cluster's newest snapshot"}
    started = time.process_time()
    rendered: dict[str, float] = {}  # each part rendered, with its CPU seconds
    failed: dict[str, str] = {}

    def attempt(part: str, render: Callable[[], object]) -> None:
        cpu = time.process_time()
        try:
            render()
        except Exception as error:  # a part not rendered here is rendered by its first request
            logger.exception("pre-rendering %s of %s failed", part, cluster.name)
            failed[part] = f"{type(error).__name__}: {error}"
        else:
            rendered[part] = round(time.process_time() - cpu, 3)

    # no garbage collection while it runs: what it decodes is over a million objects, and the
    # full collections over them were ~0.4 s of the step's ~0.9 s of CPU at 16,384 GPUs; one
    # at its end, once that is dropped, so the process's next task does not pay it
    collecting = gc.isenabled()
    gc.disable()
    try:
        with translation.override(settings.LANGUAGE_CODE):
            for colorby in COLORINGS:
                attempt(
                    f"heatmap {colorby}", lambda c=colorby: heatmap_view(cluster, latest, c, "")
                )
            attempt("queue tree", lambda: queue_rows(cluster, latest))
            attempt("queues' pending jobs", lambda: _pending_of_queues(cluster, latest))
    finally:
        # a worker serves no page: what it decoded (~17 MB at 16,384 GPUs) would only pile up in
        # its process, a snapshot a cycle
        forget_cached()
        if collecting:
            gc.enable()
            gc.collect()
    return {
        "outcome": "failed" if failed else "rendered",
        "snapshot": snapshot_id,
        "rendered": rendered,
        "failed": failed,
        "cpu_s": round(time.process_time() - started, 3),
    }


def _pending_of_queues(cluster: Cluster, latest: StoredSnapshot) -> None:
    """The pending jobs of each queue's page, of the first :data:`MAX_QUEUES` queues with none
    below them: they split the pending jobs among them, so the cache holds each job once (a
    parent's or a group's page, every job below it, is rendered by its first request)."""
    rows = queue_rows(cluster, latest)
    grouped = pending_by_queue(latest)
    queues = [name for name, row in rows.items() if not row.children][:MAX_QUEUES]
    for queue in queues:
        pending_jobs(cluster, latest, {queue}, grouped)
