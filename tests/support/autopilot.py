"""Builders for the autopilot's tests (docs/autopilot.md): an approved policy (carol writes it,
dave approves it, as two people do), an Xid drain as the ``drain-node`` generator stores it, and
the step of a cluster's latest cycle run with what it sends on commit."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from diagnosis.actions.autopilot.policies import PolicyTerms, approve_policy, create_policy
from diagnosis.actions.autopilot.step import run_autopilot
from diagnosis.models import Cluster, ClusterCycle, Finding, Recommendation, RemediationPolicy

XID_79 = {"code": 79, "name": "GPU has fallen off the bus"}


def approved_policy(
    writer: Any, approver: Any, name: str = "xid-drain", **terms: Any
) -> RemediationPolicy:
    """A policy ``writer`` wrote and ``approver`` approved; a drain of Xid 79, enforcing, one
    drain per pool an hour and at most 30% of a pool out, unless ``terms`` say otherwise."""
    values = {
        "kind": "drain-node",
        "condition": {"xid_codes": [79]},
        "mode": "enforce",
        "per_pool_per_hour": 1,
        "pool_out_share": 0.3,
        "per_hour": 5,
        **terms,
    }
    policy = create_policy(writer, name, PolicyTerms(**values))
    return approve_policy(policy, approver)


def xid_drain(cluster: Cluster, node: str, *, gpus: int = 8, pool: str = "a100") -> Recommendation:
    """A proposed drain of ``node`` motivated by an Xid 79 finding on its GPU 3, in the shape the
    ``drain-node`` generator stores (diagnosis/core/recommend/builtin/drain_node.py: the impact's
    ``pool``, ``gpus_removed``, ``basis.codes``; the finding's evidence as the ``xid`` rule
    writes it)."""
    now = timezone.now()
    finding = Finding.objects.create(
        cluster=cluster,
        rule_id="xid",
        subject=f"gpu:{node}/3",
        state="firing",
        severity="critical",
        first_seen=now,
        last_seen=now,
        evidence={"node": node, "index": 3, "codes": [XID_79]},
    )
    latest = ClusterCycle.objects.filter(cluster=cluster).order_by("-as_of").first()
    rec = Recommendation.objects.create(
        cluster=cluster,
        kind="drain-node",
        target=f"node:{node}",
        change={"from": "ready", "to": "drained", "reason": f"gpuobs: Xid 79 on {node}/3"},
        impact={
            "method": "static",
            "verdict": "not simulated",
            "pool": pool,
            "gpus_removed": gpus,
            "basis": {"codes": [79]},
            "headline": f"takes {gpus} GPUs of {node} out of scheduling",
        },
        proposed_as_of=latest.as_of if latest else None,
        last_proposed_as_of=latest.as_of if latest else None,
    )
    rec.motivating_findings.add(finding)
    return rec


def step(cluster: Cluster, on_commit: Any) -> dict[str, Any]:
    """The autopilot step of the cluster's latest cycle, its applies run in-process (``on_commit``
    is pytest-django's ``django_capture_on_commit_callbacks``; Celery eager)."""
    cycle = ClusterCycle.objects.filter(cluster=cluster).order_by("-id").first()
    with on_commit(execute=True):
        return run_autopilot(cluster.pk, cycle.pk)
