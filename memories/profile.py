"""The agent profile's rules: which keys exist, what a value may be, and which facts are profile
fields (docs/lifecycle.md, "Profile").

Pure functions of strings: the services (`memories.services.profile_*`) write, the lifecycle
calls `profile_fields_in` on each fact it stores. The classifier is deliberately conservative —
a profile field is read as exactly what it is, so a sentence that only *might* say where the user
lives says nothing here; it is still stored as a memory (the long tail) and found by search.
"""

from __future__ import annotations

import re
import zoneinfo
from functools import cache

# Keys with a meaning every reader (persona, clients, the classifier) agrees on. Any other key
# matching KEY_RE is a free key: stored and returned the same way, never written by extraction.
WELL_KNOWN_KEYS: dict[str, str] = {
    "name": "what the user is called",
    "occupation": "job title or role, e.g. backend engineer",
    "employer": "company or organisation the user works for",
    "location": "city / region / country the user lives in",
    "timezone": "an IANA zone (Asia/Shanghai) or a UTC offset (UTC+8)",
    "language": "the language the user mainly speaks and wants answers in",
    "programming_language": "the programming language the user mainly works in",
    "tools": "tools the user works with, comma-separated",
    "cloud_platform": "the cloud the user's systems run on, e.g. AWS, Alibaba Cloud",
}
KEY_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
KEY_MESSAGE = "Keys must match ^[a-z][a-z0-9_]{0,63}$."
# `GET /profile/<agent>/history` is a route: a key of that name could not be deleted by URL.
RESERVED_KEYS = frozenset({"history"})
VALUE_MAX_CHARS = 1000
MAX_FIELDS_PER_AGENT = 100
MAX_FIELDS_PER_WRITE = 50

_OFFSET = re.compile(r"^(?:UTC|GMT)\s?[+-](?:0?\d|1[0-4])(?::?[0-5]\d)?$|^(?:UTC|GMT)$")


@cache
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def timezone_valid(value: str) -> bool:
    return value in _zones() or bool(_OFFSET.match(value.upper()))


def key_error(key: str) -> str | None:
    """Why `key` cannot be a profile key, or None."""
    if not isinstance(key, str) or not KEY_RE.match(key):
        return KEY_MESSAGE
    if key in RESERVED_KEYS:
        return f'"{key}" is reserved.'
    return None


def value_error(key: str, value: object) -> str | None:
    """Why `value` cannot be stored under `key`, or None (the value is checked stripped)."""
    if not isinstance(value, str):
        return "Must be a string."
    text = value.strip()
    if not text:
        return "Must not be empty (DELETE the key to remove it)."
    if len(text) > VALUE_MAX_CHARS:
        return f"At most {VALUE_MAX_CHARS} characters."
    if key == "timezone" and not timezone_valid(text):
        return "An IANA time zone (Asia/Shanghai) or a UTC offset (UTC+8)."
    return None


# --- the classifier -------------------------------------------------------------------------------

# Cloud platforms by the names people use, with the one name the profile keeps.
_CLOUDS = {
    "aws": "AWS",
    "amazon web services": "AWS",
    "gcp": "Google Cloud",
    "google cloud": "Google Cloud",
    "google cloud platform": "Google Cloud",
    "azure": "Azure",
    "microsoft azure": "Azure",
    "alibaba cloud": "Alibaba Cloud",
    "aliyun": "Alibaba Cloud",
    "阿里云": "Alibaba Cloud",
    "tencent cloud": "Tencent Cloud",
    "腾讯云": "Tencent Cloud",
    "huawei cloud": "Huawei Cloud",
    "华为云": "Huawei Cloud",
    "百度智能云": "Baidu AI Cloud",
    "百度云": "Baidu AI Cloud",
    "oracle cloud": "Oracle Cloud",
    "digitalocean": "DigitalOcean",
}
_CLOUD_ALT = "|".join(re.escape(c) for c in sorted(_CLOUDS, key=len, reverse=True))

# Who a fact is about: the speaker in a message, "the user" in an LLM's rephrasing.
_EN_SUBJ = r"(?i:\bi|\bthe user|\buser)"
_EN_POSS = r"(?i:\bmy|\bthe user's|\buser's)"
_ZH_SUBJ = r"(?:我|用户)"
_ZH_POSS = r"(?:我的|用户的)"
# Where an English value stops: punctuation, or a clause joined to it. A run of spaces is tried
# from its first one only (the lookbehind): from each of them, a long run took quadratic time.
_EN_STOP = re.compile(
    r"[,.;!?()\[\]\"]|(?<!\s)\s+(?:and|but|where|which|who|with|so|because|since|while|when|though|"
    r"although|now|currently|these days|nowadays|every|most of)\b",
    re.IGNORECASE,
)
_ZH_STOP = re.compile(r"[，。,；;！!？?、（）()\s]|并且|而且|但是|所以|因为")
_JOB_WORDS = (
    r"engineer|developer|programmer|designer|scientist|manager|analyst|researcher|teacher|"
    r"professor|doctor|nurse|lawyer|trader|consultant|architect|accountant|student|writer|"
    r"journalist|founder|cto|ceo|devops|sre|administrator|admin|product owner|data scientist"
)
_ZH_JOB_WORDS = (
    r"工程师|程序员|开发者|设计师|经理|分析师|研究员|老师|教师|教授|医生|护士|律师|交易员|顾问|"
    r"架构师|会计|学生|作家|记者|创始人|运维|产品经理|科学家|总监"
)
_ARTICLES = re.compile(r"^(?:an?|the)\s+", re.IGNORECASE)
_NOT_A_VALUE = re.compile(
    r"^(?:it|this|that|them|these|those|there|here|home|my|our|a lot|lots|some|any|the)\b",
    re.IGNORECASE,
)
_NOT_AN_EMPLOYER_ZH = frozenset(
    {"家", "家里", "公司", "这里", "那里", "这边", "那边", "远程", "外面"}
)
_LANGUAGES = {
    "中文": "Chinese",
    "汉语": "Chinese",
    "普通话": "Chinese",
    "英语": "English",
    "英文": "English",
    "粤语": "Cantonese",
    "日语": "Japanese",
    "韩语": "Korean",
    "法语": "French",
    "德语": "German",
    "西班牙语": "Spanish",
}
_LANGUAGE_ALT = "|".join(sorted(_LANGUAGES, key=len, reverse=True))


def _cut_en(text: str, max_words: int) -> str | None:
    value = _EN_STOP.split(text, maxsplit=1)[0].strip()
    value = _ARTICLES.sub("", value).strip(" '\"")
    if not value or _NOT_A_VALUE.match(value) or len(value.split()) > max_words:
        return None
    return value


def _cut_zh(text: str, max_chars: int) -> str | None:
    value = _ZH_STOP.split(text, maxsplit=1)[0].strip()
    if not value or len(value) > max_chars:
        return None
    return value


def _tools(text: str) -> str | None:
    """`A, B and C` -> "A, B, C"; None unless every item looks like a name (short, no article)."""
    head = re.split(r"[.;!?]|\s+(?:for|to|at|in|on|when|because|every|daily|which)\s+", text)[0]
    items = [i.strip() for i in re.split(r",|、|，|\s+and\s+|\s+&\s+|和|及", head) if i.strip()]
    if not items or len(items) > 10:
        return None
    for item in items:
        if len(item.split()) > 3 or _NOT_A_VALUE.match(item) or _ARTICLES.match(item):
            return None
    return ", ".join(items)


_I = re.IGNORECASE
# An upper-case letter even inside a case-insensitive pattern: names start with one.
_CAPITAL = r"(?-i:[A-Z])"
# (key, pattern, how the `v` group becomes the value); the first match of a key wins.
_EN_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("name", re.compile(rf"{_EN_POSS} name is (?P<v>{_CAPITAL}.*)")),
    ("name", re.compile(rf"(?i:\bcall me) (?P<v>{_CAPITAL}.*)")),
    (
        "occupation",
        re.compile(
            rf"{_EN_SUBJ} (?:work|works|am working|is working) as (?P<v>.+?)"
            rf"(?:\s+(?:at|for)\s+(?P<emp>{_CAPITAL}[^,.;!?]*))?(?:[,.;!?]|$)"
        ),
    ),
    (
        "occupation",
        re.compile(
            rf"{_EN_SUBJ}(?:'m| am| is) an? (?P<v>(?:[\w-]+ ){{0,3}}(?:{_JOB_WORDS}))\b"
            rf"(?:\s+(?:at|for)\s+(?P<emp>{_CAPITAL}[^,.;!?]*))?",
            _I,
        ),
    ),
    ("occupation", re.compile(rf"{_EN_POSS} (?:job|job title|role|occupation) is (?P<v>.+)", _I)),
    ("employer", re.compile(rf"{_EN_SUBJ} (?:work|works) (?:at|for) (?P<v>{_CAPITAL}.*)")),
    ("employer", re.compile(rf"{_EN_POSS} (?:employer|company) is (?P<v>.+)", _I)),
    (
        "location",
        re.compile(
            rf"{_EN_SUBJ}(?: live| lives|'m living| am living| is living|'m based| am based| "
            r"is based) in (?P<v>.+)",
            _I,
        ),
    ),
    (
        "timezone",
        re.compile(rf"{_EN_POSS} time ?zone is (?P<v>[A-Za-z_/+\-:0-9 ]+)", _I),
    ),
    (
        "timezone",
        re.compile(
            rf"{_EN_SUBJ}(?:'m| am| is) in (?:the )?(?P<v>(?:UTC|GMT)\s?[+-]\d{{1,2}}(?::?\d\d)?)"
            r" time ?zone",
            _I,
        ),
    ),
    (
        "language",
        re.compile(
            rf"{_EN_POSS} (?:main|primary|native|first|preferred|mother) (?:spoken )?"
            r"(?:language|tongue) is (?P<v>[A-Z][a-z]+)",
            _I,
        ),
    ),
    (
        "programming_language",
        re.compile(
            rf"{_EN_POSS} (?:main|primary|preferred) programming language is (?P<v>[\w+#.-]+)", _I
        ),
    ),
    (
        "cloud_platform",
        re.compile(
            r"\b(?:i|we|our team|our company|the user|the team|user)\s+(?:mainly |mostly |all )?"
            r"(?:use|uses|run on|runs on|are on|is on|deploy to|deploy on|deploys to|host on|"
            r"hosts on|are hosted on|is hosted on)\s+(?:the\s+)?"
            rf"(?P<v>{_CLOUD_ALT})\b",
            _I,
        ),
    ),
    (
        "tools",
        re.compile(
            rf"{_EN_SUBJ} (?:mainly |mostly |usually |daily |always )?(?:use|uses|work with|"
            r"works with) (?P<v>.+)",
            _I,
        ),
    ),
]
_ZH_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("name", re.compile(rf"(?:^\s*我叫|{_ZH_POSS}名字(?:是|叫))(?P<v>[^他她它你].*)")),
    (
        "occupation",
        re.compile(rf"{_ZH_SUBJ}是(?:一名|一位)(?P<v>.+)"),
    ),
    (
        "occupation",
        re.compile(rf"{_ZH_SUBJ}是(?:一个)?(?P<v>[^，。,；;]{{0,12}}(?:{_ZH_JOB_WORDS}))"),
    ),
    ("occupation", re.compile(rf"{_ZH_POSS}(?:职业|工作|职位)是(?P<v>.+)")),
    (
        "employer",
        re.compile(rf"{_ZH_SUBJ}(?:在|就职于)(?P<v>[^，。,；;]{{2,20}}?)(?:工作|上班|任职)"),
    ),
    ("location", re.compile(rf"{_ZH_SUBJ}(?:住在|居住在|生活在|定居在|常驻)(?P<v>.+)")),
    ("timezone", re.compile(rf"{_ZH_POSS}时区(?:是|为|：|:)\s*(?P<v>[A-Za-z_/+\-:0-9]+)")),
    (
        "language",
        re.compile(rf"{_ZH_POSS}(?:母语|主要语言|第一语言|常用语言)是(?P<v>{_LANGUAGE_ALT})"),
    ),
    (
        "programming_language",
        re.compile(rf"{_ZH_POSS}(?:主要)?(?:编程语言|开发语言)是(?P<v>[A-Za-z][\w+#.-]*)"),
    ),
    (
        "cloud_platform",
        re.compile(
            r"(?:我们|我|公司|团队|我司|用户)(?:都|主要|一直|目前|现在)?"
            r"(?:用的是|在用|使用|用|部署在|跑在|托管在|上)"
            rf"(?P<v>{_CLOUD_ALT})",
            _I,
        ),
    ),
    (
        "tools",
        re.compile(
            rf"{_ZH_SUBJ}(?:平时|主要|日常|一般|经常)?(?:用|使用)(?P<v>[A-Za-z][A-Za-z0-9 .+#-]*"
            r"(?:(?:、|，|,|和|及)\s*[A-Za-z][A-Za-z0-9 .+#-]*)*)"
        ),
    ),
]


def _value(key: str, raw: str, zh: bool) -> str | None:
    raw = raw.strip()
    if key == "cloud_platform":
        return _CLOUDS.get(raw.lower(), _CLOUDS.get(raw))
    if key == "tools":
        return _tools(raw)
    if key == "language" and zh:
        return _LANGUAGES.get(raw)
    if key == "timezone":
        zone = raw.rstrip(".")
        return zone if timezone_valid(zone) else None
    if zh:
        value = _cut_zh(raw, 20)
        if key == "employer" and value and (value in _NOT_AN_EMPLOYER_ZH or value[0] in "这那一"):
            return None
        return value
    if key == "occupation":
        raw = re.split(r"\s+(?:at|for|in|with)\s+", raw, maxsplit=1)[0]
    return _cut_en(raw, 4 if key in ("name", "location") else 6)


def profile_fields_in(text: str) -> dict[str, str]:
    """The profile fields one fact states, e.g. "I work as a backend engineer at Acme" ->
    {"occupation": "backend engineer", "employer": "Acme"}; {} for anything uncertain."""
    found: dict[str, str] = {}
    for zh, rules in ((False, _EN_RULES), (True, _ZH_RULES)):
        for key, pattern in rules:
            if key in found:
                continue
            match = pattern.search(text)
            if match is None:
                continue
            value = _value(key, match.group("v"), zh)
            # "We use AWS": a platform, not a tool list.
            if (
                key == "tools"
                and value is not None
                and all(_CLOUDS.get(v.lower()) for v in value.split(", "))
            ):
                continue
            if value is not None and value_error(key, value) is None:
                found[key] = value
            employer = match.groupdict().get("emp")
            if employer and "employer" not in found:
                emp = _cut_en(employer, 6)
                if emp is not None:
                    found["employer"] = emp
    return found
