from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("diagnosis", "0027_job_priority_bigint")]

    operations = [
        migrations.AddIndex(
            model_name="job",
            index=models.Index(fields=["cluster", "name"], name="job_cluster_name"),
        ),
    ]
