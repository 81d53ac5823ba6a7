# Working-memory item ids compare exactly on every database, as they do in Redis: on
# MySQL/MariaDB the archive's columns take a binary collation (the server's default folds case,
# so item "ABC" found archived item "abc" there and not on SQLite); elsewhere nothing changes.

import core.fields
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('lifecycle', '0016_exact_run_id'),
    ]

    operations = [
        core.fields.AlterToExactField(
            model_name='workingarchive',
            name='item_id',
            field=core.fields.ExactCharField(max_length=32),
        ),
        core.fields.AlterToExactField(
            model_name='workingarchive',
            name='restored_item_id',
            field=core.fields.ExactCharField(blank=True, default='', max_length=32),
        ),
    ]
