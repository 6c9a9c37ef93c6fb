"""The fairness report as CSV: one row per tenant, the columns of :data:`CSV_COLUMNS` in that
order (documented in docs/fairness.md; a test keeps the two in step).

Numbers are the JSON report's, so CSV, API, page and PDF agree; an unknown value is an empty
cell. Shares are fractions (0..1), durations seconds, GPU-hours hours of one GPU.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any

from diagnosis.core.fairness import SIZE_CLASSES, TENANT_BUCKETS
from diagnosis.reports.fairness_report import FairnessReportData


def _class_token(name: str) -> str:
    return {"1": "1", "2-8": "2_8", "9-64": "9_64", ">64": "gt64"}[name]


def _bucket_token(name: str) -> str:
    return name.replace("-", "_")


# column -> what it holds (docs/fairness.md repeats this list)
CSV_COLUMNS: dict[str, str] = {
    "cluster": "cluster name",
    "from": "start of the period (exclusive), RFC 3339 UTC",
    "to": "end of the period (inclusive), RFC 3339 UTC",
    "tenant": "tenant name",
    "entitlement": "time-averaged share of the entitlement (deserved GPUs, else weights), 0..1",
    "fair_share": "water-filled fair GPU-seconds ÷ usable GPU-seconds, 0..1",
    "usage": "allocated GPU-seconds ÷ usable GPU-seconds, 0..1",
    "ratio": "usage ÷ fair_share (empty when the fair share is 0)",
    "demand_gpu_hours": "GPU-hours its running and pending jobs asked for",
    "demand_share": "demand ÷ usable GPU-hours",
    "allocated_gpu_hours": "GPU-hours its jobs held",
    "fair_gpu_hours": "GPU-hours water-filling would have given it",
    "jobs_started": "jobs that started in the period",
    "jobs_waiting": "jobs still waiting at the end of the period",
    "wait_p50_s": "median wait of those jobs (start - submission, or the wait so far), seconds",
    "wait_p95_s": "95th percentile wait of those jobs, seconds",
    **{
        column: text
        for name in SIZE_CLASSES
        for column, text in (
            (f"jobs_started_{_class_token(name)}", f"jobs of {name} GPU(s) that started"),
            (f"jobs_waiting_{_class_token(name)}", f"jobs of {name} GPU(s) still waiting"),
            (f"wait_p50_s_{_class_token(name)}", f"median wait of jobs of {name} GPU(s)"),
            (f"wait_p95_s_{_class_token(name)}", f"95th percentile wait of jobs of {name} GPU(s)"),
        )
    },
    "starvation_findings": "distinct starvation findings of its jobs in the period",
    "starving_job_hours": "hours its jobs spent with a starvation finding, summed over jobs",
    "preemptions": "preemptions its jobs suffered",
    "util": "mean GPU utilization of its GPU-seconds with a reading, 0..1",
    "mfu": "model FLOPs utilization of its busy GPU-seconds where known, 0..1",
    "mfu_weighted_gpu_hours": "busy GPU-hours weighted by MFU",
    "held_idle_gpu_hours": "GPU-hours it held idle (allocated-idle + held-by-partial-gang)",
    **{
        f"gpu_hours_{_bucket_token(bucket)}": f"GPU-hours of its jobs in the {bucket} bucket"
        for bucket in TENANT_BUCKETS
    },
    "dominant_share": "DRF dominant share (empty: CPU and memory not known)",
    "dominant_resource": "the resource of the dominant share",
    "jain_index": "Jain's index of the ratios of every tenant with demand (the cluster's)",
    "useful_gpu_hours": "allocated GPU-hours minus partial-gang, hung, idle, data-starved "
    "and unavailable ones (the allocated-busy bucket)",
    "productive_share": "useful GPU-seconds ÷ usable GPU-seconds, 0..1",
    "productive_ratio": "useful ÷ fair GPU-seconds (empty when the fair share is 0)",
    "mfu_weighted_ratio": "productive ratio with busy GPU-seconds weighted by MFU relative to "
    "the cluster's (empty: no MFU known)",
    "productively_starved": "1 when the allocated ratio looks fair (>= 0.8) while the "
    "productive ratio is under half of it, else 0",
    "productive_jain_index": "Jain's index of the productive ratios (the cluster's)",
    "currency": "the currency of cost and wasted_cost (empty: the cluster is not priced)",
    "cost": "allocated GPU-hours × the cluster's price per GPU-hour, to the cent",
    "wasted_cost": "GPU-hours held by partial gangs, hung, idle or data-starved × the price",
}


def csv_rows(data: FairnessReportData) -> list[dict[str, Any]]:
    """One dict per tenant with exactly the :data:`CSV_COLUMNS`."""
    document = data.as_dict()
    productive = {row["tenant"]: row for row in document["productive"]["tenants"]}
    rows = []
    for tenant in document["tenants"]:
        row: dict[str, Any] = {
            "cluster": document["cluster"],
            "from": document["from"],
            "to": document["to"],
            "tenant": tenant["tenant"],
            "entitlement": tenant["entitlement"],
            "fair_share": tenant["fair_share"],
            "usage": tenant["usage"],
            "ratio": tenant["ratio"],
            "demand_gpu_hours": tenant["demand"],
            "demand_share": tenant["demand_share"],
            "allocated_gpu_hours": tenant["allocated_gpu_hours"],
            "fair_gpu_hours": tenant["fair_gpu_hours"],
            "jobs_started": tenant["jobs_started"],
            "jobs_waiting": tenant["jobs_waiting"],
            "wait_p50_s": tenant["wait_p50_s"],
            "wait_p95_s": tenant["wait_p95_s"],
        }
        waits: Mapping[str, Mapping[str, Any]] = tenant["waits"]
        for name in SIZE_CLASSES:
            token = _class_token(name)
            row[f"jobs_started_{token}"] = waits[name]["jobs_started"]
            row[f"jobs_waiting_{token}"] = waits[name]["jobs_waiting"]
            row[f"wait_p50_s_{token}"] = waits[name]["p50_s"]
            row[f"wait_p95_s_{token}"] = waits[name]["p95_s"]
        for column in (
            "starvation_findings",
            "starving_job_hours",
            "preemptions",
            "util",
            "mfu",
            "mfu_weighted_gpu_hours",
            "held_idle_gpu_hours",
        ):
            row[column] = tenant[column]
        for bucket in TENANT_BUCKETS:
            row[f"gpu_hours_{_bucket_token(bucket)}"] = tenant["gpu_hours"][bucket]
        row["dominant_share"] = tenant["dominant_share"]
        row["dominant_resource"] = tenant["dominant_resource"]
        row["jain_index"] = document["jain_index"]
        useful = productive.get(tenant["tenant"]) or {}
        for column in ("useful_gpu_hours", "productive_share", "productive_ratio"):
            row[column] = useful.get(column)
        row["mfu_weighted_ratio"] = useful.get("mfu_weighted_ratio")
        row["productively_starved"] = int(bool(useful.get("productively_starved")))
        row["productive_jain_index"] = document["productive"]["jain_index"]
        money = tenant["cost"] or {}
        row["currency"] = document["pricing"]["currency"] if money else None
        row["cost"] = money.get("held")
        row["wasted_cost"] = money.get("wasted")
        rows.append(row)
    return rows


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: Any) -> Any:
    """A text cell that a spreadsheet would read as a formula (``=HYPERLINK(...)``, ``+``,
    ``-``, ``@``, a tab or CR first) gets a leading ``'`` (OWASP's CSV injection advice), so it
    is shown as text; numbers stay numbers."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def render_csv(data: FairnessReportData) -> str:
    """The CSV text (header row first; ``None`` as an empty cell)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for row in csv_rows(data):
        writer.writerow({k: "" if v is None else safe_cell(v) for k, v in row.items()})
    return out.getvalue()
