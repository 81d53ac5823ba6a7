"""Ingest jobs that no longer run let go of the messages they were given (as finishing one now
does, lifecycle.services.jobs.params_released): the messages are in the archive, under its
retention; the job keeps how many."""

from django.db import migrations

BATCH = 500


def release_messages(apps, schema_editor):
    JobRun = apps.get_model("lifecycle", "JobRun")
    done = JobRun.objects.filter(kind="ingest").exclude(status__in=["queued", "running"])
    last = 0
    while True:
        # By id, a batch at a time: a large job log is neither read nor locked all at once.
        batch = list(done.filter(pk__gt=last).order_by("pk").only("id", "params")[:BATCH])
        if not batch:
            return
        last = batch[-1].pk
        changed = []
        for job in batch:
            given = (job.params or {}).get("messages")
            if isinstance(given, list):
                job.params = {**job.params, "messages": len(given)}
                changed.append(job)
        JobRun.objects.bulk_update(changed, ["params"])


class Migration(migrations.Migration):
    dependencies = [("lifecycle", "0017_exact_item_ids")]

    operations = [migrations.RunPython(release_messages, migrations.RunPython.noop)]
