"""``xid``: a GPU reported an Xid error in the window (docs/rules.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from diagnosis.core import xid_catalog
from diagnosis.core.rules.base import Judgement, Rule, RuleDoc, Threshold
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.rules.running_jobs import text
from diagnosis.core.snapshot import ClusterSnapshot, format_time
from diagnosis.core.text import Text, gettext_noop, message, no_tenant
from diagnosis.core.vocabulary import UNAVAILABLE_NODE_STATES

HEALTHY_S = Threshold(
    "healthy_s",
    1800,
    "how long a GPU must have been healthy (health ok, node ready, no Xid reported) before its "
    "Xid finding -- and on-call's incident -- resolves",
    unit="s",
)


def evaluate(
    snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
) -> Judgement:
    xids = snapshot.xids
    in_window = xids[(xids["time"] >= snapshot.window_start) & (xids["time"] <= snapshot.as_of)]
    sustained = _not_healthy(snapshot, facts) - {
        f"gpu:{node}/{int(index)}"
        for node, index in zip(in_window["node"], in_window["index"], strict=True)
    }
    if in_window.empty:
        return Judgement(sustained=sustained)

    per_code = (
        in_window.groupby(["node", "index", "code"], sort=True)["time"]
        .agg(["size", "min", "max"])
        .reset_index()
    )
    # The GPUs with Xids, their holder, health and node state (read from the few nodes involved).
    state = facts.gpu_state
    state = state[state["node"].isin(per_code["node"].unique())]
    state = state[~state[["node", "index"]].duplicated().to_numpy()]  # one row per physical GPU
    gpus = (
        per_code[["node", "index"]]
        .drop_duplicates()
        .merge(
            state[["node", "index", "job", "health", "node_state"]],
            on=["node", "index"],
            how="left",
        )
    )
    holders = _holders(snapshot.jobs, gpus["job"])
    # GPUs whose index an adapter guessed, and GPUs whose holder's indexes are guessed (the
    # device plugin without its annotation: the job may hold another GPU of the node)
    index_guessed = set(
        zip(
            state["node"][state["index_guessed"]],
            state["index"][state["index_guessed"]],
            strict=True,
        )
    )
    allocs = snapshot.allocations
    guessed_allocs = allocs[allocs["guessed"].to_numpy(dtype=bool)]
    holder_guessed = set(zip(guessed_allocs["node"], guessed_allocs["index"], strict=True))

    codes_by_gpu: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for node, index, code, count, first, last in zip(
        *(per_code[c].tolist() for c in ("node", "index", "code", "size", "min", "max")),
        strict=True,
    ):
        info = xid_catalog.lookup(int(code))
        codes_by_gpu.setdefault((node, int(index)), []).append(
            {
                **info.as_dict(),
                "count": int(count),
                "first": format_time(first),
                "last": format_time(last),
            }
        )

    window_start = format_time(snapshot.window_start)
    findings = []
    for node, index, job_id, health, node_state in zip(
        *(gpus[c].tolist() for c in ("node", "index", "job", "health", "node_state")),
        strict=True,
    ):
        codes = codes_by_gpu[(node, int(index))]
        critical = [c["code"] for c in codes if c["severity"] == "critical"]
        job_list = [holders[job_id]] if job_id in holders else []
        tenants = [j["tenant"] for j in job_list if j["tenant"] is not None]
        names = ", ".join(
            f"Xid {c['code']} ({c['meaning'].rstrip('.')})"
            + (f" x{c['count']}" if c["count"] > 1 else "")
            for c in codes
        )
        worst = min(codes, key=_urgency)
        placed_by_guess = (node, int(index)) in holder_guessed
        if not job_list:
            who = message(gettext_noop("no job holds it now"))
        elif placed_by_guess:
            who = message(
                gettext_noop(
                    "job %(job)s (%(tenant)s) is on it (a guess: the scheduler does not say "
                    "which GPUs it holds)"
                ),
                job=str(job_list[0]["id"]),
                tenant=no_tenant(job_list[0]["tenant"]),
            )
        else:
            who = message(
                gettext_noop("job %(job)s (%(tenant)s) is on it"),
                job=str(job_list[0]["id"]),
                tenant=no_tenant(job_list[0]["tenant"]),
            )
        if (node, int(index)) in index_guessed:
            who = message(
                gettext_noop("%(who)s; the GPU's index is a guess (join by UUID)"), who=who
            )
        summary = message(
            gettext_noop(
                "GPU %(gpu)s reported %(names)s in the last %(window)s; action: %(action)s; "
                "%(who)s."
            ),
            gpu=f"{node}/{int(index)}",
            names=names,
            window=_duration(snapshot.window_s),
            action=str(worst["action"]),
            who=who,
        )
        evidence = {
            "node": node,
            "index": int(index),
            "codes": codes,
            "names": [c["name"] for c in codes],
            "critical_codes": critical,
            "xid_count": sum(c["count"] for c in codes),
            "action": worst["action"],
            "action_text": worst["action_text"],
            "meaning": worst["meaning"],
            "jobs": job_list,
            "job_ids": [j["id"] for j in job_list],
            "tenants": tenants,
            "gpu_free": not job_list,
            "holder_guessed": placed_by_guess,
            "index_guessed": (node, int(index)) in index_guessed,
            "gpu_health": health,
            "node_state": node_state,
            "window_start": window_start,
            "window_end": format_time(snapshot.as_of),
            "catalog": "NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors) via leptonai/gpud",
        }
        findings.append(
            RULE.finding(
                f"gpu:{node}/{int(index)}",
                summary,
                evidence,
                severity="critical" if critical else "warning",
            )
        )
    return Judgement(tuple(findings), sustained=sustained)


def _not_healthy(snapshot: ClusterSnapshot, facts: SnapshotFacts) -> frozenset[str]:
    """Subjects of the GPUs that are not healthy now: GPU health not ``ok``, node cordoned,
    drained or down, or an Xid still reported (before the window). Their findings keep firing
    (:attr:`Judgement.sustained`), so an Xid finding lasts while its GPU is out of service and
    resolves ``healthy_s`` after it is healthy again -- the same test and period as on-call's
    incident (diagnosis/actions/oncall/incidents.py)."""
    state = facts.gpu_state
    bad = (state["health"] != "ok").to_numpy() | state["node_state"].isin(
        UNAVAILABLE_NODE_STATES
    ).to_numpy()
    keys = set(zip(state["node"][bad], state["index"][bad], strict=True))
    keys |= set(zip(snapshot.xids["node"], snapshot.xids["index"], strict=True))
    return frozenset(f"gpu:{node}/{int(index)}" for node, index in keys)


# Which code's action leads when a GPU reported several: the most disruptive first.
ACTION_URGENCY = (
    "service",
    "reboot-node",
    "check-hardware",
    "reset-gpu",
    "restart-app",
    "check-app",
    "check-other-xids",
    "check-recovery-action",
    "update-software",
    "check-docs",
    "none",
)


def _urgency(code: Mapping[str, Any]) -> tuple[int, int, int]:
    action = code["action"]
    rank = ACTION_URGENCY.index(action) if action in ACTION_URGENCY else len(ACTION_URGENCY)
    return (code["severity"] != "critical", rank, code["code"])


def _duration(seconds: int) -> Text:
    if seconds % 60 == 0:
        return message(gettext_noop("%(minutes)s min"), minutes=seconds // 60)
    return message(gettext_noop("%(seconds)s s"), seconds=seconds)


def _holders(jobs: pd.DataFrame, job_ids: pd.Series) -> dict[str, dict[str, Any]]:
    """``job id -> {id, tenant, queue, state, kind}`` for the jobs holding the given GPUs."""
    held = jobs.loc[
        jobs.index.isin(job_ids.dropna().unique()), ["tenant", "queue", "state", "kind"]
    ]
    columns = {name: text(held[name]).tolist() for name in held.columns}
    return {
        job_id: {"id": job_id, **{name: values[i] for name, values in columns.items()}}
        for i, job_id in enumerate(held.index.tolist())
    }


RULE = Rule(
    id="xid",
    title="GPU reported an Xid error",
    severity="warning",
    subject_kind="gpu:",
    thresholds=(HEALTHY_S,),
    doc=RuleDoc(
        detects=(
            "A GPU that reported at least one Xid error with a time in the window "
            "`[as_of - window_s, as_of]` (both ends included; Xids outside it are ignored). "
            "One finding per GPU, listing every code seen. Severity is critical when any of "
            "the codes is critical in gpuobs's Xid catalog (NVIDIA's recommended action needs "
            "a GPU reset, a node reboot or service, e.g. 48, 62, 64, 74, 79, 95, 119, 120), "
            "warning otherwise (e.g. the application-level 13, 31, 43). The finding keeps "
            "firing after the Xid leaves the window while the GPU is not healthy -- its "
            "`health` not `ok` (the device plugin, DRA device taints, NVSentinel's node "
            "conditions), its node cordoned, drained or down, or an older Xid still reported "
            "-- and resolves only once it has been healthy for `healthy_s`, the period after "
            "which on-call's incident resolves too."
        ),
        why=(
            "Xids are the NVIDIA driver's error reports. Critical ones mean the GPU is, or "
            "soon will be, unusable: every job scheduled onto it fails until it is reset or "
            "repaired, and a gang job on it stalls all its other GPUs. Application-level Xids "
            "usually point at a bug in the job, not at the hardware, unless they repeat."
        ),
        fix=(
            "Follow the `action` of the most severe code: `reset-gpu`, `reboot-node`, "
            "`service` and `check-hardware` need the node cordoned and drained first (the "
            "`drain-node` recommendation does this), then the reset / reboot / RMA. For "
            "`restart-app`, tell the job's owner (jobs and tenants in the evidence); if the "
            "same application-level Xid repeats on one GPU with different jobs, treat it as "
            "hardware and run DCGM diagnostics (`dcgmi diag -r 3`). See docs/xid.md."
        ),
        evidence=(
            "`codes` (per code seen, ascending: `code`, `count`, `first`, `last`, `name`, "
            "`meaning`, `action`, `action_text`, NVIDIA's `nvidia_immediate` / "
            "`nvidia_investigatory` buckets, `app_level`, `severity`, `known`), `names`, "
            "`critical_codes`, `xid_count`; `action`, `action_text` and `meaning` of the most "
            "urgent code; `jobs` (id, tenant, queue, state, kind), `job_ids` and `tenants` on "
            "that GPU, `gpu_free` when no job holds it now, `holder_guessed` when that job's GPU "
            "indexes are the adapter's guess (`allocation[].gpus_guessed`: the job may hold "
            "another GPU of the node), `index_guessed` when the GPU's own index is, "
            "`gpu_health`, `node_state`, and the window."
        ),
        references=(
            "docs/recommendations.md#kinds (`drain-node`)",
            "NVIDIA, Xid Errors: https://docs.nvidia.com/deploy/xid-errors/",
            "gpuobs Xid catalog: docs/xid.md (from leptonai/gpud's copy of NVIDIA's catalog)",
        ),
    ),
    evaluate=evaluate,
    for_s=0,
    keep_firing_for_s=HEALTHY_S.default,
    keep_firing_threshold=HEALTHY_S.name,
    reads_gpu_metrics=True,
)
