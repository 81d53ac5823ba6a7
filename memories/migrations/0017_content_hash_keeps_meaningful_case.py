"""Content hashes made again where case now counts: "the same content" no longer folds the case
of a word where it carries meaning (an identifier, a key, a password: "x7Qz" is not "x7QZ"), so
rows holding such a word get the hash a write of the same text computes now. Rows without one
keep their hash. The hash is written out here as this migration defines it, so that a later
change to the app's function does not change what this migration did."""

import hashlib
import re
import unicodedata

from django.db import migrations

_CASE_RUN = re.compile(r"[^\W_]+|[\W_]+")
_CHUNK = 1000


def _meaningful(word):
    if not any(c.isupper() or c.islower() for c in word):
        return False
    if any(c.isdigit() for c in word):
        return True
    return any(a.islower() and b.isupper() for a, b in zip(word, word[1:]))


def _fold(match):
    run = match.group(0)
    return run if _meaningful(run) else run.casefold()


def _hash(text):
    normal = " ".join(_CASE_RUN.sub(_fold, unicodedata.normalize("NFKC", text)).split())
    return hashlib.sha256(normal.encode("utf-8")).hexdigest()


def rehash(apps, schema_editor):
    Memory = apps.get_model("memories", "Memory")
    last = 0
    while True:
        rows = list(
            Memory.objects.filter(pk__gt=last)
            .order_by("pk")
            .values_list("pk", "content", "content_hash")[:_CHUNK]
        )
        if not rows:
            return
        last = rows[-1][0]
        for pk, content, old in rows:
            new = _hash(content)
            if new != old:
                Memory.objects.filter(pk=pk).update(content_hash=new)


class Migration(migrations.Migration):

    dependencies = [
        ("memories", "0016_cold_reason"),
    ]

    operations = [
        migrations.RunPython(rehash, migrations.RunPython.noop),
    ]
