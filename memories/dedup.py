"""When two near-identical memories are *not* duplicates.

Embeddings put "cache hit rate rose from 75% to 92%" and "…from 92% to 75%" at cosine 0.96+,
"the user likes tea" next to "the user does not like tea", and "deploy notes for service alpha"
next to "…beta". A dedup that trusts similarity alone swallows the newer fact (the most reported
data-loss bug of peers, see reference/peers.md). So a write is only a duplicate when it is
similar enough **and** it states the same numbers, dates, negations and preferences, adds no word
the old memory lacks, and is not the old sentence with one or two words swapped. What passes: the
same words re-punctuated, re-ordered or with filler removed, and rewordings that change most of
the words while the embedding still finds them equivalent; the same sentence frame with other
names, places or values in its slots is another fact. When in doubt, the write is kept.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections import Counter

from .text import tokenize

_NUMBER = re.compile(r"\d+(?:[.,:/\-]\d+)*\s*%?")
_EN_NEGATIONS = frozenset(
    [
        "not",
        "no",
        "never",
        "none",
        "nobody",
        "nothing",
        "neither",
        "nor",
        "without",
        "cannot",
        "cant",
        "dont",
        "doesnt",
        "didnt",
        "isnt",
        "arent",
        "wasnt",
        "werent",
        "wont",
        "wouldnt",
        "shouldnt",
        "couldnt",
        "hasnt",
        "havent",
        "hadnt",
        "stop",
        "stopped",
        "quit",
    ]
)
_ZH_NEGATIONS = ("不", "没", "无", "非", "别", "未", "勿", "莫", "否", "停止", "取消")
_EN_PREFERENCE = frozenset(
    [
        "like",
        "likes",
        "liked",
        "love",
        "loves",
        "loved",
        "prefer",
        "prefers",
        "preferred",
        "enjoy",
        "enjoys",
        "enjoyed",
        "hate",
        "hates",
        "hated",
        "dislike",
        "dislikes",
        "disliked",
        "favorite",
        "favourite",
        "want",
        "wants",
        "wanted",
        "avoid",
        "avoids",
    ]
)
_ZH_PREFERENCE = ("喜欢", "偏好", "讨厌", "爱", "倾向", "厌恶", "想要", "希望", "避免", "习惯")
_TEMPORAL = frozenset(
    [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
        "today",
        "yesterday",
        "tomorrow",
        "tonight",
        "morning",
        "evening",
        "afternoon",
        "week",
        "weekend",
        "month",
        "year",
        "今天",
        "昨天",
        "明天",
        "前天",
        "后天",
        "上周",
        "下周",
        "本周",
        "周一",
        "周二",
        "周三",
        "周四",
        "周五",
        "周六",
        "周日",
        "上午",
        "下午",
        "晚上",
        "早上",
        "今年",
        "去年",
        "明年",
        "月初",
        "月底",
    ]
)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", unicodedata.normalize("NFKC", text).lower().replace("n't", "nt"))


def numbers(text: str) -> list[str]:
    """Numbers in order of appearance: "75% to 92%" and "92% to 75%" are different facts."""
    norm = unicodedata.normalize("NFKC", text)
    return [re.sub(r"\s+", "", m.group(0)).rstrip(".,") for m in _NUMBER.finditer(norm)]


def negation_count(text: str) -> int:
    norm = unicodedata.normalize("NFKC", text)
    count = sum(1 for w in _words(norm) if w in _EN_NEGATIONS)
    return count + sum(norm.count(marker) for marker in _ZH_NEGATIONS)


def preference_terms(text: str) -> Counter[str]:
    norm = unicodedata.normalize("NFKC", text)
    found = Counter(w for w in _words(norm) if w in _EN_PREFERENCE)
    for marker in _ZH_PREFERENCE:
        if marker in norm:
            found[marker] += norm.count(marker)
    return found


def temporal_terms(text: str) -> set[str]:
    return {t for t in tokenize(text) if t in _TEMPORAL}


def conflict_reason(new: str, old: str) -> str | None:
    """Why `new` says something different from `old` although they look alike; None if it doesn't."""
    if numbers(new) != numbers(old):
        return "numbers differ"
    if negation_count(new) % 2 != negation_count(old) % 2:
        return "negation differs"
    if preference_terms(new) != preference_terms(old):
        return "stated preference differs"
    if temporal_terms(new) != temporal_terms(old):
        return "dates differ"
    new_words, old_words = set(tokenize(new)), set(tokenize(old))
    added, removed = new_words - old_words, old_words - new_words
    if added and not removed:
        return "adds detail"
    if added and removed and min(len(added), len(removed)) <= 2:
        # A word or two swapped in an otherwise identical sentence is how a value or a name
        # changes ("service alpha" -> "service beta", "prefers tea" -> "prefers coffee").
        return "replaces " + ", ".join(sorted(removed)[:2])
    if added and removed and _same_frame(tokenize(old), tokenize(new)):
        # The same sentence frame with several slots filled differently is another fact about
        # other things ("张伟在北京的华为工作" / "李娜在上海的腾讯工作"; a name, a place and a
        # company swapped): measured as the main source of false duplicates at 100k memories.
        return "replaces " + ", ".join(sorted(removed)[:3])
    return None


def _same_frame(old: tuple[str, ...], new: tuple[str, ...]) -> bool:
    """At least 40 % of the words kept, in the same order, around the substituted ones."""
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    kept = sum(block.size for block in matcher.get_matching_blocks())
    return kept >= 0.4 * max(len(old), len(new))
