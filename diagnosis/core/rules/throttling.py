"""What ``thermal-throttling`` and ``power-throttling`` share: one judgement over the GPUs' share
of the window spent with clocks held down for a reason (``throttle_thermal.frac`` /
``throttle_power.frac``), with the SM clock against its maximum as evidence. Not a rule: it has
no RULE; each rule module builds its RULE with :func:`throttling_rule` for its reason.

The edge derives the shares from DCGM (``docs/snapshot.md``, "Hidden-waste fields"): the
share of samples of ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS`` (formerly ``..._CLOCK_THROTTLE_REASONS``)
with the reason's bits set, or else the growth of the violation counter
(``DCGM_FI_DEV_THERMAL_VIOLATION`` / ``DCGM_FI_DEV_POWER_VIOLATION``, microseconds) over the
window's length.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from diagnosis.core.rules.base import (
    Finding,
    Judgement,
    Rule,
    RuleDoc,
    Threshold,
    evidence_number,
)
from diagnosis.core.rules.facts import SnapshotFacts
from diagnosis.core.rules.running_jobs import at_least
from diagnosis.core.snapshot import ClusterSnapshot
from diagnosis.core.text import Param, gettext_noop, message

# Clock event reason bits (NVIDIA/DCGM testing/python3/dcgm_fields.py,
# DCGM_CLOCKS_EVENT_REASON_*; the same values as NVML's nvmlClocksEventReason*).
CLOCKS_EVENT_REASON_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clocks": 0x100,
}
THERMAL_BITS = CLOCKS_EVENT_REASON_BITS["sw_thermal"] | CLOCKS_EVENT_REASON_BITS["hw_thermal"]
POWER_BITS = CLOCKS_EVENT_REASON_BITS["sw_power_cap"] | CLOCKS_EVENT_REASON_BITS["hw_power_brake"]

NO_READING = "no clock-event reasons or violation counter reported"


@dataclass(frozen=True)
class Reason:
    """One throttle reason: its snapshot column, its words and the bits it stands for."""

    column: str  # e.g. "throttle_thermal_frac"
    word: str  # "thermal", "power"
    bits: int

    @property
    def phrase(self) -> str:
        """The reason's word as a message to translate (its English is :attr:`word`)."""
        return {"thermal": gettext_noop("thermal"), "power": gettext_noop("power")}[self.word]

    @property
    def bit_names(self) -> list[str]:
        return [name for name, bit in CLOCKS_EVENT_REASON_BITS.items() if bit & self.bits]


THERMAL = Reason("throttle_thermal_frac", "thermal", THERMAL_BITS)
POWER = Reason("throttle_power_frac", "power", POWER_BITS)


def judge(
    rule: Rule,
    reason: Reason,
    snapshot: ClusterSnapshot,
    thresholds: Mapping[str, Any],
    facts: SnapshotFacts,
) -> Judgement:
    """The GPUs whose share of the window throttled for ``reason`` is at least ``min_frac``;
    GPUs without that share are not judged. Warning on a GPU a job holds, info on one no job
    holds (nothing is slowed yet)."""
    min_frac = thresholds["min_frac"]
    state = facts.gpu_state
    share = state[reason.column].to_numpy(dtype=float)
    not_judged = {NO_READING: int(np.isnan(share).sum())}
    hit = at_least(share, min_frac)
    if not hit.any():
        return Judgement((), not_judged)

    limits = facts.power_limit_per_gpu.to_numpy(dtype=float)[hit]
    rows = state[hit]
    findings: list[Finding] = []
    for node, index, frac, clock, max_clock, temp, power, limit, job in zip(
        rows["node"].tolist(),
        rows["index"].tolist(),
        rows[reason.column].tolist(),
        rows["sm_clock_mhz_mean"].tolist(),
        rows["max_sm_clock_mhz_max"].tolist(),
        rows["temp_c_max"].tolist(),
        rows["power_w_mean"].tolist(),
        limits.tolist(),
        rows["job"].tolist(),
        strict=True,
    ):
        holder = None if job is None or job != job else str(job)
        ratio = clock / max_clock if max_clock and max_clock > 0 else float("nan")
        gpu = f"{node}/{int(index)}"
        template = {
            (False, False): gettext_noop(
                "GPU %(gpu)s ran with clocks held down for %(reason)s reasons %(frac)s of the "
                "window."
            ),
            (True, False): gettext_noop(
                "GPU %(gpu)s ran with clocks held down for %(reason)s reasons %(frac)s of the "
                "window (SM clock %(clock)s of %(max_clock)s MHz)."
            ),
            (False, True): gettext_noop(
                "GPU %(gpu)s ran with clocks held down for %(reason)s reasons %(frac)s of the "
                "window, slowing job %(job)s."
            ),
            (True, True): gettext_noop(
                "GPU %(gpu)s ran with clocks held down for %(reason)s reasons %(frac)s of the "
                "window (SM clock %(clock)s of %(max_clock)s MHz), slowing job %(job)s."
            ),
        }[ratio == ratio, bool(holder)]
        params: dict[str, Param] = {
            "gpu": gpu,
            "reason": message(reason.phrase),
            "frac": f"{frac:.0%}",
        }
        if ratio == ratio:
            params.update(clock=f"{clock:.0f}", max_clock=f"{max_clock:.0f}")
        if holder:
            params["job"] = holder
        summary = message(template, **params)
        evidence = {
            "gpu": gpu,
            "node": node,
            "index": int(index),
            "reason": reason.word,
            "reason_bits": reason.bit_names,
            "frac_of_window": evidence_number(frac),
            "min_frac": min_frac,
            "sm_clock_mhz": evidence_number(clock),
            "max_sm_clock_mhz": evidence_number(max_clock),
            "sm_clock_ratio": evidence_number(ratio),
            "temp_c_max": evidence_number(temp),
            "power_w_mean": evidence_number(power),
            "power_limit_w": evidence_number(limit),
            "job": holder,
        }
        severity = "warning" if holder else "info"
        findings.append(rule.finding(f"gpu:{gpu}", summary, evidence, severity=severity))
    return Judgement(tuple(findings), not_judged)


EVIDENCE_DOC = (
    "`reason`, `reason_bits` (the DCGM clock-event reason bits the share counts), "
    "`frac_of_window`, `min_frac`, `sm_clock_mhz` and `max_sm_clock_mhz` "
    "(DCGM_FI_DEV_SM_CLOCK mean, DCGM_FI_DEV_MAX_SM_CLOCK) and their `sm_clock_ratio`, "
    "`temp_c_max`, `power_w_mean`, `power_limit_w`, the `job` holding the GPU (null when free); "
    "null where not reported."
)
REFERENCES = (
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS (field 112; DCGM_FI_DEV_CLOCK_THROTTLE_REASONS before "
    "DCGM 3.3) and the DCGM_CLOCKS_EVENT_REASON_* bits: NVIDIA/DCGM "
    "testing/python3/dcgm_fields.py",
    "DCGM_FI_DEV_POWER_VIOLATION, DCGM_FI_DEV_THERMAL_VIOLATION (fields 240, 241, µs), "
    "DCGM_FI_DEV_SM_CLOCK, DCGM_FI_DEV_MAX_SM_CLOCK: dcgm-exporter etc/default-counters.csv",
)


def throttling_rule(
    reason: Reason,
    *,
    rule_id: str,
    title: str,
    min_frac_help: str,
    detects: str,
    why: str,
    fix: str,
) -> Rule:
    """The rule for ``reason``: judged by :func:`judge` with one threshold, ``min_frac``
    (default 0.2, described by ``min_frac_help``), the shared evidence and references, and the
    rule's own words for what it detects, why it matters and how to fix it."""

    def evaluate(
        snapshot: ClusterSnapshot, thresholds: Mapping[str, Any], facts: SnapshotFacts
    ) -> Judgement:
        return judge(rule, reason, snapshot, thresholds, facts)

    rule = Rule(
        id=rule_id,
        title=title,
        severity="warning",
        subject_kind="gpu:",
        thresholds=(Threshold("min_frac", 0.2, min_frac_help, unit="fraction", maximum=1.0),),
        doc=RuleDoc(
            detects=detects, why=why, fix=fix, evidence=EVIDENCE_DOC, references=REFERENCES
        ),
        evaluate=evaluate,
        for_s=600,
        keep_firing_for_s=600,
        reads_gpu_metrics=True,
    )
    return rule
