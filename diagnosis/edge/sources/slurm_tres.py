"""The metrics source of Slurm sites without DCGM (``metrics_kind`` ``slurm_tres``): per-job
GPU utilization from Slurm's own accounting of the ``gres/gpuutil`` and ``gres/gpumem`` TRES.

Slurm records them when ``AccountingStorageTRES`` includes ``gres/gpuutil,gres/gpumem`` and a
GPU plugin reads NVML (``AutoDetect=nvml``): each task's value is the sum, over the GPUs its
processes use, of their SM utilization (%) and memory at the last sample
(``JobAcctGatherFrequency``, 30 s by default). Running jobs have them live in ``sstat``
(``sacct`` gets them when a step ends), so one cycle runs, besides the scheduler's reads::

    sstat -a -n -P -j <running GPU jobs> --format=JobID,NTasks,TRESUsageInAve,TRESUsageInMax

once for all running GPU jobs (at most ``max_jobs``, the rest not judged). A job's utilization
is the sum over its steps of ``TRESUsageInAve`` × ``NTasks`` divided by 100 × its GPUs (at
most 1); every GPU of the job gets that value as ``util.mean``. It is a job mean at one
sample, not a per-GPU window statistic: ``p10``/``p90`` stay unknown (so the bursty test of
``data-starvation`` is not judged), and ``gpumem`` is reported as bytes used
(``fb_used_bytes``), not a fraction, since Slurm does not give the GPUs' memory size.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from diagnosis.core.vocabulary import SNAPSHOT_FORMAT, format_time
from diagnosis.edge.config import ConfigSpec, Setting
from diagnosis.edge.errors import CollectError, ConfigError, SchedulerError
from diagnosis.edge.schedulers.registry import adapter_for
from diagnosis.edge.schedulers.slurm.parse import values as slurm_values
from diagnosis.edge.sources import ClusterLike

FIELDS = ("JobID", "NTasks", "TRESUsageInAve", "TRESUsageInMax")
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
_AMOUNT = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)$")


def _fraction(value: float) -> float:
    if not 0 <= value <= 1:
        raise ValueError(f"expected a fraction between 0 and 1, got {value!r}")
    return float(value)


def _jobs(value: int) -> int:
    if value < 1:
        raise ValueError(f"expected an integer >= 1, got {value!r}")
    return value


CONFIG = ConfigSpec(
    (
        Setting("max_jobs", int, 2000, "running GPU jobs asked about per cycle", check=_jobs),
        Setting(
            "min_coverage",
            float,
            0.5,
            "below this share of allocated GPUs with a value, GPU rules are not judged",
            check=_fraction,
        ),
    ),
    what="metrics_config",
)


def tres_amounts(text: str) -> dict[str, float]:
    """A TRES usage string (``cpu=00:01:02,gres/gpumem=21794M,gres/gpuutil=99``) → the
    ``gres/gpu*`` amounts as numbers (memory in bytes)."""
    amounts: dict[str, float] = {}
    for item in (text or "").split(",")[:256]:
        key, _, value = item.partition("=")
        if not key.startswith("gres/gpu"):
            continue
        match = _AMOUNT.match(value.strip())
        if match:
            amounts[key] = float(match.group(1)) * UNITS[match.group(2)]
    return amounts


def parse_sstat(text: str) -> dict[str, dict[str, float]]:
    """``sstat -n -P`` rows → per job id: ``gpuutil`` (sum over tasks, %) and ``gpumem``
    (bytes, sum over tasks), from its steps other than ``extern``."""
    jobs: dict[str, dict[str, float]] = {}
    for line in text.splitlines()[:100_000]:
        columns = line.split("|")
        if len(columns) < 3:
            continue
        job, _, step = columns[0].partition(".")
        if not job or step == "extern":
            continue
        tasks = slurm_values.int_value(columns[1]) or 1
        average = tres_amounts(columns[2])
        totals = jobs.setdefault(job, {})
        for key, name in (("gres/gpuutil", "gpuutil"), ("gres/gpumem", "gpumem")):
            if key in average:
                totals[name] = totals.get(name, 0.0) + average[key] * tasks
    return {job: totals for job, totals in jobs.items() if totals}


def gpu_metrics(jobs: list[dict[str, Any]], usage: dict[str, dict[str, float]]) -> list[dict]:
    """``gpus[]`` entries for the running jobs that have a value: each of the job's GPUs gets
    the job's utilization (and its share of the memory used)."""
    gpus: list[dict[str, Any]] = []
    for job in jobs:
        totals = usage.get(job["id"])
        held = [(pod["node"], index) for pod in job["allocation"] for index in pod["gpus"]]
        if not totals or not held or "gpuutil" not in totals:
            continue
        util = round(min(1.0, max(0.0, totals["gpuutil"] / (100 * len(held)))), 4)
        for node, index in held:
            gpu: dict[str, Any] = {"node": node, "index": index, "util": {"mean": util}}
            if "gpumem" in totals:
                gpu["fb_used_bytes"] = {"mean": round(totals["gpumem"] / len(held))}
            gpus.append(gpu)
    return gpus


def collect(
    cluster: ClusterLike,
    *,
    previous_as_of: datetime | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The cluster's snapshot: Slurm's state and events, and per-job GPU utilization."""
    if cluster.scheduler_kind != "slurm":
        raise CollectError(
            f"metrics source slurm_tres needs scheduler_kind slurm, not {cluster.scheduler_kind!r}",
            permanent=True,
        )
    try:
        settings = CONFIG.parse(cluster.metrics_config or {})
    except ConfigError as exc:
        problems = "; ".join(f"metrics_config.{p}" for p in exc.problems)
        raise CollectError(problems, permanent=True) from exc
    at = (now or datetime.now(UTC)).replace(microsecond=0)
    cursor = getattr(cluster, "event_cursor", "") or None
    try:
        adapter = adapter_for("slurm", cluster.scheduler_config or {}, cluster=cluster.name)
        if getattr(adapter, "rest", None) is not None:
            raise SchedulerError(
                "slurm_tres runs sstat: it needs scheduler_config.transport cli", permanent=True
            )
        state = adapter.read_state()
        batch = adapter.read_events(cursor)
        running = [j for j in state.jobs if j["state"] == "running" and j["allocation"]]
        asked = running[: settings["max_jobs"]]
        usage: dict[str, dict[str, float]] = {}
        if asked:
            text = adapter.commands.run(  # type: ignore[attr-defined]
                "sstat",
                "-a",
                "-n",
                "-P",
                "-j",
                ",".join(j["id"] for j in asked),
                f"--format={','.join(FIELDS)}",
            )
            usage = parse_sstat(text)
    except SchedulerError as exc:
        raise CollectError(f"scheduler: {exc}", permanent=exc.permanent) from exc
    gpus = gpu_metrics(asked, usage)
    expected = sum(len(p["gpus"]) for j in running for p in j["allocation"])
    coverage = len(gpus) / expected if expected else None
    problems = []
    if coverage is not None and coverage < settings["min_coverage"]:
        problems.append(
            f"gres/gpuutil covers {len(gpus)} of {expected} allocated GPUs ({coverage:.1%}), "
            f"below {settings['min_coverage']:.0%} (is gres/gpuutil in AccountingStorageTRES?)"
        )
    log = getattr(adapter, "log", None)
    return {
        "format": SNAPSHOT_FORMAT,
        "cluster": cluster.name,
        "as_of": state.as_of or format_time(at),
        "scheduler": dict(state.scheduler),
        "nodes": list(state.nodes),
        "gpus": _merged(list(state.gpus), gpus),
        "queues": list(state.queues),
        "jobs": list(state.jobs),
        "events": list(batch.events),
        "collection": {
            "source": "slurm_tres",
            "scheduler": "slurm",
            "event_cursor": batch.cursor,
            "events": len(batch.events),
            "coverage": None if coverage is None else round(coverage, 6),
            "gpus_expected": expected,
            "gpus_answered": len(gpus),
            "jobs_not_asked": [j["id"] for j in running[settings["max_jobs"] :]],
            "judgeable": not problems,
            "problems": problems,
            "util_sources": {"gres/gpuutil (job mean, last sample)": len(gpus)},
            "commands": list(getattr(log, "commands", []) or []),
        },
    }


def _merged(known: list[dict[str, Any]], measured: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The scheduler's GPU entries (cliques) with the measured values added, one per GPU."""
    by_key = {(g["node"], g["index"]): dict(g) for g in known}
    for gpu in measured:
        by_key.setdefault((gpu["node"], gpu["index"]), {}).update(gpu)
    return list(by_key.values())
