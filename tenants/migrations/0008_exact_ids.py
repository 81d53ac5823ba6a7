# Agent ids, and the keys built from them, compare exactly on every database: on MySQL/MariaDB
# their columns take a binary collation (the server's default folds case and accents);
# elsewhere nothing changes.

import core.fields
import django.core.validators
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('tenants', '0007_apikey_earlier_secrets'),
    ]

    operations = [
        core.fields.AlterToExactField(
            model_name='agent',
            name='agent_id',
            field=core.fields.AgentIdField(max_length=64, validators=[django.core.validators.RegexValidator('^[A-Za-z0-9_.:@-]{1,64}$', '1 to 64 characters: letters, digits, _ . : @ -.')]),
        ),
        core.fields.AlterToExactField(
            model_name='usageday',
            name='agent_id',
            field=core.fields.AgentIdField(blank=True, default='', max_length=64),
        ),
    ]
