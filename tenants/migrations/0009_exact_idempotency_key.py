# Idempotency-Key values compare exactly on every database: on MySQL/MariaDB the column takes a
# binary collation (the server's default folds case, so "Key-a" replayed "key-A"'s answer);
# elsewhere nothing changes. Keys distinct before stay distinct, so the unique key holds.

import core.fields
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('tenants', '0008_exact_ids'),
    ]

    operations = [
        core.fields.AlterToExactField(
            model_name='idempotentrequest',
            name='key',
            field=core.fields.ExactCharField(max_length=200),
        ),
    ]
