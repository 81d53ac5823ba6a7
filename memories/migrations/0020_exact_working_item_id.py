# Working-memory item ids compare exactly on every database, as they do in Redis: on
# MySQL/MariaDB the embedded backend's column takes a binary collation; elsewhere nothing
# changes.

import core.fields
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('memories', '0019_exact_run_and_category'),
    ]

    operations = [
        core.fields.AlterToExactField(
            model_name='workingmemoryitem',
            name='item_id',
            field=core.fields.ExactCharField(max_length=32, unique=True),
        ),
    ]
