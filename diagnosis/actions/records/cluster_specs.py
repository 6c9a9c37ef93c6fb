"""Clusters declared as code (docs/operations.md, "Clusters as code"): ``manage.py clusters
apply -f FILE|DIR``, ``clusters export`` and the admins' ``/api/v1/clusters/apply`` and
``/export``.

A document (YAML or JSON, one or several per file) is::

    kind: gpuobs.clusters/v1
    clusters:
      - name: a100-east
        scheduler: {kind: slurm, config: {slurm_conf: /etc/slurm/slurm.conf}}
        metrics:
          kind: prometheus
          config: {url: "http://prometheus:9090", bearer_token_env: GPUOBS_SECRET_PROM_TOKEN}
        enabled: true        # default true
        dry_run: true        # default true: approved changes are never written
        auto_rollback: false # default false
        gpu_hour_prices: {A100-SXM4-80GB: "2.10", "*": "1.00"}  # default {}: the setting's

It is parsed at the boundary into :class:`ClusterSpec` rows, every problem named by its place
(``clusters.yaml: clusters[0].metrics.config.url: required``). Each config is validated by the
adapter's or the source's own declaration (``ConfigSpec.parse``, as the admin form and each
cycle do), so a secret key holds a reference (a ``GPUOBS_SECRET_*`` variable's name, a file under
the secrets directory), never the secret. Applying is declarative and idempotent: each named
cluster is made to match its spec (created, updated, or ``unchanged``); clusters the files do not
name are left alone. Each change is audited (``cluster-created`` / ``cluster-updated``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from django.db import transaction

from diagnosis.core.cost import PriceError, parse_price_table
from diagnosis.edge.errors import ConfigError, IntegrationError
from diagnosis.models import AuditEntry, Cluster
from diagnosis.models.inventory import INTEGRATIONS

KIND = "gpuobs.clusters/v1"
SUFFIXES = (".yaml", ".yml", ".json")
SLUG_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
FIELDS = (
    "scheduler_kind",
    "scheduler_config",
    "metrics_kind",
    "metrics_config",
    "enabled",
    "dry_run",
    "auto_rollback",
    "gpu_hour_prices",
)
FLAGS = {"enabled": True, "dry_run": True, "auto_rollback": False}


class ClusterSpecError(ValueError):
    """A document that is not a valid cluster declaration; ``problems`` names each place."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    scheduler_kind: str
    scheduler_config: dict[str, Any]
    metrics_kind: str
    metrics_config: dict[str, Any]
    enabled: bool = True
    dry_run: bool = True
    auto_rollback: bool = False
    gpu_hour_prices: dict[str, str] = field(default_factory=dict)  # GPU model -> price text

    def document(self) -> dict[str, Any]:
        """This cluster as a ``clusters:`` entry (what :func:`parse_documents` reads back)."""
        return {
            "name": self.name,
            "scheduler": {"kind": self.scheduler_kind, "config": self.scheduler_config},
            "metrics": {"kind": self.metrics_kind, "config": self.metrics_config},
            "enabled": self.enabled,
            "dry_run": self.dry_run,
            "auto_rollback": self.auto_rollback,
            "gpu_hour_prices": dict(self.gpu_hour_prices),
        }


@dataclass(frozen=True)
class ClusterChange:
    """What applying one spec does: ``created``, ``updated`` (with each field's before and
    after) or ``unchanged``."""

    name: str
    outcome: str
    fields: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        head = f"cluster {self.name}: {self.outcome}"
        return [head, *(f"  {k}: {b!r} -> {a!r}" for k, (b, a) in self.fields.items())]

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "outcome": self.outcome,
            "fields": {k: {"before": b, "after": a} for k, (b, a) in self.fields.items()},
        }


# -- reading -------------------------------------------------------------------------------------


def _entry(raw: Any, where: str, problems: list[str]) -> ClusterSpec | None:
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: expected an object")
        return None
    known = {"name", "scheduler", "metrics", "gpu_hour_prices", *FLAGS}
    problems.extend(f"{where}.{key}: unknown field" for key in sorted(set(raw) - known, key=str))
    name = raw.get("name")
    if not isinstance(name, str) or not name or len(name) > 63 or set(name) - SLUG_CHARS:
        problems.append(f"{where}.name: a cluster name (letters, digits, - and _, at most 63)")
    values: dict[str, Any] = {}
    for side, (kind_field, config_field, spec_of) in zip(
        ("scheduler", "metrics"), INTEGRATIONS, strict=True
    ):
        block = raw.get(side)
        if not isinstance(block, Mapping) or not isinstance(block.get("kind"), str):
            problems.append(f"{where}.{side}: expected {{kind: ..., config: {{...}}}}")
            continue
        problems.extend(
            f"{where}.{side}.{key}: unknown field"
            for key in sorted(set(block) - {"kind", "config"}, key=str)
        )
        kind, config = block["kind"], block.get("config") or {}
        try:
            spec_of(kind).config_spec().parse(config)
        except ConfigError as exc:
            problems.extend(f"{where}.{side}.config.{p}" for p in exc.problems)
        except IntegrationError as exc:
            problems.append(f"{where}.{side}.kind: {exc}")
        else:
            values[kind_field], values[config_field] = kind, dict(config)
    for flag, default in FLAGS.items():
        value = raw.get(flag, default)
        if not isinstance(value, bool):
            problems.append(f"{where}.{flag}: expected true or false")
        values[flag] = value
    try:
        prices = parse_price_table(raw.get("gpu_hour_prices"), where=f"{where}.gpu_hour_prices")
    except PriceError as exc:
        problems.extend(exc.problems)
    else:
        values["gpu_hour_prices"] = {model: str(price) for model, price in prices.items()}
    if len(values) != len(FIELDS) or not isinstance(name, str):
        return None
    return ClusterSpec(name=name, **values)


def parse_documents(documents: Iterable[tuple[str, Any]]) -> list[ClusterSpec]:
    """The clusters of ``(source, document)`` pairs, or :class:`ClusterSpecError` naming every
    problem of every document (a name declared twice included)."""
    problems: list[str] = []
    specs: list[ClusterSpec] = []
    seen: dict[str, str] = {}
    for source, document in documents:
        if document is None:  # an empty YAML document
            continue
        if not isinstance(document, Mapping) or document.get("kind") != KIND:
            problems.append(f"{source}: expected a document of kind: {KIND}")
            continue
        extra = sorted(set(document) - {"kind", "clusters"}, key=str)
        problems.extend(f"{source}: {key}: unknown field" for key in extra)
        clusters = document.get("clusters")
        if not isinstance(clusters, list):
            problems.append(f"{source}: clusters: expected a list")
            continue
        for index, raw in enumerate(clusters):
            before = len(problems)
            spec = _entry(raw, f"{source}: clusters[{index}]", problems)
            if spec is None or len(problems) > before:
                continue
            if spec.name in seen:
                problems.append(f"{source}: cluster {spec.name!r} is declared in {seen[spec.name]}")
                continue
            seen[spec.name] = source
            specs.append(spec)
    if problems:
        raise ClusterSpecError(problems)
    return specs


def read_path(path: Path) -> list[tuple[str, Any]]:
    """The documents of a file, or of every ``.yaml``/``.yml``/``.json`` file of a folder (by
    name; a mounted ConfigMap's ``..data`` links skipped), as ``(file name, document)``."""
    if path.is_dir():
        files = sorted(
            p for p in path.iterdir() if p.suffix in SUFFIXES and not p.name.startswith(".")
        )
    else:
        files = [path]
    documents: list[tuple[str, Any]] = []
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
            documents.extend((file.name, doc) for doc in yaml.safe_load_all(text))
        except OSError as exc:
            raise ClusterSpecError([f"{file}: {exc.strerror}"]) from None
        except yaml.YAMLError as exc:
            raise ClusterSpecError([f"{file.name}: not YAML or JSON: {exc}"]) from None
    return documents


# -- applying and exporting ----------------------------------------------------------------------


def spec_of_row(cluster: Cluster) -> ClusterSpec:
    return ClusterSpec(name=cluster.name, **{f: getattr(cluster, f) for f in FIELDS})


def _change(spec: ClusterSpec, row: Cluster | None) -> ClusterChange:
    wanted = asdict(spec)
    if row is None:
        return ClusterChange(spec.name, "created", {f: (None, wanted[f]) for f in FIELDS})
    fields = {f: (getattr(row, f), wanted[f]) for f in FIELDS if getattr(row, f) != wanted[f]}
    return ClusterChange(spec.name, "updated" if fields else "unchanged", fields)


def plan(specs: list[ClusterSpec]) -> list[ClusterChange]:
    """What applying ``specs`` would do, writing nothing."""
    rows = Cluster.objects.in_bulk([s.name for s in specs], field_name="name")
    return [_change(spec, rows.get(spec.name)) for spec in specs]


@transaction.atomic
def apply_cluster_specs(specs: list[ClusterSpec], *, actor: str) -> list[ClusterChange]:
    """Make each named cluster match its spec, in one transaction; each change audited."""
    rows = Cluster.objects.select_for_update().in_bulk([s.name for s in specs], field_name="name")
    changes = []
    for spec in specs:
        row = rows.get(spec.name)
        change = _change(spec, row)
        changes.append(change)
        if change.outcome == "unchanged":
            continue
        row = row or Cluster(name=spec.name)
        for name, (_before, after) in change.fields.items():
            setattr(row, name, after)
        row.save()
        AuditEntry.objects.create(
            actor=actor,
            action=f"cluster-{change.outcome}",
            target=f"cluster:{spec.name}",
            before={k: b for k, (b, _a) in change.fields.items()}
            if change.outcome == "updated"
            else None,
            after={k: a for k, (_b, a) in change.fields.items()},
            cluster=row,
        )
    return changes


def export_document(clusters: Iterable[Cluster] | None = None) -> dict[str, Any]:
    """Every cluster (or those given) as one ``gpuobs.clusters/v1`` document."""
    rows = Cluster.objects.order_by("name") if clusters is None else clusters
    return {"kind": KIND, "clusters": [spec_of_row(row).document() for row in rows]}
