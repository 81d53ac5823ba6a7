"""The offline lifecycle engine: extractive, rule-based and clustering, no LLM.

Used when no LLM is configured (`LLM_BASE_URL` empty). Deterministic: the same input gives the
same output (ties are broken by input order; the embedding model is deterministic). It needs only
the embedding model the memories app already has (and degrades to keywords alone if that fails).

What it does
------------
* **Sentences.** Items are split on Chinese 。！？； and English . ! ? ; (a "." only ends a
  sentence when followed by a space or the end, so "3.5", "120ms", "memory_system.py" and
  "e.g." stay intact) and on line breaks. A sentence is dropped when it is *noise*: shorter than
  4 units (a CJK character is 1 unit, a Latin word or number 2), pure chit-chat ("好的，谢谢",
  "ok thanks", "哈哈"), or a question.
* **extract_facts.** Every remaining sentence is a fact (de-duplicated, with the index of the item
  it came from), classified by keyword rules, first match wins:

  ==========  =========================================================  ==========
  category    cues (Chinese / English)                                   importance
  ==========  =========================================================  ==========
  preference  偏好 喜欢 不喜欢 讨厌 倾向 / prefer, like(s), dislike, hate     0.80
  decision    决定 改为 改用 选择 采用 换成 / decided, switched, chose        0.80
  plan        需要 计划 下周 明天 打算 / will, plan, todo, next week, need to  0.60
  metric      a number with % ‰ ms 毫秒 秒 倍 x × qps GB MB                  0.75
  habit       习惯 每天 通常 经常 总是 / usually, always, often, every day     0.65
  expertise   擅长 熟悉 精通 专家 / expert, experienced, proficient           0.70
  event       发现 今天 昨天 刚才 上周 / yesterday, today, found, noticed     0.45
  fact        anything else                                              0.55
  ==========  =========================================================  ==========

  (Plans come before metrics so "下周把延迟降到 50ms" is a plan; decisions before plans so
  "decided to ship next week" is a decision.)
* **compress.** Items are grouped by similarity (average-linkage agglomerative clustering,
  forced down to `target_count` groups, then merging further only clearly same-topic items);
  each group becomes one extractive summary (`_summarise`): its sentences without repeats and
  near duplicates (the same point in other words, by the search model's calibrated score; never
  two sentences stating different numbers), chosen — when they do not all fit in 1000
  characters — by maximal marginal relevance (centrality to the group blended with rule
  importance, minus redundancy with the sentences already chosen), in item order, joined with
  "；" (Chinese) or "; " (English). Importance = the highest rule importance among its
  sentences. A group of pure chit-chat yields no summary.
* **aggregate.** Memories are clustered the same way with a threshold; a cluster of one memory is
  not a scenario unless there are fewer than 3 memories. Name = its top 3 keywords (jieba TF-IDF
  for Chinese, frequency of stemmed words for English, words shared by several members first);
  summary = the most central members' text, at most 300 characters.
* **persona.** Facts are sorted by category (a category outside CATEGORIES, e.g. "general", is
  re-derived with the rules above): preferences, habits, expertise (+ the names of the first 3
  scenarios: the caller passes them most relevant first), communication_style = the preferences
  about replies/communication/style (回复 沟通 风格 简洁 详细 / reply, concise, detailed...), and
  a template summary in the majority language of the memories, opened by the agent's profile
  fields when it has any ("Profile: occupation: …; location: …. ", "档案：…。").

Similarity = 0.5 × calibrated embedding score + 0.5 × keyword overlap (cosine of the top-8
keywords of each text, weighted by jieba's IDF). Why both: the small multilingual e5 model puts
any two memories of the same domain at raw cosine 0.86–0.93, so on its own it either merges a
whole research log into one scenario or nothing; shared rare words ("风控", "回测", "Redis") are
what separates the topics. Measured on the Chinese research-log memories of the tests and an English set, the
threshold 0.33 separates backtesting / risk control / engineering.

Limits
------
* Extractive only: no rewording, no pronoun resolution ("他", "it" stay as written), no merging
  of two sentences into one fact, no translation; a fact is a whole sentence, clauses joined by
  commas are not split.
* Keyword rules misfire on unusual phrasing (a "like" that is not a preference, a number with a
  unit that is not a measurement) and know nothing of negation beyond the keywords themselves.
* Questions are always dropped, even when they carry information.
* Clustering quality follows the embedding model: short, mixed-language or very generic memories
  group poorly. Scenario names are keyword lists, not titles.
* Summaries longer than the budget lose their least central, least important sentences.
* Near duplicates are judged by embeddings, which hardly see negation or antonyms: "prefers
  concise" and "prefers detailed" may collapse (the later wording is the one kept).
"""

from __future__ import annotations

import calendar
import logging
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta

import numpy as np
from django.conf import settings

from core.dates import until_moment
from core.errors import DomainError
from core.text import CJK, UNSPACED, han_pieces, jieba_module
from graph.offline import third_party_subject
from llm import Usage
from memories.retrieval.text import STOP_WORDS, normalise, tokenize

from .schemas import (
    CATEGORIES,
    FACT_MAX_CHARS,
    SCENARIO_NAME_MAX_CHARS,
    Fact,
    PersonaDraft,
    ScenarioDraft,
    Summary,
)

logger = logging.getLogger(__name__)

IMPORTANCE: dict[str, float] = {
    "preference": 0.8,
    "decision": 0.8,
    "metric": 0.75,
    "expertise": 0.7,
    "habit": 0.65,
    "plan": 0.6,
    "fact": 0.55,
    "event": 0.45,
}

COMPRESS_MAX_CHARS = 1000
SCENARIO_SUMMARY_MAX_CHARS = 300
PERSONA_ITEM_MAX_CHARS = 300
PERSONA_LIST_MAX = 10
PERSONA_SCENARIOS_AS_EXPERTISE = 3

# Similarity = EMBEDDING_WEIGHT * calibrated embedding score + (1 - EMBEDDING_WEIGHT) * keywords.
EMBEDDING_WEIGHT = 0.5
# Average-linkage similarity at which two groups of memories are one scenario.
SCENARIO_THRESHOLD = 0.33
# Beyond the target count, compress merges only what is clearly the same topic.
COMPRESS_MERGE_THRESHOLD = 0.6
KEYWORDS_PER_TEXT = 8
MIN_UNITS = 4

_CJK = CJK
_CJK_CHAR = re.compile(f"[{_CJK}]")
_CJK_RUN = re.compile(f"[{_CJK}]+")
# Scripts written without spaces between words besides Chinese (kana, Thai, Lao, Myanmar,
# Khmer): their letters are counted one by one, like Chinese characters.
_UNSPACED = UNSPACED
_UNSPACED_CHAR = re.compile(f"[{_UNSPACED}]")
# A word of any other script (Latin, Cyrillic, Greek, Arabic, Hebrew, Hangul, Devanagari…):
# counting only [A-Za-z] took every sentence in Russian or Korean for noise, so their facts
# were never extracted and a compress archived them without a summary.
_WORD = rf"[^\W_{_CJK}{_UNSPACED}]"
_OTHER_WORD = re.compile(rf"{_WORD}+(?:['’.\-_]{_WORD}+)*")
_LETTER = rf"[^\W\d_{_CJK}{_UNSPACED}]"
_FEATURE_TOKEN = re.compile(rf"[{_CJK}]+|{_LETTER}(?:{_WORD}|['’\-])*")
_POSSESSIVE = re.compile(r"['’]s$")
_POSSESSIVES = re.compile(r"(\w)['’]s\b")


# --- language -------------------------------------------------------------------------------------


def _units(text: str) -> tuple[int, int]:
    """(letters of scripts without spaces — CJK, kana, Thai… —, words and numbers of the
    others) in `text`: how much it says, whatever its language."""
    letters = len(_CJK_CHAR.findall(text)) + len(_UNSPACED_CHAR.findall(text))
    return letters, len(_OTHER_WORD.findall(text))


def dominant_language(texts: list[str]) -> str:
    """ "zh" when the texts hold at least as many CJK characters as other words, else "en"
    (which separator and keyword extraction a summary gets)."""
    cjk = words = 0
    for t in texts:
        cjk += len(_CJK_CHAR.findall(t))
        words += len(_OTHER_WORD.findall(t))
    return "zh" if cjk and cjk >= words else "en"


def _sep(lang: str) -> str:
    return "；" if lang == "zh" else "; "


# --- sentences ------------------------------------------------------------------------------------

_HARD_STOPS = frozenset("。！？；!?;\n")
_CLOSERS = frozenset("”’」』）)】》\"'")
# Words after which "." does not end a sentence.
_ABBREVIATIONS = frozenset(
    ["e.g", "i.e", "vs", "mr", "mrs", "dr", "prof", "st", "fig", "approx", "jr", "sr", "cf", "al"]
)
_LEADING_BULLET = re.compile(r"^\s*(?:[-*•·●▪]+|\d{1,2}[.)、]|[(（]\d{1,2}[)）])\s+")
# Only from where the run starts (the lookbehind): tried from every character of a long run
# of spaces before a word, `[...]+$` took seconds (quadratic) on one 32,000-character message.
_TRAILING_PUNCT = re.compile(r"(?<![\s。！？；!?;.,，、:：])[\s。！？；!?;.,，、:：]+$")
_LEADING_PUNCT = re.compile(r"^[\s,，、;；:：.。]+")


def _segments(text: str) -> list[str]:
    """Raw sentence segments, terminators included."""
    out: list[str] = []
    start = i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        end: int | None = None
        if ch in _HARD_STOPS:
            end = i + 1
        elif ch == "." and (i + 1 == n or text[i + 1].isspace()):
            before = re.search(r"([A-Za-z][A-Za-z.]*)$", text[max(start, i - 12) : i])
            word = before.group(1).lower() if before else ""
            is_initial = len(word) == 1 and before is not None and before.group(1).isupper()
            if word not in _ABBREVIATIONS and not is_initial:
                end = i + 1
        if end is None:
            i += 1
            continue
        # Keep "？！", "...", closing quotes and brackets with the sentence they end.
        while end < n and (text[end] in _CLOSERS or text[end] in _HARD_STOPS or text[end] == "."):
            end += 1
        out.append(text[start:end])
        start = i = end
    out.append(text[start:])
    return [s for s in out if s.strip()]


def _clean(segment: str) -> str:
    s = _LEADING_BULLET.sub("", segment.strip())
    s = _LEADING_PUNCT.sub("", s)
    return _TRAILING_PUNCT.sub("", s).strip()


def _is_question(segment: str) -> bool:
    return segment.rstrip().rstrip("".join(_CLOSERS)).endswith(("?", "？"))


# Greetings, thanks and acknowledgements ("|"-separated; longest matched first).
_CHIT_CHAT_ZH = (
    "谢谢你的帮助|谢谢你|谢谢您|谢谢|多谢|感谢|辛苦了|辛苦|好的|好吧|好滴|"
    "好嘞|嗯嗯|嗯|哦|噢|哈哈|呵呵|嘿嘿|收到|明白了|明白|了解了|了解|"
    "知道了|我知道了|我明白了|没问题|可以的|行的|对的|是的|你好|您好|"
    "早上好|早安|晚安|再见|拜拜|不客气|没关系|太棒了|很好|不错|加油|哈喽|"
    "在吗|请稍等|稍等|好|对|行|嗨|啊|呀|吧|了"
)
_CHIT_CHAT_EN = (
    "thank you very much|thanks for your help|thanks for the help|thank you|thanks|"
    "thx|okay|ok|sure|got it|great|cool|nice|awesome|sounds good|no problem|"
    "you're welcome|goodbye|bye|good morning|good night|hello|hi|hey|yes|yeah|yep|no|"
    "nope|lol|haha|alright|all right|perfect|will do|noted|i see|makes sense|"
    "of course|please|sorry|wow|so|well|and|you|a|lot|much|very"
)
_CHIT_CHAT_PHRASES = sorted(
    set(_CHIT_CHAT_ZH.split("|")) | set(_CHIT_CHAT_EN.split("|")), key=lambda p: (-len(p), p)
)
_CHIT_CHAT_RE = re.compile(
    "|".join(
        re.escape(p) if _CJK_CHAR.search(p) else rf"\b{re.escape(p)}\b" for p in _CHIT_CHAT_PHRASES
    )
)


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def is_chit_chat(sentence: str) -> bool:
    """True when nothing but greetings, thanks and acknowledgements is left."""
    folded = _fold(sentence)
    rest = _CHIT_CHAT_RE.sub(" ", folded)
    cjk, words = _units(rest)
    return cjk + words == 0 or (cjk + 2 * words <= 1)


def _is_noise(segment: str) -> bool:
    sentence = _clean(segment)
    if not sentence:
        return True
    cjk, words = _units(sentence)
    if cjk + 2 * words < MIN_UNITS:
        return True
    return _is_question(segment) or is_chit_chat(sentence)


def split_sentences(text: str) -> list[str]:
    """Sentences of `text` (cleaned of bullets and end punctuation), noise included."""
    return [s for s in (_clean(seg) for seg in _segments(text)) if s]


# A fact that says when it stops being true, on a date it writes out: "until 2031-01-31",
# "till 2031-01-31T18:00Z", "直到2031年1月31日", "到2031-01-31为止", "有效期至2031年1月31日". Only
# these: a deadline ("by", "截止") is not the end of the fact, and a relative date ("until
# Friday") needs the day it was said (`said_expiry`).
_DATE = r"(\d{4})\s*[-/年]\s*(\d{1,2})\s*[-/月]\s*(\d{1,2})\s*日?"
_UNTIL = (
    re.compile(
        r"\b(?:until|till|through)\s+(\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?"
        r"(?:Z|[+-]\d{2}:?\d{2})?)?)(?![\d:-])",
        re.IGNORECASE,
    ),
    re.compile(rf"(?:直到|有效期?(?:至|到)){_DATE}"),
    re.compile(rf"(?:到|至){_DATE}\s*(?:为止|止)"),
)


def stated_expiry(sentence: str) -> datetime | None:
    """When `sentence` says it stops being true (see _UNTIL), None when it does not say."""
    for pattern in _UNTIL:
        found = pattern.search(sentence)
        if found is None:
            continue
        if len(found.groups()) == 1:
            return until_moment(found.group(1).replace(" ", "T"))
        year, month, day = (int(g) for g in found.groups())
        return until_moment(f"{year:04d}-{month:02d}-{day:02d}")
    return None


# A fact that ends on a day named from when it was said: "until Friday", "till tomorrow",
# "through the end of the month", "直到周五", "到月底为止". Read by `said_expiry` from the day the
# message was said. A bare "到周五" is not one ("推迟到周五" moves something to Friday).
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_REL_EN = re.compile(
    r"\b(?:until|till|through|thru)\s+(?:"
    r"(?P<day>today|tonight|tomorrow|the\s+day\s+after\s+tomorrow)"
    r"|(?:the\s+)?end\s+of\s+(?:the\s+|this\s+)?(?P<end>week|month|year)"
    r"|(?:the\s+end\s+of\s+)?next\s+(?P<next>week|month|year)"
    r"|(?:this\s+|the\s+)?(?P<weekend>weekend)"
    rf"|(?P<which>this\s+|next\s+)?(?P<weekday>{'|'.join(_WEEKDAYS)})"
    r")\b(?!['’]s)",
    re.IGNORECASE,
)
_REL_ZH_DAY = (
    r"(?:(?P<day>今天|今晚|明天|明日|后天)"
    r"|(?:本|这个?|今年)?(?P<end>周末|月底|年底)"
    # Not 下个月10号: a day of that month (_MDAY_ZH), not its last one.
    r"|(?P<next>下周|下个?星期|下个?礼拜|下个?月|明年)(?![一二两三四五六七八九十日天\d])(?:年底|底|末)?"
    r"|(?P<which>本|这|下)?(?:周|星期|礼拜)(?P<weekday>[一二三四五六日天]))"
)


def _zh_until(day: str) -> tuple[re.Pattern[str], ...]:
    """The Chinese ways to say "until `day`": after 直到, 一直到, 有效期至, or between 到 / 至 and
    为止 (a bare 到 moves something: "推迟到周五")."""
    return (
        re.compile(rf"(?:直到|一直到|有效期?(?:至|到)){day}"),
        re.compile(rf"(?:到|至){day}\s*(?:底\s*)?(?:为止|止)"),
    )


_REL_ZH = _zh_until(_REL_ZH_DAY)
# "Monday through Friday", "周一到周五": a span of days, most often a recurring one ("I work
# Monday through Friday"), never the end of the fact. A sentence holding one names no end.
_DAY_SPAN = (
    re.compile(
        rf"\b(?:{'|'.join(_WEEKDAYS)})s?\s*(?:-|–|to|until|till|through|thru)\s*"
        rf"(?:{'|'.join(_WEEKDAYS)})",
        re.IGNORECASE,
    ),
    re.compile(r"(?:周|星期|礼拜)[一二三四五六日天]\s*(?:-|–|~|一直到|直到|到|至)"),
)
# "I was in Rome until Friday", "当时直到周五都在罗马": the past, whose Friday is behind, not
# ahead. A sentence in the past tense names no end: in English a past form of be / have / do,
# in Chinese a word that places it in the past (a bare 了 does not: "我换了组，直到周五都在…").
_PAST = (
    re.compile(r"\b(?:was|were|had|did|used\s+to)\b", re.IGNORECASE),
    re.compile(r"当时|那时|曾经|上周|上个月|去年"),
)
# A fact that holds for a stretch of time counted from when it was said: "for the next three
# days", "over the coming two weeks", "for the rest of the month", "接下来三天", "未来两个月".
# Only a stretch ahead: "for two weeks" alone is as often one up to now ("I have been vegan for
# two years") or a recurring one ("I run for two hours"), and "within the next three days",
# "三天内" is a deadline. Hours and minutes are not read: too short to be worth a memory's end.
_COUNT_EN = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
_STRETCH_EN = (
    re.compile(
        r"\b(?:for|over|during|through)\s+the\s+(?:next|coming)\s+"
        rf"(?:(?P<count>\d{{1,3}}|(?:a\s+)?couple\s+of|{'|'.join(_COUNT_EN)})\s+)?"
        # "the coming weeks", with no count, is some weeks, not one: not read.
        r"(?P<unit>day|week|month|year)(?(count)s?)\b",
        re.IGNORECASE,
    ),
    re.compile(
        r"\b(?:for|through)\s+the\s+(?:rest|remainder)\s+of\s+(?:the\s+|this\s+)?"
        r"(?P<end>day|week|month|year)\b",
        re.IGNORECASE,
    ),
)
_ZH_DIGITS = "零一二三四五六七八九"
_STRETCH_ZH = re.compile(
    r"(?:接下来|未来|今后|往后)的?\s*(?P<count>\d{1,3}|[一二两三四五六七八九十]{1,3})\s*个?"
    r"(?P<unit>天|日|周|星期|礼拜|月|年)(?!内|之内|以内|后|之后|以后)"
)
_UNITS = {"天": "day", "日": "day", "周": "week", "星期": "week", "礼拜": "week"}
_UNITS.update({"月": "month", "年": "year"})
# A calendar date written in words, or without its year: "until March 10", "till the 3rd of
# June", "through March 10, 2031", "until March" (its last day), "直到3月10日", "到三月十号为止",
# "有效期至3月底". The year, when not written, is the date's next one from the day it was said.
_MONTHS_EN = (
    "jan(?:uary)?",
    "feb(?:ruary)?",
    "mar(?:ch)?",
    "apr(?:il)?",
    "(?-i:May)",  # "until may…" is most often the verb
    "june?",
    "july?",
    "aug(?:ust)?",
    "sep(?:t(?:ember)?)?",
    "oct(?:ober)?",
    "nov(?:ember)?",
    "dec(?:ember)?",
)
_MONTH_EN = "|".join(f"(?P<m{n}>{name})" for n, name in enumerate(_MONTHS_EN, 1))
_ORDINAL = r"(?:st|nd|rd|th)?"
_DATE_EN = re.compile(
    r"\b(?:until|till|through|thru)\s+(?:"
    rf"(?:the\s+end\s+of\s+)?(?:{_MONTH_EN})\.?(?:\s+(?P<mday>\d{{1,2}}){_ORDINAL})?"
    rf"|(?:the\s+)?(?P<day_first>\d{{1,2}}){_ORDINAL}\s+(?:of\s+)?(?:{_MONTH_EN.replace('?P<m', '?P<n')})"
    r")(?:,?\s+(?P<year>\d{4}))?\b(?!['’]s)",
    re.IGNORECASE,
)
_ZH_COUNT = r"\d{1,2}|[一二两三四五六七八九十]{1,3}"
_DATE_ZH_DAY = (
    rf"(?:(?P<year>\d{{4}})\s*年\s*)?(?P<month>{_ZH_COUNT})\s*月"
    rf"(?:\s*(?P<mday>{_ZH_COUNT})\s*[日号])?"
)
_DATE_ZH = _zh_until(_DATE_ZH_DAY)
# A day of the month without its month: "until the 15th", "till the 3rd of next month",
# "直到15号", "到下个月10号为止". The month is the first from the day it was said in which that
# day is not past (and exists: "until the 31st" said in February is March 31). In English only
# before the end of the clause or a word that starts another ("until the 5th floor" is a place);
# in Chinese not before a word that makes it a number ("5号楼", "3号线").
_MDAY_EN = re.compile(
    r"\b(?:until|till|through|thru)\s+the\s+(?P<mday>\d{1,2})(?:st|nd|rd|th)\b"
    r"(?:\s+of\s+(?P<which>this|the|next)\s+month\b)?"
    r"(?!['’]s|\s+(?!(?:and|but|while|or|so|then|when|because|as|if|at|in|on|for|from|i|we"
    r"|you|he|she|they|it)\b)[a-z])",
    re.IGNORECASE,
)
_MDAY_ZH_DAY = (
    rf"(?P<which>本月|这个月|下个?月)?(?P<mday>{_ZH_COUNT})\s*[日号](?![楼线门栋层室位路口期届次])"
)
_MDAY_ZH = _zh_until(_MDAY_ZH_DAY)
_DAYS_AHEAD = {
    "today": 0,
    "tonight": 0,
    "tomorrow": 1,
    "今天": 0,
    "今晚": 0,
    "明天": 1,
    "明日": 1,
    "后天": 2,
}
_ENDS = {"周末": "week", "月底": "month", "年底": "year"}
_NEXT_ZH = {"周": "week", "星": "week", "礼": "week", "月": "month", "年": "year"}
_ZH_WEEKDAYS = "一二三四五六"


def _last_day_of(period: str, today: date) -> date:
    """The last day of the day / week (its Sunday) / month / year that holds `today`."""
    period = period.lower()
    if period == "day":
        return today
    if period == "week":
        return today + timedelta(days=6 - today.weekday())
    if period == "month":
        return today.replace(day=calendar.monthrange(today.year, today.month)[1])
    return today.replace(month=12, day=31)


def _named_day(found: re.Match[str], today: date) -> date:
    """The day a _REL_EN / _REL_ZH match names, counted from `today`. Where a phrase could name
    two days ("until Friday" said on a Friday; "next Friday"), the later one: an end that comes
    late leaves a stale memory found a little longer, one that comes early hides a true one."""
    groups = found.groupdict()
    if groups["day"]:
        return today + timedelta(days=_DAYS_AHEAD.get(groups["day"].lower(), 2))
    if groups["next"]:  # "next week", 下个月: the last day of the next one, the later reading
        said = groups["next"].lower()
        # 下周, 下星期, 下个礼拜, 下个月, 明年: the word after 下 / 下个, or 年 of 明年.
        period = said if said in ("week", "month", "year") else _NEXT_ZH[said.lstrip("下个明")[0]]
        if period == "week":
            return _last_day_of("week", today + timedelta(weeks=1))
        if period == "month":
            return _last_day_of("month", _months_later(today.replace(day=1), 1))
        return today.replace(year=today.year + 1, month=12, day=31)
    end = "week" if groups.get("weekend") else _ENDS.get(groups["end"] or "", groups["end"] or "")
    if end:
        return _last_day_of(end, today)
    name = groups["weekday"].lower()
    # 一…六 are Monday…Saturday; 日 and 天 (not in _ZH_WEEKDAYS: find gives -1) Sunday.
    weekday = _WEEKDAYS.index(name) if name in _WEEKDAYS else _ZH_WEEKDAYS.find(name) % 7
    which = (groups["which"] or "").strip().lower()
    ahead = (weekday - today.weekday()) % 7
    if which == "下":  # the given day of the next calendar week (weeks start on Monday)
        return today + timedelta(days=7 - today.weekday() + weekday)
    if which in ("this", "本", "这"):
        return today + timedelta(days=ahead)
    return today + timedelta(days=(ahead or 7) + (7 if which == "next" else 0))


def _count(said: str) -> int:
    """A count as said ("3", "three", "a couple of", "三", "两", "十二", "二十") as a number;
    ValueError for characters that are none ("十十", "三三")."""
    said = " ".join(said.lower().split())
    if said.isdigit():
        return int(said)
    if said in _COUNT_EN:
        return _COUNT_EN[said]
    if said.endswith("couple of"):
        return 2
    tens, ten, ones = said.replace("两", "二").rpartition("十")
    if not ten:
        return _ZH_DIGITS.index(ones)
    return (_ZH_DIGITS.index(tens) if tens else 1) * 10 + (_ZH_DIGITS.index(ones) if ones else 0)


def _months_later(day: date, months: int) -> date:
    """`day` `months` calendar months later, on the month's last day when it is shorter."""
    year, month = divmod(day.month - 1 + months, 12)
    year, month = day.year + year, month + 1
    return day.replace(
        year=year, month=month, day=min(day.day, calendar.monthrange(year, month)[1])
    )


def _stretch_end(found: re.Match[str], today: date) -> date:
    """The last day of a _STRETCH_EN / _STRETCH_ZH match counted from `today`: "the next three
    days" said on Wednesday ends on Saturday, the later of its readings (a stretch that starts
    tomorrow)."""
    groups = found.groupdict()
    if groups.get("end"):
        return _last_day_of(groups["end"], today)
    count = _count(groups["count"]) if groups["count"] else 1
    unit = _UNITS.get(groups["unit"], groups["unit"].lower())
    if unit == "day":
        return today + timedelta(days=count)
    if unit == "week":
        return today + timedelta(weeks=count)
    return _months_later(today, count * (12 if unit == "year" else 1))


# Reads the day a match names, counted from the day it was said; None when it names none.
_DayReader = Callable[[re.Match[str], date], date | None]


def _calendar_day(found: re.Match[str], today: date) -> date:
    """The day a _DATE_EN / _DATE_ZH match writes out, in its year or the next one from `today`
    on which it is not past; a month alone is its last day. ValueError for a day no calendar
    has (February 30, a month 13)."""
    groups = {k: v for k, v in found.groupdict().items() if v}
    if "month" in groups:
        month, mday = _count(groups["month"]), groups.get("mday")
    else:
        month = next(int(k[1:]) for k in groups if k[0] in "mn" and k[1:].isdigit())
        mday = groups.get("mday") or groups.get("day_first")
    day = _count(mday) if mday else None
    year = int(groups["year"]) if "year" in groups else today.year
    found_day = date(year, month, day or calendar.monthrange(year, month)[1])
    if "year" not in groups and found_day < today:
        found_day = date(year + 1, month, day or calendar.monthrange(year + 1, month)[1])
    return found_day


def _month_day(found: re.Match[str], today: date) -> date:
    """The day a _MDAY_EN / _MDAY_ZH match names: that day of the month it names (this or the
    next one), or else of the first month from `today` that has it and in which it is not past.
    ValueError for a day no month has, or that the month named lacks."""
    groups = found.groupdict()
    mday = _count(groups["mday"])
    which = (groups["which"] or "").lower()
    first = today.replace(day=1)
    if which:
        month = _months_later(first, 1 if which in ("next", "下月", "下个月") else 0)
        return month.replace(day=mday)
    for ahead in range(3):  # a day up to 31 is in one of any three months in a row
        month = _months_later(first, ahead)
        if mday <= calendar.monthrange(month.year, month.month)[1]:
            day = month.replace(day=mday)  # ValueError for the 0th
            if day >= today:
                return day
    raise ValueError(f"no day {mday} in a month")  # the 32nd and up


def said_expiry(sentence: str, said_at: datetime) -> datetime | None:
    """When `sentence`, said at `said_at`, says it stops being true on a day it names from then
    ("until Friday", "直到明天") or at the end of a stretch it counts from then ("for the next
    three days", "接下来两周"); None when it names none. That day is counted in UTC and the
    fact holds until the end of the day after it: the speaker's time zone is not known, and
    wherever it is, the named day has ended by then. A calendar day it writes out ("until
    March 10", "直到3月10日") ends, as a stated date does (stated_expiry), when that day ends in
    UTC. A sentence that names two ends keeps the later one."""
    if any(past.search(sentence) for past in _PAST) or any(
        span.search(sentence) for span in _DAY_SPAN
    ):
        return None
    today = said_at.astimezone(UTC).date()
    readers: tuple[tuple[tuple[re.Pattern[str], ...], _DayReader, int], ...] = (
        ((_REL_EN, *_REL_ZH), _named_day, 2),
        ((*_STRETCH_EN, _STRETCH_ZH), _stretch_end, 2),
        ((_DATE_EN, *_DATE_ZH), _calendar_day, 1),  # a written day: it ends with that day
        ((_MDAY_EN, *_MDAY_ZH), _month_day, 1),
    )
    ends: list[datetime] = []
    for patterns, read, days_after in readers:
        for pattern in patterns:
            found = pattern.search(sentence)
            try:
                day = None if found is None else read(found, today)
                if day is not None:
                    ends.append(datetime.combine(day + timedelta(days_after), time(0), UTC))
            except (ValueError, OverflowError):
                # A count that is no number ("十十"), or an end past the calendar's last day
                # (said in the year 9999): no end, never an error for the whole write.
                continue
    return max(ends, default=None)


# Where a sentence joins two statements: "on call until Friday, and she likes green tea" says
# one thing that ends and one that does not. Not a comma before a year ("March 10, 2031").
_CLAUSE = re.compile(r",(?!\s*\d{4}\b)|[，;；]|\b(?:and|but|while)\b|但是|并且|而且|同时", re.I)
# Every phrase that names an end, and what may stand beside one in a clause that says nothing
# else ("Until Friday, I am on call", "从现在到周五为止，我都在出差"): such a clause is the time of
# the next one.
_END_PHRASES = (
    *_UNTIL,
    _REL_EN,
    *_REL_ZH,
    *_STRETCH_EN,
    _STRETCH_ZH,
    _DATE_EN,
    *_DATE_ZH,
    _MDAY_EN,
    *_MDAY_ZH,
)
# A word every one of them holds: a text without any names no end, and is not split into
# clauses and run through every pattern (most facts hold none).
_ANY_END = re.compile(
    r"\b(?:until|till|through|thru|next|coming|rest|remainder)\b|到|至|接下来|未来|今后|往后",
    re.IGNORECASE,
)
_TIME_FILLER = re.compile(
    r"\b(?:from\s+(?:now|today)|starting\s+(?:now|today)|i|we)\b|从现在(?:起|开始)?|从今天(?:起|开始)?"
    r"|我们?|都|一直",
    re.IGNORECASE,
)


def _time_alone(clause: str) -> bool:
    """Whether `clause` holds an end and nothing else ("Until Friday", "接下来三天")."""
    for pattern in _END_PHRASES:
        clause = pattern.sub(" ", clause)
    return not re.search(r"\w", _TIME_FILLER.sub(" ", clause))


def whole_expiry(text: str, said_at: datetime | None = None) -> datetime | None:
    """When all of `text`, said at `said_at`, stops being true: the latest end its clauses
    name (stated_expiry; said_expiry when `said_at` is known), and None when one of them names
    none, or names one already past when it was said (it speaks of the past): a fact or a
    summary must outlive everything it says ("on leave until Friday and she lives in Lyon"
    never expires). A clause that is only a time ("Until Friday, I am on call", "I am on
    call, until Friday") is the end of the clauses beside it."""
    if not _ANY_END.search(text):
        return None
    ends: list[datetime | None] = []
    for sentence in split_sentences(text):
        first = len(ends)  # a time reaches no clause of another sentence
        leading: datetime | None = None  # a clause that is only a time: the next one's end
        for clause in _CLAUSE.split(sentence):
            if not clause.strip(" \t.。!！?？"):
                continue
            end = stated_expiry(clause) or (
                None if said_at is None else said_expiry(clause, said_at)
            )
            if end is not None and _time_alone(clause):
                # The time of the clause before it too ("I am on call, until Friday"), the
                # later one when that clause named its own.
                if len(ends) > first:
                    ends[-1] = end if ends[-1] is None else max(end, ends[-1])
                leading = end
                continue
            ends.append(end or leading)
            leading = None
        if leading is not None and len(ends) == first:  # the sentence is only a time
            ends.append(leading)
    if not ends or any(end is None or (said_at is not None and end <= said_at) for end in ends):
        return None
    return max(end for end in ends if end is not None)


def _content_sentences(text: str) -> list[str]:
    """Sentences worth keeping: not too short, not chit-chat, not questions."""
    return [_clean(seg) for seg in _segments(text) if not _is_noise(seg)]


# --- classification -------------------------------------------------------------------------------


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


def _en(*patterns: str) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(patterns) + r")\b")


_RULES: list[tuple[str, tuple[str, ...], re.Pattern[str] | None]] = [
    (
        "preference",
        _words("偏好 喜欢 讨厌 倾向于 更愿意 偏爱 爱用 厌恶 反感"),
        _en(
            r"prefers?",
            r"preferred",
            r"preference",
            r"likes",
            r"liked",
            r"loves",
            r"dislikes?",
            r"disliked",
            r"hates?",
            r"hated",
            r"enjoys?",
            r"enjoyed",
            r"favou?rite",
            r"would rather",
            r"fond of",
            r"(?:i|we|you|they|he|she|users?|n't|not)\s+(?:really\s+)?(?:like|love)",
        ),
    ),
    (
        "decision",
        _words("决定 改为 改成 改用 选择 选用 采用 换成 换用 确定用 定为 决策 放弃"),
        _en(
            r"decided?",
            r"decision",
            r"switched",
            r"switch(?:ed)? to",
            r"chose",
            r"chosen",
            r"opted",
            r"adopted",
            r"settled on",
            r"went with",
            r"migrated to",
            r"replaced",
        ),
    ),
    (
        "plan",
        _words("需要 计划 下周 下个月 下月 明天 打算 准备 待办 将要 安排 截止 之前完成"),
        _en(
            r"will",
            r"plans?",
            r"planned",
            r"planning",
            r"todo",
            r"to-do",
            r"next (?:week|month|year|monday|tuesday|wednesday|thursday|friday|sprint|quarter)",
            r"tomorrow",
            r"needs? to",
            r"going to",
            r"scheduled?",
            r"deadline",
            r"intends? to",
        ),
    ),
    ("metric", (), None),  # numbers with a unit: see _METRIC
    (
        "habit",
        _words("习惯 每天 每周 每晚 每天早上 通常 经常 总是 一般会 往往 常常 每次"),
        _en(
            r"usually",
            r"always",
            r"often",
            r"every (?:day|morning|evening|night|week|weekend|monday|tuesday|wednesday|thursday|friday|saturday|sunday)",
            r"daily",
            r"weekly",
            r"routinely",
            r"habit(?:ually)?",
            r"tends? to",
        ),
    ),
    (
        "expertise",
        _words("擅长 熟悉 精通 专家 经验丰富 年经验 专长 拿手"),
        _en(
            r"expert",
            r"expertise",
            r"experienced",
            r"proficient",
            r"skilled",
            r"speciali[sz](?:es|ed|t)",
            r"familiar with",
            r"years of experience",
            r"good at",
        ),
    ),
    (
        "event",
        _words("发现 今天 昨天 前天 刚才 刚刚 上周 上个月 遇到 发生 注意到"),
        _en(
            r"yesterday",
            r"today",
            r"this morning",
            r"last (?:week|night|month|year|friday|monday)",
            r"found",
            r"discovered",
            r"noticed",
            r"happened",
            r"encountered",
            r"ran into",
        ),
    ),
]
# From the start of a run of digits, points and commas only (the lookbehind; a run may start
# with a point: ".5 ms"): from each of its digits, a long run took quadratic time.
_METRIC = re.compile(
    r"(?<![\d.,])[.,]*\d(?:[\d.,]*\d)?\s*(?:%|‰|ms\b|毫秒|秒|倍|x\b|×|qps\b|tps\b|rps\b|fps\b|tb\b|gb\b|mb\b|kb\b)"
)


def classify(sentence: str) -> str:
    """The category of one sentence by keyword rules (see the module docstring)."""
    folded = _fold(sentence)
    for category, zh, en in _RULES:
        if category == "metric":
            if _METRIC.search(folded):
                return category
            continue
        if any(k in folded for k in zh) or (en is not None and en.search(folded)):
            return category
    return "fact"


# --- text utilities -------------------------------------------------------------------------------

_WORD_CHAR = re.compile(rf"{_WORD}|[.%_\-/:@#+]")


def _inside_word(text: str, cut: int) -> bool:
    """Whether cutting before `text[cut]` splits a word or a number (any spaced script), or a
    letter from its combining marks (a Thai tone mark, a Devanagari vowel sign)."""
    return bool(
        (_WORD_CHAR.match(text[cut - 1]) and _WORD_CHAR.match(text[cut]))
        or unicodedata.combining(text[cut])
        or unicodedata.category(text[cut]) == "Mc"
    )


def trim_text(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters ("…" included), never inside a number or word."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = max(1, limit - 1)
    while cut > 0 and _inside_word(text, cut):
        cut -= 1
    if cut == 0:  # one giant token: cutting it is all that is left
        cut = max(1, limit - 1)
    return text[:cut].rstrip(" ,;，；、:：") + "…"


def _pack(sentences: list[tuple[str, float]], limit: int, sep: str) -> str:
    """Sentences joined in their order, dropping the least important ones beyond `limit`."""
    total = sum(len(s) for s, _ in sentences) + len(sep) * (len(sentences) - 1)
    if total <= limit:
        return sep.join(s for s, _ in sentences)
    budget = limit - len(sep) - 1  # room for the trailing "…"
    order = sorted(range(len(sentences)), key=lambda i: (-sentences[i][1], i))
    chosen: list[int] = []
    used = 0
    for i in order:
        cost = len(sentences[i][0]) + (len(sep) if chosen else 0)
        if used + cost <= budget:
            chosen.append(i)
            used += cost
    if not chosen:
        return trim_text(sentences[order[0]][0], limit)
    return sep.join(sentences[i][0] for i in sorted(chosen)) + sep + "…"


def _dedupe_counted(sentences: list[tuple[str, float]]) -> list[tuple[str, float, int]]:
    """Drops repeats (same normalised text, or contained in a longer kept sentence), counting
    how often each kept sentence was said: its repeats and the sentences contained in it count
    for it (the first such one)."""
    keyed = [(normalise(s), s, imp) for s, imp in sentences]
    out: list[tuple[str, float, int]] = []
    seen: dict[str, int] = {}  # key -> position in `out`
    pending: list[str] = []  # keys contained in a longer sentence, credited once it is kept
    for i, (key, s, imp) in enumerate(keyed):
        if key in seen:
            kept = out[seen[key]]
            out[seen[key]] = (kept[0], max(kept[1], imp), kept[2] + 1)
            continue
        if any(key != other and key in other for other, _, _ in keyed[:i] + keyed[i + 1 :]):
            pending.append(key)
            continue
        seen[key] = len(out)
        out.append((s, imp, 1))
    for key in pending:
        for kept_key, pos in seen.items():
            if key in kept_key:
                kept = out[pos]
                out[pos] = (kept[0], kept[1], kept[2] + 1)
                break
    return out


# Sentences at least this close (the search model's calibrated score: 0.85 "answers it
# squarely") say the same thing in other words: one of them is kept.
NEAR_DUPLICATE_THRESHOLD = 0.8
# The MMR trade-off: relevance (centrality and importance) against redundancy with the
# sentences already chosen.
MMR_LAMBDA = 0.7
# Relevance = CENTRALITY_WEIGHT * centrality + (1 - CENTRALITY_WEIGHT) * importance.
CENTRALITY_WEIGHT = 0.5
# At most this many distinct sentences of a group are compared pairwise (the most important,
# earliest first): far more than a summary of COMPRESS_MAX_CHARS can hold.
SUMMARY_MAX_SENTENCES = 300
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def _numbers(sentence: str) -> tuple[str, ...]:
    return tuple(_NUMBER.findall(unicodedata.normalize("NFKC", sentence)))


def _sameness(texts: list[str]) -> np.ndarray:
    """`sentence_similarity`, except that two sentences stating different numbers are never the
    same: "延迟 120ms" and "延迟降到 50ms" are two facts, however alike their wording."""
    same = sentence_similarity(texts) if len(texts) > 1 else np.ones((1, 1))
    numbers = [_numbers(t) for t in texts]
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            if numbers[i] and numbers[j] and numbers[i] != numbers[j]:
                same[i, j] = same[j, i] = 0.0
    return same


def _collapse(units: list[tuple[str, float, int]], same: np.ndarray) -> list[tuple[int, list[int]]]:
    """Near-duplicate sentences grouped: `(representative, members)`, by first member.

    Two sentences are one point when they are NEAR_DUPLICATE_THRESHOLD the same (`_sameness`,
    average linkage). The representative is the most important member, then the latest — when
    a point is said again the last wording is the current one (embeddings hardly see negation
    or antonyms, so of "偏好详细" and a later "偏好简洁" the later stays)."""
    groups = agglomerate(same, threshold=NEAR_DUPLICATE_THRESHOLD)
    return [(max(g, key=lambda i: (units[i][1], i)), g) for g in groups]


def sentence_similarity(texts: list[str]) -> np.ndarray:
    """Pairwise "says the same thing" in [0, 1]: the search model's calibrated score, which
    keeps same-topic but different statements far apart (unlike `similarity_matrix`, made to
    group a topic); keyword overlap when the model is unavailable."""
    from memories.retrieval.embeddings import embed_passages, get_embedder

    try:
        embedder = get_embedder()
        vectors = embed_passages(texts)
        sim = np.clip(np.asarray(embedder.score(vectors @ vectors.T), dtype=np.float64), 0, 1)
        sim = _words_where_unread(sim, texts, embedder.reads)
    except DomainError as exc:
        logger.warning("offline engine: embeddings unavailable (%s), comparing keywords", exc)
        sim = _keyword_similarity(texts)
    np.fill_diagonal(sim, 1.0)
    return sim


def _words_where_unread(
    sim: np.ndarray, texts: list[str], reads: Callable[[str], bool]
) -> np.ndarray:
    """`sim` with the rows and columns of texts in a script the model never learnt replaced by
    their keyword similarity: the model puts all such sentences at nearly one point, and
    "the same point" read from it collapsed four different Hebrew facts into one."""
    unread = [i for i, t in enumerate(texts) if not reads(t)]
    if not unread:
        return sim
    words = _keyword_similarity(texts)
    sim = sim.copy()
    sim[unread, :] = words[unread, :]
    sim[:, unread] = words[:, unread]
    return sim


def _scaled(importance: float) -> float:
    """Rule importance on [0, 1] like centrality (event 0 … preference and decision 1): on its
    raw 0.45–0.8 scale it would hardly count beside centrality, and a preference that is off
    the group's topic would lose to every sentence of a long log."""
    low, high = min(IMPORTANCE.values()), max(IMPORTANCE.values())
    return min(max((importance - low) / (high - low), 0.0), 1.0)


def _summarise(sentences: list[tuple[str, float]], limit: int, sep: str) -> str:
    """An extractive summary of a group's sentences (in time order), at most `limit` characters.

    1. Repeats go: the same sentence, one contained in another, and near duplicates — the same
       point in other words, Chinese or English (`_collapse` on `_sameness`).
    2. When what is left fits, it is the summary. Otherwise sentences are chosen by maximal
       marginal relevance: relevance = centrality (the sentence's mean topical similarity to the
       group's sentences, `similarity_matrix`, each counted as often as it was said: its
       closeness to the group's centroid) blended with its rule importance (`_scaled`); minus
       its highest sameness with a sentence already chosen. The best that still fits is taken
       until none does; a "…" marks the cut.
    3. The chosen sentences keep their original (time) order.
    """
    units = _dedupe_counted(sentences)
    if not units:
        return ""
    if len(units) > SUMMARY_MAX_SENTENCES:
        pool = sorted(range(len(units)), key=lambda i: (-units[i][1], i))
        units = [units[i] for i in sorted(pool[:SUMMARY_MAX_SENTENCES])]
    texts = [s for s, _, _ in units]
    same = _sameness(texts)
    groups = _collapse(units, same)
    weight = np.zeros(len(units))
    for rep, members in groups:  # a point counts as often as it was said, in any wording
        weight[rep] = float(sum(units[m][2] for m in members))
    reps = sorted(rep for rep, _ in groups)
    kept = [texts[r] for r in reps]
    if sum(len(t) for t in kept) + len(sep) * (len(kept) - 1) <= limit:
        return sep.join(kept)
    topic = similarity_matrix(texts)
    relevance: dict[int, float] = {}
    for r in reps:
        others = weight.copy()
        others[r] -= 1.0  # itself once: only its repeats vouch for it
        total = float(others.sum())
        centrality = float(others @ topic[r]) / total if total > 0 else 1.0
        relevance[r] = CENTRALITY_WEIGHT * centrality + (1 - CENTRALITY_WEIGHT) * _scaled(
            units[r][1]
        )
    budget = limit - len(sep) - 1  # room for the trailing "…"
    chosen: list[int] = []
    used = 0
    left = list(reps)
    while left:
        best: tuple[float, int] | None = None
        for r in left:
            if used + len(texts[r]) + (len(sep) if chosen else 0) > budget:
                continue
            redundancy = max((float(same[r, c]) for c in chosen), default=0.0)
            score = MMR_LAMBDA * relevance[r] - (1 - MMR_LAMBDA) * redundancy
            if best is None or score > best[0]:  # ties: the earliest
                best = (score, r)
        if best is None:
            break
        r = best[1]
        used += len(texts[r]) + (len(sep) if chosen else 0)
        chosen.append(r)
        left.remove(r)
    if not chosen:
        top = max(reps, key=lambda r: (relevance[r], -r))
        return trim_text(texts[top], limit)
    return sep.join(texts[r] for r in sorted(chosen)) + sep + "…"


# --- similarity and clustering --------------------------------------------------------------------


def _idf() -> tuple[dict[str, float], float]:
    import jieba.analyse

    jieba_module()
    tfidf = jieba.analyse.default_tfidf
    return tfidf.idf_freq, float(tfidf.median_idf)


def _features(text: str, idf: dict[str, float], median: float) -> dict[str, float]:
    """The top keywords of `text`, weighted by IDF (rare words weigh more)."""
    jieba = jieba_module()
    weights: dict[str, float] = {}
    for match in _FEATURE_TOKEN.finditer(unicodedata.normalize("NFKC", text)):
        tok = match.group(0)
        if _CJK_RUN.fullmatch(tok):
            for word in (w for piece in han_pieces(tok) for w in jieba.lcut(piece)):
                if len(word) >= 2 and word not in STOP_WORDS:
                    weights[word] = idf.get(word, median)
            # Character bigrams catch words jieba splits differently in two sentences
            # ("回测周期" -> 回测, "回测数据源" -> 回 / 测数据 / 源).
            for k in range(len(tok) - 1):
                weights.setdefault(tok[k : k + 2], median * 0.5)
        else:
            for stem in tokenize(_POSSESSIVE.sub("", tok)):
                if len(stem) >= 2:
                    weights[stem] = median
    top = sorted(weights.items(), key=lambda kv: (-kv[1], kv[0]))[:KEYWORDS_PER_TEXT]
    return dict(top)


def _keyword_similarity(texts: list[str]) -> np.ndarray:
    idf, median = _idf()
    feats = [_features(t, idf, median) for t in texts]
    norms = [math.sqrt(sum(v * v for v in f.values())) or 1.0 for f in feats]
    n = len(texts)
    sim = np.zeros((n, n), dtype=np.float64)
    for i in range(n):
        for j in range(i + 1, n):
            shared = feats[i].keys() & feats[j].keys()
            if shared:
                dot = sum(feats[i][t] * feats[j][t] for t in shared)
                sim[i, j] = sim[j, i] = dot / (norms[i] * norms[j])
    return sim


def similarity_matrix(texts: list[str]) -> np.ndarray:
    """Pairwise similarity in [0, 1]: calibrated embedding score blended with keyword overlap."""
    lexical = _keyword_similarity(texts)
    try:
        from memories.retrieval.embeddings import get_named_embedder

        # Grouping is a batch job: it may use a slower model that sees topics better than
        # the search model (LIFECYCLE_TOPIC_EMBEDDING_BACKEND, docs/lifecycle.md).
        embedder = get_named_embedder(settings.LIFECYCLE_TOPIC_EMBEDDING_BACKEND)
        vectors = embedder.encode_passages(texts)
        semantic = np.asarray(embedder.score(vectors @ vectors.T), dtype=np.float64)
        semantic = _words_where_unread(semantic, texts, embedder.reads)
        sim = EMBEDDING_WEIGHT * semantic + (1.0 - EMBEDDING_WEIGHT) * lexical
    except DomainError as exc:
        logger.warning("offline engine: embeddings unavailable (%s), grouping by keywords", exc)
        sim = lexical
    np.fill_diagonal(sim, 1.0)
    return sim


# Feedback said again in other words: as close as two items a compress would merge.
REPEAT_THRESHOLD = COMPRESS_MERGE_THRESHOLD


def repeated_points(texts: list[str], *, min_repeats: int) -> list[tuple[int, list[int]]]:
    """Groups of at least `min_repeats` texts that say the same thing, each with its most
    central member (the highest mean similarity to the others): `(central, members)`, largest
    group first. What a procedure proposal is drawn from."""
    if len(texts) < min_repeats:
        return []
    sim = similarity_matrix(texts)
    groups = [g for g in agglomerate(sim, threshold=REPEAT_THRESHOLD) if len(g) >= min_repeats]
    out: list[tuple[int, list[int]]] = []
    for group in sorted(groups, key=lambda g: (-len(g), g[0])):
        central = max(group, key=lambda i: (float(np.mean([sim[i, j] for j in group])), -i))
        out.append((central, group))
    return out


def agglomerate(
    sim: np.ndarray, *, threshold: float, max_clusters: int | None = None
) -> list[list[int]]:
    """Average-linkage clustering: merge the most similar pair while its similarity reaches
    `threshold` (and, regardless of it, while there are more than `max_clusters` clusters).
    Ties go to the lowest indexes, so the result is deterministic. Clusters are sorted by their
    first member."""
    n = sim.shape[0]
    if n == 0:
        return []
    m = sim.astype(np.float64).copy()
    np.fill_diagonal(m, -np.inf)
    members: list[list[int]] = [[i] for i in range(n)]
    alive = n
    while alive > 1:
        a, b = divmod(int(np.argmax(m)), n)
        best = m[a, b]
        if best < threshold and (max_clusters is None or alive <= max_clusters):
            break
        a, b = min(a, b), max(a, b)
        size_a, size_b = len(members[a]), len(members[b])
        merged = (size_a * m[a] + size_b * m[b]) / (size_a + size_b)
        m[a, :] = merged
        m[:, a] = merged
        m[a, a] = -np.inf
        m[b, :] = -np.inf
        m[:, b] = -np.inf
        members[a] = sorted(members[a] + members[b])
        members[b] = []
        alive -= 1
    return sorted((c for c in members if c), key=lambda c: c[0])


# --- keywords -------------------------------------------------------------------------------------


# Dates and times say when, not what: never a topic name.
_TIME_WORD = re.compile(
    r"^(?:[今昨明前后]天|[上下本这]个?(?:周|星期|月)|周[一二三四五六日末]|星期.|[早晚]上|[上下中]午|"
    r"[今去明]年|月[初底末]|today|yesterday|tomorrow|tonight|morning|evening|afternoon|week|"
    r"weekend|month|year|monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
)


def _good_keyword(word: str) -> bool:
    w = word.strip()
    return (
        len(w) >= 2
        and not re.search(r"\d", w)
        and w.lower() not in STOP_WORDS
        and not _TIME_WORD.match(w.lower())
        and bool(re.search(rf"[{_CJK}]|{_LETTER}", w))
    )


def keywords(texts: list[str], k: int = 3) -> list[str]:
    """The top `k` keywords of a group of texts; words found in several of them come first."""
    joined = "\n".join(texts)
    folded = [t.lower() for t in texts]
    candidates: list[str]
    if dominant_language(texts) == "zh":
        import jieba.analyse

        jieba_module()
        candidates = [w for w in jieba.analyse.extract_tags(joined, topK=20) if _good_keyword(w)]
        doc_freq = {w: sum(1 for t in folded if w.lower() in t) for w in candidates}
    else:
        counts: Counter[str] = Counter()
        surfaces: dict[str, Counter[str]] = {}
        first_seen: dict[str, int] = {}
        for pos, match in enumerate(re.finditer(rf"{_LETTER}(?:{_LETTER}|['’\-])*", joined)):
            word = _POSSESSIVE.sub("", match.group(0))
            stems = tokenize(word)
            if len(word) < 3 or not stems or not _good_keyword(word):
                continue
            stem = stems[0]
            counts[stem] += 1
            surfaces.setdefault(stem, Counter())[word] += 1
            first_seen.setdefault(stem, pos)
        token_sets = [set(tokenize(_POSSESSIVES.sub(r"\1", t))) for t in texts]
        stems_ranked = sorted(counts, key=lambda s: (-counts[s], first_seen[s]))
        candidates = []
        doc_freq = {}
        for stem in stems_ranked:
            # The most frequent spelling ("Redis", "API"), first seen on a tie.
            surface = max(surfaces[stem].items(), key=lambda kv: kv[1])[0]
            candidates.append(surface)
            doc_freq[surface] = sum(1 for ts in token_sets if stem in ts)
    ranked = sorted(range(len(candidates)), key=lambda i: (-doc_freq[candidates[i]], i))
    # Words shared by several texts name the group; a word of one text only fills a name that
    # would otherwise have fewer than two words (it is often a segmentation accident).
    floor = min(2, len(texts))
    out: list[str] = []
    for i in ranked:
        word = candidates[i]
        if doc_freq[word] < floor and len(out) >= 2:
            break
        if word.lower() not in (o.lower() for o in out):
            out.append(word)
        if len(out) == k:
            break
    return out


def _topic_name(texts: list[str]) -> str:
    lang = dominant_language(texts)
    words = keywords(texts, 3)
    name = ("、" if lang == "zh" else " / ").join(words)
    return trim_text(name or texts[0], min(30, SCENARIO_NAME_MAX_CHARS))


# --- the engine -----------------------------------------------------------------------------------

_STYLE_ZH = _words("回复 回答 答复 沟通 交流 风格 语气 简洁 详细 冗长 啰嗦 直接 简短")
_STYLE_EN = re.compile(
    r"\b(?:repl(?:y|ies)|respon(?:d|ds|se|ses)|answers?|communicat\w*|tone|style|concise|"
    r"detailed|verbose|brief|short|direct|wordy|explanations?)\b"
)


def _is_style(text: str) -> bool:
    folded = _fold(text)
    return any(k in folded for k in _STYLE_ZH) or bool(_STYLE_EN.search(folded))


class OfflineEngine:
    """Deterministic extractive engine (see the module docstring)."""

    name = "offline"

    def extract_facts(self, items: list[str]) -> tuple[list[Fact], Usage]:
        facts: list[Fact] = []
        by_key: dict[str, Fact] = {}
        for index, item in enumerate(items):
            for sentence in _content_sentences(item or ""):
                key = normalise(sentence)
                if key in by_key:
                    if index not in by_key[key].source_indexes:
                        by_key[key].source_indexes.append(index)
                    continue
                category = classify(sentence)
                fact = Fact(
                    content=trim_text(sentence, FACT_MAX_CHARS),
                    importance=IMPORTANCE[category],
                    category=category,
                    source_indexes=[index],
                    expires_at=whole_expiry(sentence),
                )
                by_key[key] = fact
                facts.append(fact)
        return facts, Usage()

    def compress(self, items: list[str], target_count: int) -> tuple[list[Summary], Usage]:
        texts = [(t or "").strip() for t in items]
        if not texts:
            return [], Usage()
        target = max(1, int(target_count))
        if len(texts) == 1:
            groups = [[0]]
        else:
            sim = similarity_matrix(texts)
            groups = agglomerate(sim, threshold=COMPRESS_MERGE_THRESHOLD, max_clusters=target)
        summaries: list[Summary] = []
        for group in groups:
            sentences = [
                (s, IMPORTANCE[classify(s)]) for i in group for s in _content_sentences(texts[i])
            ]
            if not sentences:
                continue
            lang = dominant_language([s for s, _ in sentences])
            summaries.append(
                Summary(
                    content=_summarise(sentences, COMPRESS_MAX_CHARS, _sep(lang)),
                    importance=max(imp for _, imp in sentences),
                    source_indexes=group,
                )
            )
        return summaries, Usage()

    def aggregate(self, memories: list[tuple[int, str]]) -> tuple[list[ScenarioDraft], Usage]:
        ids: list[int] = []
        texts: list[str] = []
        for memory_id, content in memories:
            if memory_id in ids or not (content or "").strip():
                continue
            ids.append(memory_id)
            texts.append(content.strip())
        n = len(texts)
        if n == 0:
            return [], Usage()
        sim = similarity_matrix(texts) if n > 1 else np.ones((1, 1))
        clusters = agglomerate(sim, threshold=SCENARIO_THRESHOLD)
        if n >= 3:
            clusters = [c for c in clusters if len(c) >= 2]
        clusters.sort(key=lambda c: (-len(c), c[0]))
        drafts: list[ScenarioDraft] = []
        for cluster in clusters:
            members = [texts[i] for i in cluster]
            # Most central first: highest mean similarity to the rest of the cluster.
            centrality = [float(np.mean([sim[i, j] for j in cluster])) for i in cluster]
            ranked = [
                (trim_text(texts[i], SCENARIO_SUMMARY_MAX_CHARS), centrality[k])
                for k, i in enumerate(cluster)
            ]
            lang = dominant_language(members)
            drafts.append(
                ScenarioDraft(
                    name=_topic_name(members),
                    summary=_pack(ranked, SCENARIO_SUMMARY_MAX_CHARS, _sep(lang)),
                    memory_ids=[ids[i] for i in cluster],
                )
            )
        return drafts, Usage()

    def persona(
        self,
        facts: list[tuple[int, str, str]],
        scenarios: list[tuple[str, str, str]],
        profile: list[tuple[str, str]] | None = None,
    ) -> tuple[PersonaDraft, Usage]:
        buckets: dict[str, list[tuple[int, str]]] = {c: [] for c in CATEGORIES}
        seen: set[str] = set()
        for memory_id, content, category in facts:
            text = (content or "").strip()
            key = normalise(text)
            if not text or key in seen:
                continue
            seen.add(key)
            if third_party_subject(text):
                continue  # about someone else ("Alice asked for …"): not the user's own
            cat = category if category in CATEGORIES else classify(text)
            buckets[cat].append((memory_id, trim_text(text, PERSONA_ITEM_MAX_CHARS)))

        prefs = buckets["preference"][:PERSONA_LIST_MAX]
        habits = buckets["habit"][:PERSONA_LIST_MAX]
        skills = buckets["expertise"][:PERSONA_LIST_MAX]
        used_scenarios = [
            (sid, name.strip())
            for sid, name, _summary in scenarios[:PERSONA_SCENARIOS_AS_EXPERTISE]
            if (name or "").strip()
        ]
        style_items = [text for _, text in prefs if _is_style(text)]
        all_texts = [t for _, t, _ in facts if t] + [n for _, n, _ in scenarios if n]
        lang = dominant_language(all_texts + [v for _, v in profile or []])

        expertise = [t for _, t in skills]
        for _, name in used_scenarios:
            if name not in expertise:
                expertise.append(name)
        style = _sep(lang).join(style_items)
        memory_ids: list[int] = []
        for memory_id, _ in prefs + habits + skills:
            if memory_id not in memory_ids:
                memory_ids.append(memory_id)
        draft = PersonaDraft(
            preferences=[t for _, t in prefs],
            habits=[t for _, t in habits],
            expertise=expertise,
            communication_style=style,
            summary=_profile_line(lang, profile or [])
            + _persona_summary(
                lang,
                n_memories=len(facts),
                n_scenarios=len(scenarios),
                prefs=[t for _, t in prefs],
                habits=[t for _, t in habits],
                expertise=expertise,
                style=style,
                decisions=len(buckets["decision"]),
                plans=len(buckets["plan"]),
            ),
            memory_ids=memory_ids,
            scenario_ids=[sid for sid, _ in used_scenarios],
        )
        return draft, Usage()


# The persona summary's wording: (Chinese, English) str.format templates. {n} a count, {e} the
# first item, {s} the communication style, {d}/{p} decisions/plans, {head} the opening phrase.
_SUMMARY_PHRASES = {
    "head": ("基于 {n} 条记忆", "Built from {n} memories"),
    "scenarios": ("和 {n} 个场景", " and {n} scenarios"),
    "prefs": ("偏好 {n} 条（如“{e}”）", '{n} preference(s), e.g. "{e}"'),
    "habits": ("习惯 {n} 条（如“{e}”）", '{n} habit(s), e.g. "{e}"'),
    "expertise": ("擅长：", "expertise: "),
    "expertise_sep": ("，", "; "),
    "style": ("沟通风格：{s}", "communication style: {s}"),
    "records": ("另有 {d} 条决策、{p} 条计划", "{d} decision(s) and {p} plan(s) on record"),
    "empty": (
        "{head}：尚未发现明确的偏好、习惯或专长。",
        "{head}: no clear preferences, habits or expertise yet.",
    ),
    "lead": ("{head}的画像：", "{head}: "),
    "end": ("。", "."),
}


def _profile_line(lang: str, profile: list[tuple[str, str]]) -> str:
    """The profile fields, exact and first: "Profile: occupation: X; location: Y. " """
    if not profile:
        return ""
    zh = lang == "zh"
    pairs = [f"{key}{'：' if zh else ': '}{trim_text(value, 60)}" for key, value in profile]
    return (
        ("档案：" if zh else "Profile: ")
        + ("；" if zh else "; ").join(pairs)
        + ("。" if zh else ". ")
    )


def _persona_summary(
    lang: str,
    *,
    n_memories: int,
    n_scenarios: int,
    prefs: list[str],
    habits: list[str],
    expertise: list[str],
    style: str,
    decisions: int,
    plans: int,
) -> str:
    zh = lang == "zh"
    w = {key: phrases[0 if zh else 1] for key, phrases in _SUMMARY_PHRASES.items()}
    head = w["head"].format(n=n_memories)
    if n_scenarios:
        head += w["scenarios"].format(n=n_scenarios)
    parts = []
    if prefs:
        parts.append(w["prefs"].format(n=len(prefs), e=trim_text(prefs[0], 40)))
    if habits:
        parts.append(w["habits"].format(n=len(habits), e=trim_text(habits[0], 40)))
    if expertise:
        cut = (trim_text(e, 20 if zh else 30) for e in expertise[:3])
        parts.append(w["expertise"] + w["expertise_sep"].join(cut))
    if style:
        parts.append(w["style"].format(s=trim_text(style, 40)))
    if decisions or plans:
        parts.append(w["records"].format(d=decisions, p=plans))
    if not parts:
        return w["empty"].format(head=head)
    return w["lead"].format(head=head) + _sep(lang).join(parts) + w["end"]
