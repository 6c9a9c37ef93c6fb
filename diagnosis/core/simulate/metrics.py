"""The DCGM-like metrics of simulated GPUs.

A GPU's sample at a time depends on what holds it then (nothing, a job with a metric profile, or
nothing reporting at all) and on noise. The noise is a counter-based hash of (seed, GPU, whole
second, stream), so a sample is the same whichever way it is asked for: a snapshot's window
statistics are statistics of the very samples ``metric_series`` returns on the same grid, and a
run never depends on the order of calls.

Profiles (means over time):

=============  =====  ========  ==========  ==============================================
profile        util   tensor    fb used     shape
=============  =====  ========  ==========  ==============================================
healthy        0.92   ~0.45     0.60-0.90   steady; multi-GPU jobs move NVLink traffic
data-starved   ~0.3   ~0.13     0.45-0.70   bursts: 30% of samples ~0.9, the rest ~0.02
idle           0.01   0         0.30-0.60   memory held, nothing computed
low-mfu        0.80   ~0.10     0.60-0.80   busy but the tensor cores barely work
inference      daily  ~0.3×u    0.50-0.80   0.10..0.70 over the day, peak at 15:00 UTC
hung           0.97   ~0        0.70-0.90   a collective spins: ~24% of board power, no DRAM
waiting        0.01   0         0.01-0.03   idle with nothing loaded (stuck before starting)
hot            0.92   ~0.45     0.60-0.90   healthy work at ~88 C, thermally throttled ~45%
power-capped   0.92   ~0.45     0.60-0.90   healthy work at the power cap, capped ~55%
=============  =====  ========  ==========  ==============================================

Besides the DCGM-like means, every sample carries ``dram_active`` and two 0/1 throttle
indicators (``throttle_thermal``, ``throttle_power``: the clock-event reasons' thermal and power
bits) whose window mean is the share of the window throttled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diagnosis.core.simulate.jobs import (
    DATA_STARVED,
    HEALTHY,
    HOT,
    HUNG,
    IDLE,
    INFERENCE,
    LOW_MFU,
    POWER_CAPPED,
    PROFILES,
    WAITING,
)

SAMPLE_S = 15  # the scrape interval of the simulated exporter
METRICS = (
    "util",
    "tensor_active",
    "fb_used_frac",
    "power_w",
    "temp_c",
    "pcie_rx_Bps",
    "nvlink_Bps",
    "dram_active",
    "throttle_thermal",
    "throttle_power",
)
# Statistics that are the share of the window an indicator was set (its mean), as "frac".
SHARE_METRICS = frozenset({"throttle_thermal", "throttle_power"})

PROFILE_CODE = {name: code for code, name in enumerate(PROFILES)}
FREE = -1  # no job holds the GPU (or a partial gang holds it, not yet running)
DARK = -2  # the GPU reports nothing (fallen off the bus, node down)

# Nominal mean utilisation per profile, for time-integrated activity (inference: daily mean).
NOMINAL_UTIL = {
    HEALTHY: 0.92,
    DATA_STARVED: 0.28,
    IDLE: 0.01,
    LOW_MFU: 0.80,
    INFERENCE: 0.40,
    HUNG: 0.97,
    WAITING: 0.01,
    HOT: 0.92,
    POWER_CAPPED: 0.92,
}
NOMINAL_TENSOR = {
    HEALTHY: 0.45,
    DATA_STARVED: 0.13,
    IDLE: 0.0,
    LOW_MFU: 0.10,
    INFERENCE: 0.12,
    HUNG: 0.0,
    WAITING: 0.0,
    HOT: 0.45,
    POWER_CAPPED: 0.45,
}
# Achieved TFLOP/s reported by a training job, as a share of the model's peak: MFU (a hung
# job reports nothing new: its last report is stale, so it reports none).
REPORTED_MFU = {
    HEALTHY: 0.42,
    DATA_STARVED: 0.12,
    IDLE: 0.0,
    LOW_MFU: 0.09,
    INFERENCE: 0.15,
    HUNG: 0.0,
    WAITING: 0.0,
    HOT: 0.36,
    POWER_CAPPED: 0.38,
}

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def hash_uniform(seed: int, stream: int, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) noise for every (row, column) pair, a pure function of its arguments."""
    base = _splitmix64(np.array([seed & 0xFFFFFFFF, stream], dtype=np.uint64)).sum(dtype=np.uint64)
    r = _splitmix64(rows.astype(np.uint64)[:, None] ^ base)
    x = _splitmix64(r ^ (columns.astype(np.uint64)[None, :] * np.uint64(0xD1B54A32D192ED03)))
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def job_constant(seed: int, stream: int, jobs: np.ndarray) -> np.ndarray:
    """A per-job uniform draw (e.g. how much memory it holds)."""
    return hash_uniform(seed, stream, jobs, np.zeros(1, dtype=np.int64))[:, 0]


@dataclass(frozen=True)
class GpuFleet:
    """Per-GPU constants the samples need: global ids (noise keys) and power envelopes."""

    ids: np.ndarray
    idle_w: np.ndarray
    board_w: np.ndarray


@dataclass(frozen=True)
class JobTable:
    """Per-job lookup arrays (indexed by job number): memory level and multi-GPU flag."""

    fb_level: np.ndarray
    multi_gpu: np.ndarray


def sample(
    seed: int,
    fleet: GpuFleet,
    times: np.ndarray,
    holder: np.ndarray,
    profile: np.ndarray,
    jobs: JobTable,
    day_offset_s: float,
) -> dict[str, np.ndarray]:
    """Samples of every metric, ``(GPUs, times)`` float64 arrays, NaN where the GPU is dark.

    ``times`` are simulated seconds; ``holder`` the job number holding each GPU at each time
    (any value where nobody runs); ``profile`` the holder's profile code, ``FREE`` or ``DARK``.
    ``day_offset_s`` is the time of day (seconds) of simulated second 0, for inference curves.
    """
    keys = np.floor(times).astype(np.int64)
    u1 = hash_uniform(seed, 1, fleet.ids, keys)
    u2 = hash_uniform(seed, 2, fleet.ids, keys)
    u3 = hash_uniform(seed, 3, fleet.ids, keys)
    code = profile
    running = code >= 0
    safe_holder = np.where(running, holder, 0)
    fb_level = jobs.fb_level[safe_holder] if len(jobs.fb_level) else np.zeros(code.shape)
    multi = jobs.multi_gpu[safe_holder] if len(jobs.multi_gpu) else np.zeros(code.shape, bool)

    healthy = code == PROFILE_CODE[HEALTHY]
    starved = code == PROFILE_CODE[DATA_STARVED]
    idle = code == PROFILE_CODE[IDLE]
    low_mfu = code == PROFILE_CODE[LOW_MFU]
    inference = code == PROFILE_CODE[INFERENCE]
    hung = code == PROFILE_CODE[HUNG]
    waiting = code == PROFILE_CODE[WAITING]
    hot = code == PROFILE_CODE[HOT]
    capped = code == PROFILE_CODE[POWER_CAPPED]
    working = healthy | hot | capped

    day_phase = 2 * np.pi * ((times + day_offset_s) / 86400.0 - 15.0 / 24.0)
    daily = 0.40 + 0.30 * np.cos(day_phase)[None, :]
    burst = u1 < 0.3
    util = np.select(
        [working, starved, idle | waiting, low_mfu, inference, hung],
        [
            0.86 + 0.12 * u1,
            np.where(burst, 0.84 + 0.12 * u2, 0.005 + 0.03 * u2),
            0.02 * u1,
            0.74 + 0.12 * u1,
            np.clip(daily + 0.12 * (u1 - 0.5), 0.0, 1.0),
            0.95 + 0.04 * u1,
        ],
        0.0,
    )
    tensor = np.select(
        [working, starved, low_mfu, inference, hung],
        [
            0.49 * util + 0.04 * (u2 - 0.5),
            0.45 * util,
            0.08 + 0.04 * u2,
            0.30 * util,
            0.004 * u2,
        ],
        0.0,
    )
    fb = np.select(
        [working, starved, idle, low_mfu, inference, hung, waiting],
        [
            0.60 + 0.30 * fb_level,
            0.45 + 0.25 * fb_level,
            0.30 + 0.30 * fb_level,
            0.60 + 0.20 * fb_level,
            0.50 + 0.30 * fb_level,
            0.70 + 0.20 * fb_level,
            0.01 + 0.02 * fb_level,
        ],
        0.0,
    )
    dram = np.select(
        [working, starved, low_mfu, inference, hung],
        [0.35 * util, 0.20 * util, 0.25 + 0.04 * u2, 0.25 * util, 0.006 * u2],
        0.0,
    )
    fb = np.where(running, np.clip(fb + 0.01 * (u3 - 0.5), 0.0, 1.0), 0.0)
    idle_w = fleet.idle_w[:, None]
    span_w = (fleet.board_w - fleet.idle_w)[:, None]
    power = idle_w + span_w * (0.55 * util + 0.35 * tensor) + 8.0 * (u3 - 0.5) * running
    # A spinning collective draws little more than idle; a capped GPU sits at its board power.
    power = np.where(hung, idle_w + span_w * (0.10 + 0.04 * u3), power)
    power = np.where(capped, fleet.board_w[:, None] * (0.97 + 0.03 * u3), power)
    temp = 31.0 + 40.0 * util + 8.0 * tensor + 2.0 * u3
    temp = np.where(hot, 86.0 + 4.0 * u3, temp)
    throttle_thermal = (hot & (u2 < 0.45)).astype(np.float64)
    throttle_power = (capped & (u1 < 0.55)).astype(np.float64)
    pcie = np.where(
        running,
        np.where(starved, 0.3e9 + 5.0e9 * util, 0.2e9 + 1.5e9 * util) * (0.8 + 0.4 * u2),
        2.0e5 * u2,
    )
    nvlink = np.where(running & multi, 3.2e10 * util * (0.85 + 0.3 * u3), 0.0)

    tensor = np.clip(tensor, 0.0, 1.0)
    util = np.clip(util, 0.0, 1.0)
    out = {
        "util": util,
        "tensor_active": tensor,
        "fb_used_frac": fb,
        "power_w": power,
        "temp_c": temp,
        "pcie_rx_Bps": pcie,
        "nvlink_Bps": nvlink,
        "dram_active": np.clip(dram, 0.0, 1.0),
        "throttle_thermal": throttle_thermal,
        "throttle_power": throttle_power,
    }
    dark = code == DARK
    if dark.any():
        for values in out.values():
            values[dark] = np.nan
    return out


def window_statistics(samples: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Per GPU: the statistics a snapshot reports (util mean/p10/p90, temp max, other means)
    over the non-dark samples; NaN for a GPU dark for the whole window."""
    util = samples["util"]
    seen = ~np.isnan(util)
    full = seen.all(axis=1)
    some = seen.any(axis=1)
    stats: dict[str, dict[str, np.ndarray]] = {}
    for metric, values in samples.items():
        if metric == "temp_c":
            stats[metric] = {"max": _row_reduce(values, full, some, "max")}
        elif metric in SHARE_METRICS:
            stats[metric] = {"frac": _row_reduce(values, full, some, "mean")}
        elif metric == "util":
            stats[metric] = {
                "mean": _row_reduce(values, full, some, "mean"),
                "p10": _row_reduce(values, full, some, "p10"),
                "p90": _row_reduce(values, full, some, "p90"),
            }
        else:
            stats[metric] = {"mean": _row_reduce(values, full, some, "mean")}
    return stats


def _row_reduce(values: np.ndarray, full: np.ndarray, some: np.ndarray, how: str) -> np.ndarray:
    out = np.full(values.shape[0], np.nan)
    reducers = {
        "mean": lambda v: v.mean(axis=-1),
        "max": lambda v: v.max(axis=-1),
        "p10": lambda v: np.quantile(v, 0.10, axis=-1),
        "p90": lambda v: np.quantile(v, 0.90, axis=-1),
    }
    reduce = reducers[how]
    if full.any():
        out[full] = reduce(values[full])
    for row in np.flatnonzero(some & ~full):
        kept = values[row][~np.isnan(values[row])]
        out[row] = reduce(kept)
    return out


@dataclass(frozen=True)
class MetricSeries:
    """Per-GPU time series, columnar: ``values[metric]`` is a ``(GPUs, times)`` float32 array
    (NaN where a GPU did not report); row i is GPU ``indexes[i]`` of node ``nodes[i]``;
    ``timestamps`` are Unix seconds."""

    timestamps: np.ndarray
    nodes: np.ndarray
    indexes: np.ndarray
    values: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.timestamps)
