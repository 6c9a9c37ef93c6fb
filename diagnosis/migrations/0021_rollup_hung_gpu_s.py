# The allocated-hung accounting bucket (issue 20, hung-collective): its GPU-seconds per rollup.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("diagnosis", "0020_impact_replays_rollup_cycle_nullable"),
    ]

    operations = [
        migrations.AddField(
            model_name="poolrollup",
            name="hung_gpu_s",
            field=models.FloatField(default=0, help_text="held by a hung collective"),
        ),
        migrations.AddField(
            model_name="tenantrollup",
            name="hung_gpu_s",
            field=models.FloatField(default=0, help_text="held by a hung collective"),
        ),
    ]
