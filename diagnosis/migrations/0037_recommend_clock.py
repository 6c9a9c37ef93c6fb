"""Recommendations proposed again unchanged follow their cluster's recommend clock instead of
having last_proposed_as_of moved each cycle (issue #35). Existing rows keep the value as
written and follow no clock until the next recommend step proposes them."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("diagnosis", "0036_rule_clocks"),
    ]

    operations = [
        migrations.AddField(
            model_name="cluster",
            name="recommend_clock_at",
            field=models.DateTimeField(
                blank=True,
                editable=False,
                null=True,
                help_text="Snapshot time of the latest recommend step: a recommendation proposed "
                "in every step since it was written reads it as its last_proposed_as_of "
                "(issue #35).",
            ),
        ),
        migrations.RenameField(
            model_name="recommendation",
            old_name="last_proposed_as_of",
            new_name="written_last_proposed_as_of",
        ),
        migrations.AlterField(
            model_name="recommendation",
            name="written_last_proposed_as_of",
            field=models.DateTimeField(
                blank=True,
                null=True,
                help_text="Snapshot time of the latest cycle that proposed it, as last written "
                "(read last_proposed_as_of: the cluster's recommend clock while it follows it).",
            ),
        ),
        migrations.AddField(
            model_name="recommendation",
            name="proposed_on_clock",
            field=models.BooleanField(
                default=False,
                help_text="Proposed unchanged by every recommend step since written: "
                "last_proposed_as_of is the cluster's recommend_clock_at.",
            ),
        ),
        migrations.AddIndex(
            model_name="recommendation",
            index=models.Index(
                condition=models.Q(proposed_on_clock=True),
                fields=["cluster"],
                name="recommendation_on_clock",
            ),
        ),
    ]
