"""Findings follow their rule's clock instead of having last_seen/last_hit_at moved each cycle
(issue #35). Existing rows keep their timestamps as written and follow no clock until the next
cycle that evaluates them."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("diagnosis", "0035_inbound_cluster_batches"),
    ]

    operations = [
        migrations.CreateModel(
            name="RuleClock",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("rule_id", models.CharField(max_length=64)),
                ("evaluated_at", models.DateTimeField()),
                (
                    "cluster",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="rule_clocks",
                        to="diagnosis.cluster",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("cluster", "rule_id"), name="rule_clock_unique")
                ],
            },
        ),
        migrations.RenameField(
            model_name="finding", old_name="last_seen", new_name="written_last_seen"
        ),
        migrations.RenameField(
            model_name="finding", old_name="last_hit_at", new_name="written_last_hit_at"
        ),
        migrations.AlterField(
            model_name="finding",
            name="written_last_seen",
            field=models.DateTimeField(
                help_text="Latest snapshot time at which it was evaluated, as last written (read "
                "last_seen: the rule's clock while it follows it)."
            ),
        ),
        migrations.AlterField(
            model_name="finding",
            name="written_last_hit_at",
            field=models.DateTimeField(
                blank=True,
                null=True,
                help_text="Latest snapshot time at which the rule reported it, as last written "
                "(read last_hit_at).",
            ),
        ),
        migrations.AddField(
            model_name="finding",
            name="clock",
            field=models.ForeignKey(
                blank=True,
                help_text="Its rule's clock in its cluster, once a cycle wrote it.",
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="diagnosis.ruleclock",
            ),
        ),
        migrations.AddField(
            model_name="finding",
            name="seen_on_clock",
            field=models.BooleanField(
                default=False,
                help_text="Evaluated in every cycle since written: last_seen is the clock's.",
            ),
        ),
        migrations.AddField(
            model_name="finding",
            name="hit_on_clock",
            field=models.BooleanField(
                default=False,
                help_text="Hit in every cycle since written: last_hit_at is the clock's.",
            ),
        ),
    ]
