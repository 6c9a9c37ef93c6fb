# Issue #12: the cluster's full error for admins only (status_detail).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("diagnosis", "0010_finding_untagged_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="cluster",
            name="status_detail",
            field=models.TextField(
                blank=True,
                editable=False,
                help_text="The full error of the last failed cycle (host, port, remote answer): "
                "admins only.",
            ),
        ),
        migrations.AlterField(
            model_name="cluster",
            name="status_message",
            field=models.TextField(
                blank=True,
                help_text="What failed, for every reader: the integration and how, not where.",
            ),
        ),
    ]
