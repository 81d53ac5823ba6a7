# IdempotentRequest now belongs to tenants (tenants.0006 takes over and renames its table):
# removed from lifecycle's state only, the table is not dropped.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('lifecycle', '0013_recall_timeout'),
        ('tenants', '0006_idempotentrequest'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='IdempotentRequest')],
        ),
    ]
