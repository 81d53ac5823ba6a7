# The archive's run ids compare exactly on every database, like the memories' (memories 0019):
# on MySQL/MariaDB the column takes a binary collation; elsewhere nothing changes.

import core.fields
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('lifecycle', '0015_exact_ids'),
    ]

    operations = [
        core.fields.AlterToExactField(
            model_name='workingarchive',
            name='run_id',
            field=core.fields.ExactCharField(blank=True, default='', max_length=64),
        ),
    ]
