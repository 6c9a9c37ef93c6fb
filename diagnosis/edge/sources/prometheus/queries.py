"""The PromQL of one collection: one server-side aggregated instant query per metric family
(:func:`family_queries`), their fallbacks, the Xid detail range query and the per-pod query of
shared GPUs (:func:`process_query`). The text is built with
:mod:`diagnosis.edge.sources.prometheus.promql` (every label value quoted, label names from the
allowlist); nothing here talks to a server.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

from diagnosis.edge.sources.dcgm import fields as dcgm
from diagnosis.edge.sources.prometheus.promql import (
    Matcher,
    Selection,
    by,
    duration,
    tagged,
    union,
)

K = dcgm.KEY_LABELS  # a GPU or one of its MIG instances
U = dcgm.UUID_LABELS  # a physical GPU
# dcgm-exporter from 4.5.3 with ``--kubernetes-virtual-gpus`` (its PR #594) writes
# ``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_DEV_FB_USED`` of a GPU that pods hold twice: the device's
# own series (no pod labels) and one series per pod with its processes' part, always labelled
# ``pod_uid``. The device's series is the GPU's reading; where there is none (earlier exporters
# copy the device's value to each pod's series), the copies' mean is (docs/integrations.md,
# "Shared GPUs").
DEVICE_LEVEL = (Matcher.equal("pod_uid", ""),)
PER_PROCESS_FIELDS = frozenset({dcgm.GPU_UTIL, dcgm.FB_USED})
# The time of a series' latest sample: the instant selector finds it within the lookback
# (5 min); when none is that recent, the subquery finds older ones in the window (it costs as
# much as all the other families together at 16,384 GPUs, so it is the fallback;
# ``timestamp(last_over_time(...))`` would give the evaluation time instead).
LAST_SAMPLE = "timestamp({s})"
LAST_SAMPLE_IN_WINDOW = "timestamp({s}) or max_over_time(timestamp({s})[{w}:])"


# The labels that split one GPU's series by who used it (pods, their containers, Slurm jobs, DRA
# claims): a recording rule sums them away, as the family queries' ``by (...)`` does. ``pod_uid``
# stays: :data:`DEVICE_LEVEL` selects on it.
POD_SPLIT_LABELS = (*dcgm.WORKLOAD_LABELS, "dra_claim_name", "dra_claim_namespace")


@dataclass(frozen=True)
class Term:
    """A range function a family query applies to one metric's series (``{s}`` the selector,
    ``{w}`` the window), and the aggregation that then joins a GPU's series. A recording rule
    records ``agg without (POD_SPLIT_LABELS) (template)``; the family query's own aggregation over
    the recorded series gives the same numbers (a sum of sums is the sum, a maximum of maxima
    the maximum, a minimum of minima the minimum)."""

    op: str
    template: str
    agg: str

    def record_name(self, metric: str, window: str) -> str:
        """``gpuobs_gpu:<metric>:<agg>_<op><window>`` (Prometheus's level:metric:operations)."""
        return f"gpuobs_gpu:{metric}:{self.agg}_{self.op}{window}"


SUM = Term("sum_over_time", "sum_over_time({s}[{w}])", "sum")
COUNT = Term("count_over_time", "count_over_time({s}[{w}])", "sum")
MOST_SAMPLES = Term("count_over_time", "count_over_time({s}[{w}])", "max")
PEAK = Term("max_over_time", "max_over_time({s}[{w}])", "max")
P10 = Term("quantile0_1_over_time", "quantile_over_time(0.1, {s}[{w}])", "min")
P90 = Term("quantile0_9_over_time", "quantile_over_time(0.9, {s}[{w}])", "max")
INCREASE = Term("increase", "increase({s}[{w}])", "max")
GROWTH = Term("max_minus_min_over_time", "max_over_time({s}[{w}]) - min_over_time({s}[{w}])", "max")


def reasons_term(bits: Sequence[int]) -> Term:
    """The share of the window's minutes whose clock-event reasons have one of ``bits`` set
    (PromQL has no bitwise and: bit b of x is ``floor(x / b) % 2``)."""
    test = " + ".join(f"floor({{s}} / {bit}) % 2" for bit in bits)
    op = "_".join(f"bit{bit}" for bit in bits) + "_share_1m_over_time"
    return Term(op, f"avg_over_time(({test} > bool 0)[{{w}}:1m])", "max")


# How a family query reads a term of one metric: ``(term, metric, more matchers) -> text`` of
# the per-series values, before the term's aggregation.
Source = Callable[[Term, str, Sequence[Matcher]], str]


def raw_source(selection: Selection, window_s: float) -> Source:
    """The term computed from the exporter's series."""
    w = duration(window_s)
    return lambda term, metric, more: selection.over(term.template.replace("{w}", w), metric, more)


def recorded_source(selection: Selection, window_s: float) -> Source:
    """The term read from its recording rule's series (:mod:`.recording`)."""
    w = duration(window_s)
    return lambda term, metric, more: selection.over("{s}", term.record_name(metric, w), more)


def family_queries(
    selection: Selection,
    node_selection: Selection,
    window_s: float,
    *,
    fallback: bool = False,
    max_series_per_gpu: int = 32,
    recorded: Collection[str] = (),
) -> dict[str, str]:
    """The instant queries of one collection, one per metric family
    (docs/architecture.md#one-cycle).

    Aggregation happens in Prometheus: a GPU's series split by changing pod labels are summed
    back together (means as sum over count, so they stay exact), and each answer carries one
    value per GPU (or MIG instance) and statistic, told apart by the ``stat`` and ``src`` labels.

    With ``fallback``, the ``inventory``, ``util``, ``memory`` and ``nvlink`` queries that are
    sent again when the first answers leave GPUs out: latest samples older than the lookback,
    the fields of GPUs without profiling (``DCGM_FI_DEV_GPU_UTIL``,
    ``DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL``) beside the profiling ones, and the per-process fields
    of GPUs without a device-level series.

    The inventory keeps at most ``max_series_per_gpu`` + 1 series per GPU (the newest), and
    counts the series of a GPU that has more (``stat="series"``): a cardinality bomb costs a
    bounded answer and is reported, not listed.

    The families named in ``recorded`` read their range functions from the recording rules'
    series (:mod:`.recording`) instead of computing them: the same numbers, far less work for
    Prometheus at query time.
    """
    raw = build_queries(
        raw_source(selection, window_s),
        selection,
        node_selection,
        window_s,
        fallback=fallback,
        max_series_per_gpu=max_series_per_gpu,
    )
    if not recorded:
        return raw
    over_rules = build_queries(
        recorded_source(selection, window_s),
        selection,
        node_selection,
        window_s,
        fallback=fallback,
        max_series_per_gpu=max_series_per_gpu,
    )
    return {name: over_rules[name] if name in recorded else text for name, text in raw.items()}


def build_queries(
    source: Source,
    selection: Selection,
    node_selection: Selection,
    window_s: float,
    *,
    fallback: bool = False,
    max_series_per_gpu: int = 32,
) -> dict[str, str]:
    """:func:`family_queries` with every range function read through ``source``."""
    w = duration(window_s)
    last = LAST_SAMPLE_IN_WINDOW if fallback else LAST_SAMPLE

    def over(template: str, metric: str, more: Sequence[Matcher] = ()) -> str:
        return selection.over(template.replace("{w}", w), metric, more)

    def agg(term: Term, metric: str, group: Sequence[str], more: Sequence[Matcher] = ()) -> str:
        return f"{term.agg} {by(group)} ({source(term, metric, more)})"

    def either(first: str, second: str, group: Sequence[str]) -> str:
        return f"({first}) or on ({', '.join(group)}) ({second})"

    def device_level(metric: str, group: Sequence[str], build: Callable[..., str]) -> str:
        """``build(more)`` over the device's own series of a per-process field (see
        :data:`DEVICE_LEVEL`); in the fallback, ``or`` over all of them for GPUs that have none
        (copies an exporter labels with ``pod_uid``)."""
        if metric not in PER_PROCESS_FIELDS:
            return build(())
        if not fallback:
            return build(DEVICE_LEVEL)
        return f"({either(build(DEVICE_LEVEL), build(()), group)})"

    def mean(metric: str, group: Sequence[str]) -> str:
        return device_level(
            metric,
            group,
            lambda more: f"({agg(SUM, metric, group, more)} / {agg(COUNT, metric, group, more)})",
        )

    def util(metric: str, src: str) -> str:
        def quantile(term: Term) -> str:
            return device_level(metric, K, lambda more: agg(term, metric, K, more))

        return union(
            [
                tagged(mean(metric, K), stat="mean", src=src),
                tagged(quantile(P10), stat="p10", src=src),
                tagged(quantile(P90), stat="p90", src=src),
            ]
        )

    def reasons(bits: Sequence[int]) -> str:
        """Either name of the clock-event reasons field."""
        names = (dcgm.CLOCKS_EVENT_REASONS, dcgm.CLOCK_THROTTLE_REASONS)
        return " or ".join(f"({agg(reasons_term(bits), name, U)})" for name in names)

    def violation(metric: str) -> str:
        """The share of the window a violation counter (µs) counted as throttled."""
        return f"{agg(INCREASE, metric, U)} / {window_s * 1e6:g}"

    thermal = either(violation(dcgm.THERMAL_VIOLATION), reasons(dcgm.THERMAL_REASON_BITS), U)
    power = either(violation(dcgm.POWER_VIOLATION), reasons(dcgm.POWER_REASON_BITS), U)

    # Framebuffer per GPU or MIG instance (in MIG mode the exporter reports it per instance), as
    # window means: a shared GPU's free and reserved framebuffer are one copy per pod.
    used, free = mean(dcgm.FB_USED, K), mean(dcgm.FB_FREE, K)
    reserved = f"({mean(dcgm.FB_RESERVED, K)} or {free} * 0)"
    nvlink_rx = agg(SUM, dcgm.NVLINK_RX_BYTES, U)
    nvlink_bytes = f"({nvlink_rx} + ({agg(SUM, dcgm.NVLINK_TX_BYTES, U)} or {nvlink_rx} * 0))"
    nvlink = tagged(
        f"{nvlink_bytes} / {agg(COUNT, dcgm.NVLINK_RX_BYTES, U)}", stat="mean", src="prof"
    )
    # The latest sample's time of each series (one per pod of a shared GPU) with what says
    # where the GPU is and who uses it.
    latest = (
        f"max {by(dcgm.INVENTORY_LABELS)} ({over(last, dcgm.GR_ENGINE_ACTIVE)}"
        f" or {over(last, dcgm.GPU_UTIL)})"
    )
    return {
        "inventory": union(
            [
                tagged(f"topk {by(K)} ({max_series_per_gpu + 1}, {latest})", stat="last"),
                tagged(f"count {by(K)} ({latest}) > {max_series_per_gpu}", stat="series"),
                tagged(
                    f"max ({source(MOST_SAMPLES, dcgm.GR_ENGINE_ACTIVE, ())} or "
                    f"{source(MOST_SAMPLES, dcgm.GPU_UTIL, ())})",
                    stat="samples",
                ),
            ]
        ),
        "util": (
            either(util(dcgm.GR_ENGINE_ACTIVE, "prof"), util(dcgm.GPU_UTIL, "dev"), K)
            if fallback
            else util(dcgm.GR_ENGINE_ACTIVE, "prof")
        ),
        "tensor": union(
            [
                tagged(mean(dcgm.TENSOR_ACTIVE, K), stat="mean"),
                tagged(mean(dcgm.DRAM_ACTIVE, K), stat="mean", src="dram"),
            ]
        ),
        "memory": tagged(f"{used} / ({used} + {free} + {reserved})", stat="frac"),
        "power": tagged(mean(dcgm.POWER_USAGE, U), stat="mean"),
        "temperature": tagged(agg(PEAK, dcgm.GPU_TEMP, U), stat="max"),
        "pcie": union(
            [
                tagged(mean(dcgm.PCIE_RX_BYTES, U), stat="mean", src="rx"),
                tagged(mean(dcgm.PCIE_TX_BYTES, U), stat="mean", src="tx"),
            ]
        ),
        "nvlink": (
            either(
                nvlink, tagged(mean(dcgm.NVLINK_BANDWIDTH_TOTAL, U), stat="mean", src="total"), U
            )
            if fallback
            else nvlink
        ),
        "xid": union(
            [
                tagged(
                    f"{agg(PEAK, dcgm.XID_ERRORS, (*K, 'err_code'))} > 0", stat="max", src="gauge"
                ),
                tagged(
                    f"{agg(PEAK, dcgm.XID_ERRORS_COUNT, (*K, 'xid'))} > 0", stat="max", src="count"
                ),
            ]
        ),
        "hardware": union(
            [
                tagged(
                    agg(PEAK, dcgm.FABRIC_CLIQUE_ID, (*U, dcgm.FABRIC_CLUSTER_UUID)), src="fabric"
                ),
                tagged(
                    agg(PEAK, dcgm.TOPOLOGY_TEXTFILE, ("hostname", "gpu", "nvlink_domain", "numa")),
                    src="topology",
                ),
            ]
        ),
        # Hardware health per physical GPU (issue 20): power limit, SM clock and its maximum,
        # the share of the window throttled for thermal / power reasons (the violation counter
        # where exported, else the clock-event reasons), and the row remapper.
        "health": union(
            [
                tagged(agg(PEAK, dcgm.POWER_MGMT_LIMIT, U), stat="max", src="power_limit"),
                tagged(mean(dcgm.SM_CLOCK, U), stat="mean", src="sm_clock"),
                tagged(agg(PEAK, dcgm.MAX_SM_CLOCK, U), stat="max", src="max_sm_clock"),
                tagged(thermal, stat="frac", src="thermal"),
                tagged(power, stat="frac", src="power"),
                tagged(agg(PEAK, dcgm.ROW_REMAP_PENDING, U), stat="pending", src="remap"),
                tagged(agg(PEAK, dcgm.ROW_REMAP_FAILURE, U), stat="failure", src="remap"),
                tagged(
                    agg(GROWTH, dcgm.UNCORRECTABLE_REMAPPED_ROWS, U),
                    stat="uncorrectable",
                    src="remap",
                ),
            ]
        ),
        "cpu": (
            f"(1 - avg by (instance) ("
            f"{_node_over(selection, 'rate({s}[{w}])'.replace('{w}', w))})) "
            f"* on (instance) group_left (nodename) max by (instance, nodename) ("
            f"{node_selection.over('{s}', 'node_uname_info')})"
        ),
    }


def _node_over(selection: Selection, template: str) -> str:
    fixed = Selection(selection.matchers, ((),), selection.extra_label_names)
    return fixed.over(template, "node_cpu_seconds_total", (Matcher.equal("mode", "idle"),))


def _narrowed(selection: Selection, uuids: Sequence[str]) -> Selection:
    """``selection`` narrowed to the series of these GPUs (either UUID spelling)."""
    alternatives = tuple((Matcher.any_of(label, uuids),) for label in dcgm.UUID_LABELS)
    return replace(
        selection,
        alternatives=tuple(
            (*alt, *uuid_alt) for alt in selection.alternatives for uuid_alt in alternatives
        ),
    )


# What tells one pod's series of a shared GPU from another's.
POD_LABELS = tuple(name for name in dcgm.WORKLOAD_LABELS if name != "hpc_job")
PER_PROCESS = (Matcher("pod_uid", "!=", ("",)),)


def process_query(selection: Selection, uuids: Sequence[str], window_s: float) -> str:
    """Each pod's own part of the shared GPUs ``uuids``, where dcgm-exporter (from 4.5.3, with
    ``--kubernetes-virtual-gpus``) writes it: the window mean of its per-process
    ``DCGM_FI_DEV_GPU_UTIL`` series (``src="util"``, percent) and of its ``DCGM_FI_DEV_FB_USED``
    over the GPU's framebuffer (``src="fb"``, a fraction), by ``K`` and the pod labels; only on
    GPUs that also have the device-level series (``pod_uid=""``), so the copies an earlier
    exporter labels with ``pod_uid`` (``--kubernetes-enable-pod-uid``) are never taken for
    per-process readings."""
    narrowed = _narrowed(selection, uuids)
    w = duration(window_s)
    group = (*K, *POD_LABELS)

    def over(template: str, metric: str, more: Sequence[Matcher] = ()) -> str:
        return narrowed.over(template.replace("{w}", w), metric, more)

    def mean(metric: str, labels: Sequence[str], more: Sequence[Matcher] = ()) -> str:
        return (
            f"(sum {by(labels)} ({over('sum_over_time({s}[{w}])', metric, more)}) / "
            f"sum {by(labels)} ({over('count_over_time({s}[{w}])', metric, more)}))"
        )

    def own(metric: str) -> str:
        device = f"count {by(K)} ({over('count_over_time({s}[{w}])', metric, DEVICE_LEVEL)})"
        return f"{mean(metric, group, PER_PROCESS)} and on ({', '.join(K)}) {device}"

    used = mean(dcgm.FB_USED, K, DEVICE_LEVEL)
    free = mean(dcgm.FB_FREE, K)
    reserved = f"({mean(dcgm.FB_RESERVED, K)} or {free} * 0)"
    total = f"({used} + {free} + {reserved})"
    return union(
        [
            tagged(own(dcgm.GPU_UTIL), stat="mean", src="util"),
            tagged(
                f"({own(dcgm.FB_USED)}) / on ({', '.join(K)}) group_left () {total}",
                stat="mean",
                src="fb",
            ),
        ]
    )


def xid_range_query(selection: Selection, uuids: Sequence[str]) -> str:
    """The Xid gauge and the exporter's Xid counter of a few GPUs, for finding when each Xid
    appeared."""
    narrowed = _narrowed(selection, uuids)
    return union(
        [
            tagged(
                f"max {by((*K, 'err_code'))} ({narrowed.over('{s}', dcgm.XID_ERRORS)})", src="gauge"
            ),
            tagged(
                f"max {by((*K, 'xid'))} ({narrowed.over('{s}', dcgm.XID_ERRORS_COUNT)})",
                src="count",
            ),
        ]
    )
