"""``thermal-throttling``: a GPU whose clocks were held down by temperature for a good share of
the window (docs/rules.md; the judgement is shared with power-throttling in
:mod:`diagnosis.core.rules.throttling`)."""

from __future__ import annotations

from diagnosis.core.rules.throttling import THERMAL, throttling_rule

RULE = throttling_rule(
    THERMAL,
    rule_id="thermal-throttling",
    title="GPU clocks held down by temperature",
    min_frac_help=(
        "fires when throttle_thermal.frac (share of the window thermally throttled) is at "
        "least this"
    ),
    detects=(
        "A GPU whose `throttle_thermal.frac` — the share of the window its clocks were "
        "held down for thermal reasons — is at least `min_frac`. The edge takes it from "
        "DCGM's clock-event reasons (the share of samples with `sw_thermal` 0x20 or "
        "`hw_thermal` 0x40 set in DCGM_FI_DEV_CLOCKS_EVENT_REASONS), or else from the "
        "growth of DCGM_FI_DEV_THERMAL_VIOLATION (µs) over the window. Warning when a job "
        "holds the GPU, info when it is free. A GPU with neither field is not judged "
        "(counted), never called cool."
    ),
    why=(
        "A thermally throttled GPU runs its SMs below their rated clock: the job on it "
        "computes slower, and in a synchronous job (data or tensor parallel) every other "
        "GPU waits for the slowest one, so one hot GPU slows the whole gang. The cause is "
        "in the machine room, not the job."
    ),
    fix=(
        "Check the node's cooling: fan and pump health and inlet air temperature "
        "(`nvidia-smi -q -d TEMPERATURE,PERFORMANCE`, the BMC's sensors), blocked or "
        "missing blanking panels, a failed fan, the rack's airflow. Compare with its "
        "neighbours; if one GPU keeps throttling where others do not, have it serviced. "
        "Drain the node meanwhile if its jobs are gangs."
    ),
)
