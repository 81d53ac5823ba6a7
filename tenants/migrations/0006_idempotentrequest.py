# The idempotency records move from lifecycle to tenants so that every app's writes (memories,
# not only ingest) can honour an Idempotency-Key. The table is kept and renamed: no row is lost.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tenants', '0005_mcp_token'),
        ('lifecycle', '0013_recall_timeout'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='IdempotentRequest',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('endpoint', models.CharField(max_length=40)),
                        ('key', models.CharField(max_length=200)),
                        ('request_hash', models.CharField(max_length=64)),
                        ('status_code', models.PositiveSmallIntegerField()),
                        ('body', models.JSONField()),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('team', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tenants.team')),
                    ],
                    options={
                        'db_table': 'lifecycle_idempotentrequest',
                        'indexes': [models.Index(fields=['created_at'], name='idempotent_age')],
                        'constraints': [models.UniqueConstraint(fields=('team', 'endpoint', 'key'), name='idempotent_key')],
                    },
                ),
            ],
        ),
        # The table takes the app's name (tenants_idempotentrequest), rows and indexes kept.
        migrations.AlterModelTable(name='idempotentrequest', table=None),
    ]
