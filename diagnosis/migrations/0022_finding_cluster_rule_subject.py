from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("diagnosis", "0021_rollup_hung_gpu_s"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="finding",
            name="finding_cluster_rule",
        ),
        migrations.AddIndex(
            model_name="finding",
            index=models.Index(
                fields=["cluster", "rule_id", "subject"], name="finding_cluster_rule_subject"
            ),
        ),
    ]
