"""``advisory``: who should do what about findings gpuobs has no setting for.

One advisory per finding of ``topology-misplacement``, ``data-starvation``, ``low-mfu`` and
``idle-allocation`` (target ``job:<id>``, for the job's owner and, where a cluster setting
helps, the admin). Nothing is applied, so nothing is simulated or preselected. (Gang deadlocks
have their own generator, ``gang_release.py``: the release, and the admission setting.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from diagnosis.core.recommend.base import (
    ADVISORY,
    NOT_SIMULATED,
    Draft,
    FindingRef,
    Generator,
    RecommendContext,
    optional_text,
)
from diagnosis.core.rules.builtin.low_mfu import REPORTED


def _pct(value: Any) -> str:
    return "n/a" if value is None else f"{100 * float(value):.0f}%"


def _owner(evidence: Mapping[str, Any]) -> str:
    job = evidence.get("job")
    tenant = optional_text(evidence.get("tenant"))
    return f"the owner of job {job}" + (f" (tenant {tenant})" if tenant else "")


def _topology(evidence: Mapping[str, Any]) -> str:
    kinds = ", ".join(evidence.get("kinds") or [evidence.get("kind")])
    better = evidence.get("better_placement") or ""
    cliques = evidence.get("nvlink_cliques") or []
    if cliques:  # multi-node NVLink (GB200/GB300 NVL72): the clique is the domain
        inside = (
            "keep each tensor-parallel group inside one NVLink clique (its nodes share one "
            f"NVLink domain; this job's GPUs are in {', '.join(cliques)}): schedule the job's "
            "pods onto one clique (Kubernetes: node affinity on `nvidia.com/gpu.clique` or one "
            "ComputeDomain; Slurm: a block of `topology.yaml`)"
        )
    else:
        inside = "keep each tensor-parallel group inside one node"
    return (
        f"For {_owner(evidence)}: its placement costs bandwidth ({kinds}). {better} "
        f"Ask for GPUs in whole NVLink domains (gpus_per_pod = the domain size) and {inside}. "
        "For the admin: turn on topology-aware placement "
        "(Volcano `network-topology-aware` / `numa-aware` plugins; Kubernetes Topology Manager "
        "`single-numa-node`; Slurm `--gres-flags=enforce-binding` and `--switches`)."
    )


def _data_starvation(evidence: Mapping[str, Any]) -> str:
    text = (
        f"For {_owner(evidence)}: its GPUs average {_pct(evidence.get('util_mean'))} "
        "utilisation because they wait for input. Raise the data-loader workers "
        "(`DataLoader(num_workers=..., pin_memory=True, prefetch_factor=..., "
        "persistent_workers=True)`), pre-shard or cache the dataset on local NVMe, and move "
        "decoding and augmentation to the GPU (e.g. NVIDIA DALI)."
    )
    if evidence.get("trigger") in ("host-cpu", "both"):
        text += (
            f" Its host CPU peaks at {_pct(evidence.get('host_cpu_max'))}: for the admin, give "
            "the job more CPU cores per GPU (CPU requests, or a node type with more cores)."
        )
    return text


def _low_mfu(evidence: Mapping[str, Any]) -> str:
    reported = evidence.get("method") == REPORTED
    method = "reported TFLOP/s" if reported else "tensor-core activity, a proxy"
    return (
        f"For {_owner(evidence)}: MFU {_pct(evidence.get('mfu'))} (from {method}) on "
        f"{evidence.get('gpu_model') or 'its GPUs'} while they are "
        f"{_pct(evidence.get('util_mean'))} busy: the kernels run, but slowly. Check BF16/FP8 "
        "mixed precision on tensor cores, fused attention (FlashAttention), a larger "
        "micro-batch, communication overlapped with compute, and tensor parallelism kept "
        "inside NVLink. Profile one step (PyTorch profiler, Nsight Systems) before and after."
    )


def _idle(evidence: Mapping[str, Any]) -> str:
    hours = float(evidence.get("runtime_s") or 0) / 3600
    text = (
        f"For {_owner(evidence)}: its {evidence.get('gpus')} GPU(s) have averaged "
        f"{_pct(evidence.get('util_mean'))} utilisation over {hours:.1f} h. End the job or "
        "scale it to zero if it is not needed, so the GPUs return to the queue. For the admin: "
        "an idle-reclaim policy (notebook culling, Kueue / Volcano preemption of idle "
        "workloads) returns such GPUs without asking."
    )
    if evidence.get("unhealthy_gpus") or evidence.get("nodes_not_ready"):
        text += " Some of its GPUs are unhealthy or on nodes not ready: check the hardware first."
    return text


JOB_ADVICE: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "topology-misplacement": _topology,
    "data-starvation": _data_starvation,
    "low-mfu": _low_mfu,
    "idle-allocation": _idle,
}


def _impact(rule: str, evidence: Mapping[str, Any]) -> dict[str, Any]:
    """Nothing simulated; the GPUs, pods and pool involved (the list groups one-pod advice of a
    rule per pool)."""
    return {
        "method": "none",
        "verdict": NOT_SIMULATED,
        "headline": "advisory: nothing for gpuobs to apply; the effect depends on what is done",
        "gpus_involved": int(evidence.get("gpus") or 0),
        "pods": int(evidence.get("pods") or 0) or None,
        "pool": optional_text(evidence.get("pool")),
        "rule": rule,
    }


def generate(context: RecommendContext) -> list[Draft]:
    drafts = []
    for rule, advise in JOB_ADVICE.items():
        for finding in context.findings(rule):
            drafts.append(
                Draft(
                    kind=ADVISORY,
                    target=finding.subject,
                    change={},
                    findings=(FindingRef.of(finding),),
                    summary=finding.summary,
                    advisory=advise(finding.evidence),
                    static_impact=_impact(rule, finding.evidence),
                    basis={"rule": rule},
                )
            )
    return drafts


GENERATOR = Generator(
    id="advisory",
    kind=ADVISORY,
    title="Advice for owners and admins",
    rules=(
        "topology-misplacement",
        "data-starvation",
        "low-mfu",
        "idle-allocation",
    ),
    doc=(
        "Text for the job's owner or the admin on findings gpuobs cannot fix by a setting: "
        "topology-aware "
        "placement for `topology-misplacement`, data-loader workers and host CPU for "
        "`data-starvation`, precision and kernels for `low-mfu`, releasing or reclaiming idle "
        "GPUs for `idle-allocation`."
    ),
    generate=generate,
)
