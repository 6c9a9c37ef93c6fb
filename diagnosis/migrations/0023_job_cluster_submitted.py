from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("diagnosis", "0022_finding_cluster_rule_subject"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                fields=["cluster", "-submitted_at", "-id"], name="job_cluster_submitted"
            ),
        ),
    ]
