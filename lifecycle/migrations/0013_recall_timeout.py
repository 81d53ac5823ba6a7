from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("lifecycle", "0012_consolidate_setting"),
    ]

    operations = [
        migrations.AddField(
            model_name="pipelineconfig",
            name="recall_timeout_ms",
            field=models.PositiveIntegerField(default=5000),
        ),
    ]
