"""Jobs the simulator runs: their shape, their queue, and the metric profile of their GPUs."""

from __future__ import annotations

from dataclasses import dataclass

from diagnosis.core.fairness import SIZE_CLASSES as SIZE_CLASSES  # re-exported
from diagnosis.core.fairness import size_class as fairness_size_class

# Metric profiles (what a job's GPUs look like while it runs; see metrics.py for the numbers).
HEALTHY = "healthy"
DATA_STARVED = "data-starved"
IDLE = "idle"
LOW_MFU = "low-mfu"
INFERENCE = "inference"
# Hidden waste (issue 20): a gang stuck in a collective, a job idle before loading anything,
# GPUs held down by heat, GPUs held at their power cap.
HUNG = "hung"
WAITING = "waiting"
HOT = "hot"
POWER_CAPPED = "power-capped"
PROFILES = (HEALTHY, DATA_STARVED, IDLE, LOW_MFU, INFERENCE, HUNG, WAITING, HOT, POWER_CAPPED)

JOB_KINDS = ("training", "inference", "tuning", "notebook", "batch")

# Gang admission: bind every pod at once or none ("all-or-nothing", a gang scheduler), or bind
# pods one by one as GPUs free up and hold them until the gang is complete ("partial", what a
# scheduler without gang support does).
ALL_OR_NOTHING = "all-or-nothing"
PARTIAL = "partial"
ADMISSIONS = (ALL_OR_NOTHING, PARTIAL)


def size_class(gpus: int) -> str:
    """The size class of a request of ``gpus`` GPUs (docs/fairness.md); a request of no GPU
    counts in the smallest."""
    return fairness_size_class(max(gpus, 1)) or SIZE_CLASSES[0]


@dataclass(frozen=True)
class JobSpec:
    """A job to submit. Times are simulated seconds since the cluster's start.

    ``duration_s`` is the work: running time when never interrupted. ``queue`` defaults to the
    tenant; ``pool`` to the cluster's first pool. ``gang`` defaults to ``pods > 1`` and
    ``min_member`` to ``pods``. ``admission`` overrides the policy's gang admission for this job
    (e.g. a job submitted without a PodGroup binds pods one by one). ``profile`` defaults to
    ``inference`` for inference jobs and ``healthy`` otherwise. ``reports_tflops``: whether the
    job reports achieved TFLOP/s (defaults to training jobs).
    """

    id: str
    arrival_s: float
    duration_s: float
    pods: int = 1
    gpus_per_pod: int = 1
    tenant: str = "default"
    queue: str | None = None
    pool: str | None = None
    priority: int = 0
    kind: str = "training"
    gang: bool | None = None
    min_member: int | None = None
    tp: int | None = None
    profile: str | None = None
    name: str | None = None
    admission: str | None = None
    reports_tflops: bool | None = None
    submitted_s: float | None = None

    def __post_init__(self) -> None:
        if self.pods < 1:
            raise ValueError(f"job {self.id}: pods must be >= 1")
        if self.gpus_per_pod < 1:
            raise ValueError(f"job {self.id}: gpus_per_pod must be >= 1 (whole GPUs)")
        if self.duration_s <= 0:
            raise ValueError(f"job {self.id}: duration_s must be positive")
        if self.min_member is not None and not 1 <= self.min_member <= self.pods:
            raise ValueError(f"job {self.id}: min_member must lie in 1..pods")
        if self.profile is not None and self.profile not in PROFILES:
            raise ValueError(f"job {self.id}: unknown profile {self.profile!r}")
        if self.admission is not None and self.admission not in ADMISSIONS:
            raise ValueError(f"job {self.id}: unknown admission {self.admission!r}")

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod

    @property
    def queue_name(self) -> str:
        return self.queue or self.tenant

    @property
    def is_gang(self) -> bool:
        return self.pods > 1 if self.gang is None else self.gang

    @property
    def members_needed(self) -> int:
        return self.min_member if self.min_member is not None else self.pods

    @property
    def metric_profile(self) -> str:
        if self.profile is not None:
            return self.profile
        return INFERENCE if self.kind == "inference" else HEALTHY

    @property
    def submitted(self) -> float:
        """When the job entered the queue (``submitted_s``, else its arrival)."""
        return self.arrival_s if self.submitted_s is None else self.submitted_s

    @property
    def reports_achieved_tflops(self) -> bool:
        return self.kind == "training" if self.reports_tflops is None else self.reports_tflops
