"""PostgreSQL: keep a finding's row narrow, so the cycle's per-cycle timestamp statement
(``last_seen``/``last_hit_at``) rewrites a couple of hundred bytes per open finding, in place,
instead of a copy of its evidence (issue #17). ``toast_tuple_target = 128`` stores a row's
summary and evidence compressed out of line as soon as the row passes 128 bytes (an UPDATE that
leaves them alone copies only their pointers); ``fillfactor = 50`` leaves each page room for a
new version of every row on it, so those updates stay on the page (heap-only tuples) and the
table does not grow from cycle to cycle."""

from django.db import migrations


def narrow(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "ALTER TABLE diagnosis_finding SET (fillfactor = 50, toast_tuple_target = 128)"
        )


def wide(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE diagnosis_finding RESET (toast_tuple_target)")
        schema_editor.execute("ALTER TABLE diagnosis_finding SET (fillfactor = 70)")


class Migration(migrations.Migration):
    dependencies = [
        ("diagnosis", "0023_job_cluster_submitted"),
    ]

    operations = [migrations.RunPython(narrow, wide)]
