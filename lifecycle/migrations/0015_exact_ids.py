# Agent ids, and the keys built from them, compare exactly on every database: on MySQL/MariaDB
# their columns take a binary collation (the server's default folds case and accents);
# elsewhere nothing changes.

import core.fields
from django.db import migrations

# Where an agent's records live (its Agent row aside).
_HOLDERS = [
    ("memories", "Memory"),
    ("memories", "MemoryShare"),
    ("memories", "WorkingMemoryItem"),
    ("memories", "Procedure"),
    ("memories", "ProfileField"),
    ("graph", "Entity"),
    ("lifecycle", "Scenario"),
    ("lifecycle", "Persona"),
    ("lifecycle", "WorkingArchive"),
]


def register_agents_of_other_case(apps, schema_editor):
    """Under the folding collation, a write as "Bob" found the Agent "bob" and kept the id it
    was given: "Bob"'s records had no Agent row of their own. Now that "Bob" is another agent,
    register it, so it is listed and its deletion removes its records. Only ids that differ
    from a registered agent's by case: an agent deleted on purpose is not brought back."""
    if schema_editor.connection.vendor != "mysql":
        return
    Agent = apps.get_model("tenants", "Agent")
    known = set(Agent.objects.values_list("team_id", "agent_id"))
    folded = {(team, agent.lower()) for team, agent in known}
    missing: set[tuple[str, str]] = set()
    for app_label, model_name in _HOLDERS:
        rows = apps.get_model(app_label, model_name).objects.exclude(agent_id="")
        if model_name == "Memory":
            rows = rows.filter(scope="personal")  # a team memory's agent_id is only its author
        for team, agent in rows.values_list("team_id", "agent_id").distinct():
            if (team, agent) not in known and (team, agent.lower()) in folded:
                missing.add((team, agent))
    Agent.objects.bulk_create(
        [Agent(team_id=team, agent_id=agent, name=agent) for team, agent in sorted(missing)],
        batch_size=500,
    )


class Migration(migrations.Migration):

    dependencies = [
        ('lifecycle', '0014_idempotentrequest_to_tenants'),
        ('memories', '0018_exact_ids'),
        ('graph', '0005_exact_ids'),
        ('tenants', '0008_exact_ids'),
    ]

    operations = [
        core.fields.AlterToExactField(
            model_name='jobrun',
            name='active_key',
            field=core.fields.ExactCharField(blank=True, max_length=200, null=True, unique=True),
        ),
        core.fields.AlterToExactField(
            model_name='jobrun',
            name='agent_id',
            field=core.fields.AgentIdField(blank=True, default='', max_length=64),
        ),
        core.fields.AlterToExactField(
            model_name='jobrun',
            name='claim_key',
            field=core.fields.ExactCharField(blank=True, max_length=200, null=True, unique=True),
        ),
        core.fields.AlterToExactField(
            model_name='persona',
            name='agent_id',
            field=core.fields.AgentIdField(max_length=64),
        ),
        core.fields.AlterToExactField(
            model_name='scenario',
            name='agent_id',
            field=core.fields.AgentIdField(max_length=64),
        ),
        core.fields.AlterToExactField(
            model_name='workingarchive',
            name='agent_id',
            field=core.fields.AgentIdField(max_length=64),
        ),
        migrations.RunPython(register_agents_of_other_case, migrations.RunPython.noop),
    ]
