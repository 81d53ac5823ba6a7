# Run ids and categories compare exactly on every database: on MySQL/MariaDB their columns take
# a binary collation (the server's default folds case and accents, so a filter on run "Run-A"
# also returned run "run-a"); elsewhere nothing changes.

import core.fields
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('memories', '0018_exact_ids'),
    ]

    operations = [
        core.fields.AlterToExactField(
            model_name='memory',
            name='category',
            field=core.fields.ExactCharField(default='general', max_length=64),
        ),
        core.fields.AlterToExactField(
            model_name='memory',
            name='run_id',
            field=core.fields.ExactCharField(blank=True, default='', max_length=64),
        ),
        core.fields.AlterToExactField(
            model_name='workingmemoryitem',
            name='run_id',
            field=core.fields.ExactCharField(blank=True, default='', max_length=64),
        ),
    ]
