"""Three indexes that duplicated others dropped (issue #35): the findings' and the jobs' own
cluster_id indexes (every (cluster, ...) index of theirs leads with it, the jobs' unique
(cluster, external_id) too) and the fingerprint's LIKE index that ``unique=True`` adds on
PostgreSQL (no fingerprint is matched by a pattern); the fingerprint stays unique, by a named
constraint. A first cycle at 131,072 GPUs writes ~103,000 findings and ~160,000 jobs: one index
less on each row."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("diagnosis", "0037_recommend_clock"),
    ]

    operations = [
        migrations.AlterField(
            model_name="finding",
            name="cluster",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="findings",
                to="diagnosis.cluster",
            ),
        ),
        migrations.AlterField(
            model_name="finding",
            name="fingerprint",
            field=models.CharField(
                editable=False, help_text="Derived from cluster, rule, subject.", max_length=64
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="cluster",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="jobs",
                to="diagnosis.cluster",
            ),
        ),
        migrations.AddConstraint(
            model_name="finding",
            constraint=models.UniqueConstraint(fields=("fingerprint",), name="finding_fingerprint"),
        ),
    ]
