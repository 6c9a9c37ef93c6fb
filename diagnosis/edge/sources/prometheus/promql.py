"""PromQL text built safely: one escaping function for every label value, label names from an
allowlist, and the expression shapes the Prometheus source sends (docs/integrations.md).

Nothing here talks to a server. Every label value that enters a query goes through
:func:`quote` (directly, or through :func:`regex_alternatives` for ``=~`` matchers, which
escapes the regular expression first and then quotes it); label names are checked against
:data:`ALLOWED_LABELS` (plus names an admin declared in the cluster's metrics settings, which must
still be valid Prometheus label names); metric names are constants of this code base, checked
against the Prometheus grammar all the same.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")

# Labels of dcgm-exporter series (docs/integrations.md, ../shared/data/README.md), of node-exporter,
# the labels Prometheus itself attaches, and the usual names of the external labels that tell
# clusters, regions and replicas apart in Thanos, Mimir and VictoriaMetrics set-ups.
ALLOWED_LABELS: frozenset[str] = frozenset(
    {
        # dcgm-exporter
        "gpu",
        "UUID",
        "uuid",
        "pci_bus_id",
        "device",
        "modelName",
        "Hostname",
        "hostname",
        "GPU_I_PROFILE",
        "GPU_I_ID",
        "DCGM_FI_DRIVER_VERSION",
        "err_code",
        "err_msg",
        "xid",
        "pod",
        "namespace",
        "container",
        "pod_uid",
        "vgpu",
        "exported_pod",
        "exported_namespace",
        "exported_container",
        "hpc_job",
        "dra_claim_name",
        "dra_claim_namespace",
        "dra_pool_name",
        "dra_device_name",
        "dra_mig_profile",
        "dra_mig_device_uuid",
        "kubernetes_node",
        "DCGM_FI_DEV_FABRIC_CLUSTER_UUID",
        # the topology textfile metric (deploy/topology/)
        "nvlink_domain",
        "numa",
        # node-exporter
        "nodename",
        "mode",
        "cpu",
        # Prometheus and its federations
        "job",
        "instance",
        "cluster",
        "cluster_name",
        "kubernetes_cluster",
        "environment",
        "env",
        "region",
        "zone",
        "datacenter",
        "dc",
        "site",
        "tenant",
        "prometheus",
        "prometheus_replica",
        "replica",
        "node",
        # labels this code adds to tell statistics apart in one response
        "stat",
        "src",
    }
)


class PromQLError(ValueError):
    """A label name or metric name that may not enter a query."""


def quote(value: str) -> str:
    """``value`` as a PromQL double-quoted string literal: the one escaping function for label
    values. Backslash and double quote are escaped, control characters become ``\\uXXXX``."""
    if not isinstance(value, str):
        raise PromQLError(f"label values are strings, got {type(value).__name__}")
    out = ['"']
    for char in value:
        if char == "\\":
            out.append("\\\\")
        elif char == '"':
            out.append('\\"')
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def regex_literal(value: str) -> str:
    """``value`` as an RE2 pattern that matches exactly that text."""
    return "".join(f"\\{c}" if c in _RE2_SPECIAL else c for c in value)


def regex_alternatives(values: Iterable[str]) -> str:
    """A quoted ``=~`` pattern matching any of ``values`` exactly (Prometheus anchors it)."""
    parts = sorted({regex_literal(v) for v in values})
    if not parts:
        raise PromQLError("a regular-expression matcher needs at least one value")
    return quote("|".join(parts))


def check_label_name(name: str, extra: Iterable[str] = ()) -> str:
    """``name`` if it is an allowed label name, else :class:`PromQLError`."""
    if not isinstance(name, str) or not LABEL_NAME.fullmatch(name):
        raise PromQLError(f"{name!r} is not a Prometheus label name")
    if name not in ALLOWED_LABELS and name not in set(extra):
        raise PromQLError(
            f"label {name!r} is not on the allowlist; declare it in the metrics settings' "
            "'extra_label_names' to use it"
        )
    return name


def check_metric_name(name: str) -> str:
    if not METRIC_NAME.fullmatch(name):
        raise PromQLError(f"{name!r} is not a Prometheus metric name")
    return name


@dataclass(frozen=True)
class Matcher:
    """One label matcher; ``op`` is ``=``, ``!=``, ``=~`` or ``!~``. For the regex operators,
    ``values`` lists literal values to match exactly (never a user-written pattern)."""

    name: str
    op: str
    values: tuple[str, ...]

    @classmethod
    def equal(cls, name: str, value: str) -> Matcher:
        return cls(name, "=", (value,))

    @classmethod
    def any_of(cls, name: str, values: Iterable[str]) -> Matcher:
        return cls(name, "=~", tuple(values))

    def render(self, extra_names: Iterable[str] = ()) -> str:
        name = check_label_name(self.name, extra_names)
        if self.op in ("=", "!="):
            if len(self.values) != 1:
                raise PromQLError(f"{self.op} takes one value, got {len(self.values)}")
            return f"{name}{self.op}{quote(self.values[0])}"
        if self.op in ("=~", "!~"):
            return f"{name}{self.op}{regex_alternatives(self.values)}"
        raise PromQLError(f"unknown matcher operator {self.op!r}")


def matchers_from_mapping(values: Mapping[str, str]) -> tuple[Matcher, ...]:
    """``{"cluster": "x"}`` as equality matchers, sorted by name."""
    return tuple(Matcher.equal(k, v) for k, v in sorted(values.items()))


@dataclass(frozen=True)
class Selection:
    """Which series a query reads: fixed matchers (the cluster's ``cluster="x"``), and
    alternatives of further matchers joined with ``or`` (a shard's hosts under either spelling of
    the host label). Rendering checks every label name."""

    matchers: tuple[Matcher, ...] = ()
    alternatives: tuple[tuple[Matcher, ...], ...] = ((),)
    extra_label_names: frozenset[str] = frozenset()

    def selectors(self, metric: str, more: Sequence[Matcher] = ()) -> list[str]:
        """One selector text per alternative, e.g. ``DCGM_FI_DEV_GPU_UTIL{cluster="x"}``."""
        metric = check_metric_name(metric)
        out = []
        for alternative in self.alternatives:
            parts = [
                m.render(self.extra_label_names) for m in (*self.matchers, *more, *alternative)
            ]
            out.append(f"{metric}{{{','.join(parts)}}}" if parts else metric)
        return out

    def over(self, template: str, metric: str, more: Sequence[Matcher] = ()) -> str:
        """``template`` (with ``{s}`` for the selector) applied to each alternative, joined with
        ``or`` (the alternatives select disjoint series)."""
        parts = [template.format(s=selector) for selector in self.selectors(metric, more)]
        return parts[0] if len(parts) == 1 else " or ".join(f"({p})" for p in parts)


def by(labels: Sequence[str]) -> str:
    """A ``by (...)`` clause over allowlisted label names."""
    return f"by ({', '.join(check_label_name(name) for name in labels)})"


def tagged(expression: str, **tags: str) -> str:
    """``expression`` with constant labels added (``label_replace`` with an empty source), so
    that several statistics can travel in one response and still be told apart."""
    for name, value in sorted(tags.items()):
        check_label_name(name)
        expression = (
            f"label_replace({expression}, {quote(name)}, {quote(value)}, {quote('')}, {quote('')})"
        )
    return expression


def union(expressions: Sequence[str]) -> str:
    """Several differently tagged expressions as one query (``or``)."""
    return " or ".join(f"({e})" for e in expressions)


def duration(seconds: float) -> str:
    """A PromQL range duration, in whole milliseconds when not whole seconds."""
    milliseconds = round(seconds * 1000)
    if milliseconds <= 0:
        raise PromQLError(f"a range must be positive, got {seconds!r} s")
    return f"{milliseconds // 1000}s" if milliseconds % 1000 == 0 else f"{milliseconds}ms"
