"""Slurm's accounting of each running job's GPU use: the ``gres/gpuutil`` and ``gres/gpumem``
TRES in ``sstat -n -P`` rows (what the ``slurm_tres`` metrics source reads through
:meth:`SlurmAdapter.read_job_usage`)."""

from __future__ import annotations

import re

from diagnosis.edge.schedulers.slurm.parse import values as slurm_values

SSTAT_FIELDS = ("JobID", "NTasks", "TRESUsageInAve", "TRESUsageInMax")
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
_AMOUNT = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)\Z")


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
