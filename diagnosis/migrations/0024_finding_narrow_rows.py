"""PostgreSQL: room for the cycle's per-cycle timestamp statement (``last_seen``/``last_hit_at``,
no indexed column) to update every open finding in place (issue #17). ``fillfactor = 50`` leaves
each page room for a new version of every row on it, so those updates stay on their page
(heap-only tuples, pruned by the next cycle) instead of growing the table and its indexes;
``toast_tuple_target = 128``: a row that PostgreSQL toasts at all (over ~2 kB, a long evidence)
has its summary and evidence compressed out of line down to 128 bytes, so the timestamp update
copies only their pointers. Rows under ~2 kB stay as they are (PostgreSQL toasts none below)."""

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
