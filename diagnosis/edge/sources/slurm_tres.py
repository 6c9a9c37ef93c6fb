"""The metrics source of Slurm sites without DCGM (``metrics_kind`` ``slurm_tres``): per-job
GPU utilization from Slurm's own accounting of the ``gres/gpuutil`` and ``gres/gpumem`` TRES.

Slurm records them when ``AccountingStorageTRES`` includes ``gres/gpuutil,gres/gpumem`` and a
GPU plugin reads NVML (``AutoDetect=nvml``): each task's value is the sum, over the GPUs its
processes use, of their SM utilization (%) and memory at the last sample
(``JobAcctGatherFrequency``, 30 s by default). Running jobs have them live in ``sstat``
(``sacct`` gets them when a step ends), so one cycle runs, besides the scheduler's reads::

    sstat -a -n -P -j <running GPU jobs> --format=JobID,NTasks,TRESUsageInAve,TRESUsageInMax

once for all running GPU jobs (at most ``max_jobs``, the rest not judged), through the Slurm
adapter's ``read_job_usage`` (the collection passes it in). A job's utilization is the sum
over its steps of ``TRESUsageInAve`` × ``NTasks`` divided by 100 × its GPUs (at most 1);
every GPU of the job gets that value as ``util.mean``. It is a job mean at one
sample, not a per-GPU window statistic: ``p10``/``p90`` stay unknown (so the bursty test of
``data-starvation`` is not judged), and ``gpumem`` is reported as bytes used
(``fb_used_bytes``), not a fraction, since Slurm does not give the GPUs' memory size.
"""

from __future__ import annotations

from typing import Any

from diagnosis.edge.config import ConfigSpec, Setting
from diagnosis.edge.errors import CollectError, ConfigError
from diagnosis.edge.sources import Measurement, MetricsRequest


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


def measure(request: MetricsRequest) -> Measurement:
    """Per-job GPU utilization of the running jobs, from Slurm's accounting."""
    try:
        settings = CONFIG.parse(request.config or {})
    except ConfigError as exc:
        problems = "; ".join(f"metrics_config.{p}" for p in exc.problems)
        raise CollectError(problems, permanent=True) from exc
    if request.read_job_usage is None:
        raise CollectError(
            f"metrics source slurm_tres needs scheduler_kind slurm, not {request.scheduler_kind!r}",
            permanent=True,
        )
    running = [j for j in request.jobs if j["state"] == "running" and j["allocation"]]
    asked = running[: settings["max_jobs"]]
    usage = request.read_job_usage([j["id"] for j in asked])
    gpus = gpu_metrics(asked, usage)
    expected = sum(len(p["gpus"]) for j in running for p in j["allocation"])
    coverage = len(gpus) / expected if expected else None
    problems = []
    if coverage is not None and coverage < settings["min_coverage"]:
        problems.append(
            f"gres/gpuutil covers {len(gpus)} of {expected} allocated GPUs ({coverage:.1%}), "
            f"below {settings['min_coverage']:.0%} (is gres/gpuutil in AccountingStorageTRES?)"
        )
    return Measurement(
        gpus=_merged(list(request.gpus), gpus),
        collection={
            "source": "slurm_tres",
            "coverage": None if coverage is None else round(coverage, 6),
            "gpus_expected": expected,
            "gpus_answered": len(gpus),
            "jobs_not_asked": [j["id"] for j in running[settings["max_jobs"] :]],
            "judgeable": not problems,
            "problems": problems,
            "util_sources": {"gres/gpuutil (job mean, last sample)": len(gpus)},
        },
    )


def _merged(known: list[Any], measured: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The scheduler's GPU entries (cliques) with the measured values added, one per GPU."""
    by_key = {(g["node"], g["index"]): dict(g) for g in known}
    for gpu in measured:
        by_key.setdefault((gpu["node"], gpu["index"]), {}).update(gpu)
    return list(by_key.values())
