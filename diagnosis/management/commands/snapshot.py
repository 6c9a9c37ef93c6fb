import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from diagnosis.actions.snapshots import import_snapshot
from diagnosis.core import snapshot as snapshot_format
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
            "--diagnose", action="store_true", help="also run the rules and record the findings"
        )

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
        else:
            self._import(options["file"], options.get("cluster"), options["diagnose"])

    def _load(self, path: str) -> snapshot_format.ClusterSnapshot:
        return load_snapshot_argument(self, path)

    def _export(self, cluster_name: str, out: str | None) -> None:

        cluster = Cluster.objects.filter(name=cluster_name).first()
        if cluster is None:
            raise CommandError(f"no cluster named {cluster_name!r}", returncode=2)
        stored = Snapshot.objects.filter(cluster=cluster).order_by("-as_of").first()
        if stored is None:
            raise CommandError(f"cluster {cluster_name!r} has no snapshot yet", returncode=2)
        text = json.dumps(stored.load_document(), indent=2)
        if out:
            Path(out).write_text(text + "\n")
            self.stdout.write(f"wrote {out} (snapshot as of {stored.as_of.isoformat()})")
        else:
            self.stdout.write(text)

    def _import(self, path: str, cluster_name: str | None, diagnose: bool) -> None:

        snap = self._load(path)
        result = import_snapshot(snap, cluster_name=cluster_name, diagnose=diagnose)
        self.stdout.write(result.describe())
