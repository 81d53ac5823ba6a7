"""How a revision reads on the detail page: a word diff of the content, before/after of the rest.

Presentation only: revisions are written by memories.services; this turns one into rows a
template can show without logic.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from core.text import CJK, UNSPACED, combining_marks
from memories.models import MemoryRevision

# Words for alphabetic text, single characters (with their combining marks) where words have no
# spaces between them — Chinese, kana, Thai, Khmer… — and for Hangul syllables, and the
# whitespace and punctuation in between, so the diff can be joined back into the exact text. A
# word keeps its marks: "नमस्ते" is one word, not "नमस" + "्" + "त" + "े" with a vowel sign
# highlighted alone.
_MARKS = combining_marks(unspaced=True)
_BY_CHARACTER = rf"{CJK}{UNSPACED}\uac00-\ud7af"
_TOKEN = re.compile(
    rf"[{_BY_CHARACTER}][{_MARKS}]*|[^\W{_BY_CHARACTER}](?:[^\W{_BY_CHARACTER}]|[{_MARKS}])*"
    r"|\s+|[^\w\s]"
)


@dataclass
class Segment:
    op: str  # equal | delete | insert
    text: str


@dataclass
class FieldChange:
    name: str
    before: str
    after: str
    segments: list[Segment] = field(default_factory=list)  # content only


def content_diff(before: str, after: str) -> list[Segment]:
    a, b = _TOKEN.findall(before), _TOKEN.findall(after)
    out: list[Segment] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(Segment("equal", "".join(a[i1:i2])))
            continue
        if i2 > i1:
            out.append(Segment("delete", "".join(a[i1:i2])))
        if j2 > j1:
            out.append(Segment("insert", "".join(b[j1:j2])))
    return out


def _show(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value)


def revision_changes(revision: MemoryRevision) -> list[FieldChange]:
    before, after = revision.before or {}, revision.after or {}
    changes = []
    for name in sorted(set(before) | set(after), key=lambda n: (n != "content", n)):
        change = FieldChange(name, _show(before.get(name)), _show(after.get(name)))
        if name == "content" and isinstance(before.get(name), str):
            change.segments = content_diff(before[name], str(after.get(name, "")))
        changes.append(change)
    return changes
