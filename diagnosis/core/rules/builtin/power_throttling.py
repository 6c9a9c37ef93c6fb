"""``power-throttling``: a GPU whose clocks were held down by its power cap for a good share of
the window (docs/rules.md; the judgement is shared with thermal-throttling
in :mod:`diagnosis.core.rules.throttling`)."""

from __future__ import annotations

from diagnosis.core.rules.throttling import POWER, throttling_rule

RULE = throttling_rule(
    POWER,
    rule_id="power-throttling",
    title="GPU clocks held down by the power cap",
    min_frac_help=(
        "fires when throttle_power.frac (share of the window power-capped) is at least this"
    ),
    detects=(
        "A GPU whose `throttle_power.frac` — the share of the window its clocks were held "
        "down by power — is at least `min_frac`. The edge takes it from DCGM's "
        "clock-event reasons (the share of samples with `sw_power_cap` 0x4 or "
        "`hw_power_brake` 0x80 set in DCGM_FI_DEV_CLOCKS_EVENT_REASONS), or else from the "
        "growth of DCGM_FI_DEV_POWER_VIOLATION (µs) over the window. Warning when a job "
        "holds the GPU, info when it is free. A GPU with neither field is not judged "
        "(counted)."
    ),
    why=(
        "A GPU at its power cap lowers its clocks to stay under it: heavy kernels run "
        "slower than the hardware allows. A cap set below the model's TDP (the evidence's "
        "`power_limit_w`), a rack power budget or an external power brake (`hw_power_brake`: "
        "the PSU or BMC asked for it) costs throughput on every job placed there, and the "
        "slowest GPU sets the pace of a synchronous gang."
    ),
    fix=(
        "Compare `power_limit_w` with the model's TDP: `nvidia-smi -q -d POWER` shows the "
        "enforced and default limits; restore the default with `nvidia-smi -pl <watts>` "
        "(or the DCGM policy / GPU operator setting that lowered it). For `hw_power_brake`, "
        "check the node's power supplies and the BMC's power capping. If the cap is "
        "deliberate (a rack budget), expect the lower throughput and place gangs on "
        "uncapped nodes."
    ),
)
