"""The native gang API (``scheduling.k8s.io`` Workload, ``policy.gang.minCount``) seen by the
Volcano and Kueue adapters, and Kueue v1beta2 by default (served-version discovery) with
Cohorts and their fair-sharing weights -- the real client against the loopback API server."""

from __future__ import annotations

from typing import Any

import pytest

from diagnosis.core import snapshot
from diagnosis.edge.schedulers.base import SchedulerError
from diagnosis.edge.schedulers.kubernetes.kueue import KueueAdapter
from diagnosis.edge.schedulers.kubernetes.volcano import VolcanoAdapter
from tests.support.kube_server import (
    adapter_config,
    kube_api_fixture,
    load_fixture,
)

pytestmark = pytest.mark.kubernetes


kube_api = kube_api_fixture("nodes", versions=("v1beta2",))


def by(rows: list[dict[str, Any]], key: str = "id") -> dict[Any, dict[str, Any]]:
    return {row[key]: row for row in rows}


def test_a_native_workload_gang_is_a_gang_in_the_snapshot(kube_api) -> None:
    kube_api.load(load_fixture("gangs"))
    state = VolcanoAdapter(adapter_config()).read_state()
    job = by(state.jobs)["research/llm-ft/workers"]
    assert (job["gang"], job["min_member"], job["pods"], job["state"]) == (True, 4, 4, "pending")
    assert len(job["allocation"]) == 2  # a partial gang: 2 of 4 bound
    assert "research/llm-ft-0" not in by(state.jobs)  # its pods are not one-pod jobs
    snap = snapshot.load(
        {
            "format": snapshot.FORMAT,
            "cluster": "k8s",
            "as_of": "2026-11-29T08:00:00Z",
            "nodes": state.nodes,
            "jobs": state.jobs,
        }
    )
    assert bool(snap.jobs.loc["research/llm-ft/workers", "gang"])


def test_without_the_gang_api_the_pods_are_lone_jobs(kube_api) -> None:
    kube_api.unserved.add("scheduling.k8s.io/v1alpha1")
    kube_api.load(o for o in load_fixture("gangs") if o["kind"] != "Workload")
    jobs = by(VolcanoAdapter(adapter_config()).read_state().jobs)
    assert "research/llm-ft-0" in jobs
    assert not kube_api.requests_to("GET", "/scheduling.k8s.io/")


def test_kueue_reads_native_gangs_its_workloads_do_not_own(kube_api) -> None:
    kube_api.load(load_fixture("gangs"))
    kube_api.load(as_v1beta2(o) for o in load_fixture("kueue"))
    jobs = by(KueueAdapter(adapter_config()).read_state().jobs)
    assert jobs["research/llm-ft/workers"]["min_member"] == 4


def as_v1beta2(obj: dict[str, Any]) -> dict[str, Any]:
    if not obj["apiVersion"].startswith("kueue.x-k8s.io/"):
        return obj
    spec = dict(obj.get("spec") or {})
    if "cohort" in spec:
        spec["cohortName"] = spec.pop("cohort")
    return {**obj, "apiVersion": "kueue.x-k8s.io/v1beta2", "spec": spec}


COHORT = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Cohort",
    "metadata": {"name": "org"},
    "spec": {"parentName": "company", "fairSharing": {"weight": "3"}},
}


def test_kueue_speaks_v1beta2_where_served(kube_api) -> None:
    kube_api.load(as_v1beta2(o) for o in load_fixture("kueue"))
    adapter = KueueAdapter(adapter_config())
    assert adapter.version == "v1beta2"
    adapter.read_state()
    assert kube_api.requests_to("GET", "/kueue.x-k8s.io/v1beta2/workloads")
    assert not kube_api.requests_to("GET", "/kueue.x-k8s.io/v1beta1/")


def test_kueue_falls_back_to_v1beta1_only_where_v1beta2_is_not_served(kube_api) -> None:
    kube_api.unserved.add("kueue.x-k8s.io/v1beta2")
    kube_api.load(load_fixture("kueue"))
    assert KueueAdapter(adapter_config()).version == "v1beta1"


def test_a_configured_version_the_cluster_does_not_serve_is_named(kube_api) -> None:
    kube_api.unserved.add("kueue.x-k8s.io/v1beta1")
    with pytest.raises(SchedulerError, match=r"serves kueue\.x-k8s\.io v1beta2, not v1beta1"):
        KueueAdapter(adapter_config(api_version="v1beta1")).read_state()


def test_cohorts_carry_their_fair_sharing_weight_and_parent(kube_api) -> None:
    kube_api.load(as_v1beta2(o) for o in load_fixture("kueue"))
    kube_api.put(COHORT)
    state = KueueAdapter(adapter_config()).read_state()
    assert state.scheduler["cohorts"] == {"org": {"weight": 3, "parent": "company"}}
    assert by(state.queues, "name")["cq-prod"]["cohort"] == "org"


def test_a_waiting_workloads_quota_reason_is_an_event(kube_api) -> None:
    objects = [as_v1beta2(o) for o in load_fixture("kueue")]
    kube_api.load(o for o in objects if o["kind"] != "Event")
    events = KueueAdapter(adapter_config()).read_events(None).events
    waiting = [e for e in events if e["job"] == "research/job-sweep-9a1b3"]
    assert [(e["kind"], e["reason"]) for e in waiting] == [("failed_scheduling", "Pending")]
    assert waiting[0]["message"].startswith("couldn't assign flavors to pod set main")


def test_cluster_queues_sit_under_their_cohort_in_the_fair_sharing_tree(kube_api) -> None:
    kube_api.load(as_v1beta2(o) for o in load_fixture("kueue"))
    kube_api.put(COHORT)
    state = KueueAdapter(adapter_config()).read_state()
    assert state.scheduler["queue_parents"] == {"cq-prod": "org", "cq-research": "org"}


def test_a_cohort_weight_is_written_to_the_cohort(kube_api) -> None:
    kube_api.load(as_v1beta2(o) for o in load_fixture("kueue"))
    kube_api.put(COHORT)
    result = KueueAdapter(adapter_config()).apply(
        {
            "kind": "queue-weight",
            "field": "cohort-weight",
            "target": "queue:org",
            "from": 3,
            "to": 5,
        },
        dry_run=False,
    )
    assert (result.before, result.after) == (3, 5)
    assert kube_api.get("Cohort", "org")["spec"]["fairSharing"] == {"weight": "5"}
    assert kube_api.requests_to("PATCH", "/kueue.x-k8s.io/v1beta2/cohorts/org")
