import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from diagnosis.actions.enqueue import deferred_impacts
from diagnosis.actions.records.cycles import full_collections_first
from diagnosis.actions.records.snapshots import import_snapshot
from diagnosis.core import snapshot as snapshot_format
from diagnosis.edge.collection import collect_snapshot
from diagnosis.edge.errors import CollectError
from diagnosis.edge.schedulers.registry import ADAPTERS
from diagnosis.management.cli import Progress, cluster_named
from diagnosis.management.deferred_impacts import write_deferred_note
from diagnosis.management.snapshot_input import load_snapshot_argument
from diagnosis.models import Cluster, Snapshot


class Command(BaseCommand):
    help = "Validate, export or import gpuobs.snapshot/v1 documents."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        validate = sub.add_parser("validate", help="exit 0 if FILE is valid, 2 with the errors")
        validate.add_argument("file")
        export = sub.add_parser("export", help="write the latest snapshot of a cluster")
        export.add_argument("--cluster", required=True)
        export.add_argument("--out", help="file to write (default: stdout)")
        imported = sub.add_parser("import", help="store FILE as the latest snapshot of its cluster")
        imported.add_argument("file")
        imported.add_argument("--cluster", help="store under this cluster instead of the file's")
        imported.add_argument(
            "--diagnose",
            action="store_true",
            help="also run the stored cycle a scheduled cycle runs: cycle row, findings, tenancy "
            "and rollups, incidents, recommendations",
        )
        imported.add_argument(
            "--json", action="store_true", help="print one JSON object (no progress on stderr)"
        )
        read = sub.add_parser(
            "read",
            help="read a scheduler's state once into a snapshot (no database cluster, no metrics)",
        )
        read.add_argument("--scheduler", required=True, help=f"one of: {', '.join(ADAPTERS)}")
        read.add_argument(
            "--config",
            required=True,
            help="JSON file holding the adapter's scheduler_config (secrets by reference only)",
        )
        read.add_argument("--cluster", help="the snapshot's cluster name (default: the kind)")
        read.add_argument("--out", help="file to write (default: stdout)")

    def handle(self, *args, action: str, **options):
        if action == "validate":
            snap = self._load(options["file"])
            self.stdout.write(
                f"{options['file']}: valid {snapshot_format.FORMAT} of cluster {snap.cluster} "
                f"as of {snapshot_format.format_time(snap.as_of)}: {len(snap.nodes)} nodes, "
                f"{len(snap.gpus)} GPUs, {len(snap.jobs)} jobs, {len(snap.events)} events"
            )
        elif action == "export":
            self._export(options["cluster"], options.get("out"))
        elif action == "read":
            self._read(
                options["scheduler"], options["config"], options.get("cluster"), options.get("out")
            )
        else:
            self._import(options, Progress.of(self, options))

    def _load(self, path: str, *, storable: bool = False) -> snapshot_format.ClusterSnapshot:
        return load_snapshot_argument(self, path, storable=storable)

    def _export(self, cluster_name: str, out: str | None) -> None:

        cluster = cluster_named(cluster_name)
        stored = Snapshot.objects.filter(cluster=cluster).order_by("-as_of").first()
        if stored is None:
            raise CommandError(f"cluster {cluster_name!r} has no snapshot yet", returncode=2)
        text = json.dumps(stored.load_document(), indent=2)
        if out:
            Path(out).write_text(text + "\n")
            self.stdout.write(f"wrote {out} (snapshot as of {stored.as_of.isoformat()})")
        else:
            self.stdout.write(text)

    def _import(self, options: dict[str, Any], progress: Progress) -> None:
        path, cluster_name, diagnose = options["file"], options.get("cluster"), options["diagnose"]
        if cluster_name and not Cluster.objects.filter(name=cluster_name).exists():
            # --cluster names where the file goes; declaring a cluster is `clusters apply`'s
            raise CommandError(
                f"--cluster: no cluster named {cluster_name!r}; declare it first with "
                '`manage.py clusters apply -f FILE` (docs/operations.md, "Clusters as code")',
                returncode=2,
            )
        progress.step(f"reading {path}")
        with full_collections_first():  # decoding makes a million containers, as a cycle does
            snap = self._load(path, storable=True)
        progress.step(
            f"read {len(snap.nodes)} nodes, {len(snap.gpus)} GPUs, {len(snap.jobs)} jobs; "
            + ("diagnosing and recording the cycle" if diagnose else "storing")
        )
        try:
            result = import_snapshot(snap, cluster_name=cluster_name, diagnose=diagnose)
        except snapshot_format.SnapshotError as exc:
            raise CommandError(f"{path}: {exc}", returncode=2) from exc
        progress.step("done")
        if options["json"]:
            figures = result.as_json() | {"deferred_impacts": deferred_impacts()}
            self.stdout.write(json.dumps(figures))
            return
        self.stdout.write(result.describe())
        write_deferred_note(self.stdout)

    def _read(self, kind: str, config_path: str, cluster: str | None, out: str | None) -> None:
        """One read of a scheduler adapter as a ``gpuobs.snapshot/v1`` document: its nodes,
        queues, jobs, the GPUs it knows and its current events. Every failure (a bad config
        file, a refused setting, an unreachable API, a missing permission) exits 2 with the
        adapter's own message."""
        if kind not in ADAPTERS:
            known = ", ".join(ADAPTERS)
            raise CommandError(f"--scheduler: no adapter {kind!r} (known: {known})", returncode=2)
        config = _config_file(config_path)
        target = _OneShot(name=cluster or kind, scheduler_kind=kind, scheduler_config=config)
        try:
            document = collect_snapshot(target)
        except CollectError as exc:
            what = "permanent" if exc.permanent else "transient: retrying may help"
            raise CommandError(f"{kind}: {exc} ({what})", returncode=2) from exc
        document["collection"]["source"] = "snapshot read"
        try:
            snap = snapshot_format.load(document)
        except snapshot_format.SnapshotError as exc:
            for line in exc.errors:
                self.stderr.write(line)
            raise CommandError(
                f"{kind}: the adapter's state is not a valid snapshot ({len(exc.errors)} errors)",
                returncode=2,
            ) from exc
        for record in document["collection"].get("refused") or []:
            self.stderr.write(f"{kind}: left out: {record}")
        text = json.dumps(document, indent=2, sort_keys=False)
        if out:
            Path(out).write_text(text + "\n", encoding="utf-8")
            self.stdout.write(
                f"wrote {out}: {len(snap.nodes)} nodes, {len(snap.jobs)} jobs, "
                f"{len(snap.queues)} queues, {len(snap.events)} events from {kind}"
            )
        else:
            self.stdout.write(text)


@dataclass
class _OneShot:
    """A cluster as ``collect_snapshot`` needs one (metrics ``none``), with no database row."""

    name: str
    scheduler_kind: str
    scheduler_config: dict[str, Any] = field(default_factory=dict)
    event_cursor: str = ""
    metrics_kind: str = "none"
    metrics_config: dict[str, Any] = field(default_factory=dict)


def _config_file(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"--config: cannot read {path}: {exc.strerror}", returncode=2) from exc
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise CommandError(f"--config: {path} is not JSON: {exc}", returncode=2) from exc
    if not isinstance(config, dict):
        raise CommandError(
            f"--config: {path} must hold a JSON object (the scheduler_config)", returncode=2
        )
    return config
