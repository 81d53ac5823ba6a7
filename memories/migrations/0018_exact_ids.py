# Agent ids, and the keys built from them, compare exactly on every database: on MySQL/MariaDB
# their columns take a binary collation (the server's default folds case and accents);
# elsewhere nothing changes.

import core.fields
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('memories', '0017_content_hash_keeps_meaningful_case'),
    ]

    operations = [
        core.fields.AlterToExactField(
            model_name='indexchange',
            name='scope_key',
            field=core.fields.ExactCharField(max_length=160),
        ),
        core.fields.AlterToExactField(
            model_name='memory',
            name='agent_id',
            field=core.fields.AgentIdField(blank=True, default='', max_length=64),
        ),
        core.fields.AlterToExactField(
            model_name='memoryshare',
            name='agent_id',
            field=core.fields.AgentIdField(max_length=64),
        ),
        core.fields.AlterToExactField(
            model_name='procedure',
            name='agent_id',
            field=core.fields.AgentIdField(max_length=64),
        ),
        core.fields.AlterToExactField(
            model_name='profilefield',
            name='agent_id',
            field=core.fields.AgentIdField(max_length=64),
        ),
        core.fields.AlterToExactField(
            model_name='profilerevision',
            name='agent_id',
            field=core.fields.AgentIdField(max_length=64),
        ),
        core.fields.AlterToExactField(
            model_name='scopelock',
            name='scope_key',
            field=core.fields.ExactCharField(max_length=160, unique=True),
        ),
        core.fields.AlterToExactField(
            model_name='trashedmemory',
            name='agent_id',
            field=core.fields.AgentIdField(blank=True, default='', max_length=64),
        ),
        core.fields.AlterToExactField(
            model_name='workingmemoryitem',
            name='agent_id',
            field=core.fields.AgentIdField(max_length=64),
        ),
    ]
