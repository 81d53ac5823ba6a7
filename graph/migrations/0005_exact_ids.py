# Agent ids, and the keys built from them, compare exactly on every database: on MySQL/MariaDB
# their columns take a binary collation (the server's default folds case and accents);
# elsewhere nothing changes.

import core.fields
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('graph', '0004_team_identity'),
    ]

    operations = [
        core.fields.AlterToExactField(
            model_name='entity',
            name='agent_id',
            field=core.fields.AgentIdField(blank=True, default='', max_length=64),
        ),
    ]
