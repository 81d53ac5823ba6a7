"""Offline graph extraction: rules over jieba part-of-speech tags (Chinese) and simple English
patterns. Deterministic, no model. Precision over recall: it proposes only what a rule can
justify, and only the relation types a phrase states outright.

Chinese (`jieba.posseg`)
    nr with a common surname (张伟, 欧阳娜娜) → person; ns → location; nt → organisation; a word
    followed by 公司/集团/大学/银行… → organisation; Latin-script words (eng: Redis, DeepSeek V4)
    → concept, or skill after a usage verb (用/使用/常用/采用/基于); nz only after a usage verb.
English
    capitalised names (mid-sentence, or sentence-initial when multi-word, camel-cased, an
    acronym or the subject of a pattern verb) → concept unless a pattern types them.
Patterns (both languages) and their relations
    works at X (在X工作/上班/任职, 就职于X)        → works_at   organisation
    lives in X (住在/生活在/位于/搬到X)           → located_in location
    uses X (用/使用/常用/采用X)                   → uses       skill
    prefers X (偏好/喜欢/偏爱X, likes/loves X)    → prefers    preference (negated: nothing)
    works on X (负责/参与/开发X项目)              → works_on   project
    goal is to X (目标是X, wants/plans to X)      → has_goal   goal
    knows X (认识X, my friend X, X is my colleague) → knows    person
    X is part of Y (X属于Y)                       → part_of
    "北京的阿里巴巴" (location 的 organisation)     → organisation located_in location
Subject of a pattern: the person (or the user: 用户/我/I/the user) named just before it in the
sentence, he/she/他/她 = the last person named; a clause that starts with the verb is about the
user. A pattern with no such subject still yields its object entity, without the relation.
Named things mentioned together in a sentence that yields no typed relation are `related_to`
(the generic type; consecutive pairs, at most 3 per sentence).

The user is one entity per scope, named 用户 or user (resolution key "user").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from core.text import CJK, jieba_posseg

from .resolution import normalise_name

_CJK_CHAR = CJK
_CJK_RE = re.compile(f"[{_CJK_CHAR}]")
_CJK_ONLY = re.compile(f"^[{_CJK_CHAR}]+$")

SELF_ZH = "用户"
SELF_EN = "user"

# Single and compound surnames, enough to tell "张伟" (a person) from jieba's other nr guesses
# ("喝咖啡" is tagged nr too).
_SURNAMES = set(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁"
    "任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武"
    "戴莫孔向汤常温康施文牛樊葛邢安齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿关兰焦俞左柳甘祝包宁尚符舒阮"
    "柯纪梅童凌毕单季裴霍涂成苗谷盛曲翁冉骆蓝路游辛靳管柴蒙鲍华喻祁蒲房滕屈饶解牟艾尤阳时穆农司卓古"
    "吉缪简车项连芦麦褚娄窦戚岑景党宫费卜冷晏席卫米柏宗瞿桂全佟应臧闵苟邬边卞姬师和仇栾隋商刁沙荣巫"
    "寇桑郎甄丛仲虞敖巩明佘池乐匡钮鞠"
)
_COMPOUND_SURNAMES = (
    "欧阳",
    "司马",
    "上官",
    "诸葛",
    "东方",
    "皇甫",
    "尉迟",
    "公孙",
    "慕容",
    "长孙",
    "令狐",
    "司徒",
    "夏侯",
    "宇文",
    "独孤",
)
_ORG_SUFFIX_WORDS = (
    "有限公司",
    "公司",
    "集团",
    "银行",
    "大学",
    "学院",
    "研究院",
    "研究所",
    "实验室",
    "医院",
    "交易所",
)
# Words that look like names to the tagger or the regexes but name nothing worth a node.
_LATIN_STOP = frozenset(
    {
        "api", "url", "uri", "http", "https", "json", "xml", "html", "id", "ok", "vs", "etc",
        "am", "pm", "ms", "kb", "mb", "gb", "tb", "km", "kg", "px", "min", "qps", "tps", "cpu",
        "gpu", "ram", "ui", "ux", "faq", "todo", "e2e", "dict", "string", "true", "false", "null",
        "none", "yes", "no", "q1", "q2", "q3", "q4", "tbd", "fyi", "asap", "eod", "ai",
    }
)  # fmt: skip
_EN_NOT_NAMES = frozenset(
    {
        "the", "a", "an", "this", "that", "these", "those", "today", "yesterday", "tomorrow",
        "tonight", "we", "he", "she", "they", "it", "i", "my", "our", "his", "her", "their",
        "its", "also", "but", "and", "or", "so", "then", "when", "after", "before", "if",
        "because", "next", "last", "every", "on", "in", "at", "for", "with", "from", "by",
        "user", "users", "the user", "you", "your", "there", "here", "what", "why", "how",
        "who", "where", "which", "please", "note", "monday", "tuesday", "wednesday", "thursday",
        "friday", "saturday", "sunday", "january", "february", "march", "april", "may", "june",
        "july", "august", "september", "october", "november", "december", "mr", "mrs", "ms",
        "dr", "yes", "no", "ok", "hi", "hello", "thanks", "always", "never", "sometimes",
        "usually", "now", "currently", "recently", "still", "just", "only", "maybe", "perhaps",
    }
)  # fmt: skip
_ZH_PLACE_STOP = frozenset(
    {"这里", "那里", "家里", "家", "公司", "单位", "团队", "本地", "现场", "外地", "国外", "国内",
     "这家公司", "那家公司", "同一家公司", "一家公司", "大厂", "小公司", "线上", "线下", "远程"}
)  # fmt: skip
_SELF_ZH_WORDS = ("用户", "我")
_PRONOUNS_ZH = ("他", "她")


@dataclass
class EntityDraft:
    name: str
    entity_type: str
    confident: bool = True
    description: str = ""
    memory_ids: list[int] = field(default_factory=list)
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass
class RelationDraft:
    source: int  # index into GraphDraft.entities
    target: int
    relation_type: str
    memory_id: int | None = None
    description: str = ""


@dataclass
class GraphDraft:
    """What an extractor proposes: entities (deduplicated by resolution key) and relations."""

    entities: list[EntityDraft] = field(default_factory=list)
    relations: list[RelationDraft] = field(default_factory=list)
    _index: dict[tuple[str, str], int] = field(default_factory=dict)
    _guessed: dict[str, int] = field(default_factory=dict)
    _relation_keys: set[tuple[int, int, str]] = field(default_factory=set)

    def entity(
        self,
        name: str,
        entity_type: str,
        memory_id: int | None,
        *,
        confident: bool = True,
        description: str = "",
        properties: dict[str, Any] | None = None,
    ) -> int:
        """The index of the draft for this thing, created or merged (a guess joins a typed one)."""
        name = name.strip()
        key = normalise_name(name, entity_type)
        found = self._index.get((key, entity_type))
        if found is None and not confident:
            found = next((i for (k, _t), i in self._index.items() if k == key), None)
        if found is None and confident and key in self._guessed:
            # A guess made earlier now has evidence of its type: upgrade it.
            found = self._guessed.pop(key)
            draft = self.entities[found]
            del self._index[(key, draft.entity_type)]
            draft.entity_type, draft.confident = entity_type, True
            self._index[(key, entity_type)] = found
        if found is None:
            found = len(self.entities)
            self.entities.append(EntityDraft(name, entity_type, confident))
            self._index[(key, entity_type)] = found
            if not confident:
                self._guessed[key] = found
        draft = self.entities[found]
        if memory_id is not None and memory_id not in draft.memory_ids:
            draft.memory_ids.append(memory_id)
        if description and description not in draft.description:
            draft.description = f"{draft.description}\n{description}".strip()
        if properties:
            draft.properties.update(properties)
        return found

    def relate(
        self,
        source: int,
        target: int,
        relation_type: str,
        memory_id: int | None,
        description: str = "",
    ) -> None:
        if source == target or (source, target, relation_type) in self._relation_keys:
            return
        self._relation_keys.add((source, target, relation_type))
        self.relations.append(RelationDraft(source, target, relation_type, memory_id, description))


# --- shared helpers ---------------------------------------------------------------------------

_SENTENCE_SPLIT = re.compile(r"(?<=[。！？；!?;\n])|(?<=\.)(?=\s|$)")


# The longest piece of a sentence read at once. The rules run in time that grows faster than a
# sentence's length on some texts (a name pattern tried from every letter of one long word;
# jieba's part-of-speech HMM over a long run of characters it does not know): one 32,000-character
# memory with no full stop took minutes. Real sentences are far shorter; a longer one is read in
# pieces, cut at its last space or comma before the limit (a relation across the cut is lost).
MAX_SENTENCE_CHARS = 400
# How much of a memory jieba reads with its HMM, which guesses words its dictionary lacks from
# runs of single characters: ~1 ms per character of such a run ("哈哈哈…", 32,000 of them took
# 35 s). Past it (a memory longer than any note, most often a pasted document), the rest is cut
# by the dictionary alone.
HMM_CHARS = 2000
_PIECE_CUT = re.compile(r"[\s,，、:：]")


def _pieces(sentence: str) -> list[str]:
    pieces = []
    while len(sentence) > MAX_SENTENCE_CHARS:
        cuts = [m.end() for m in _PIECE_CUT.finditer(sentence, 1, MAX_SENTENCE_CHARS)]
        cut = cuts[-1] if cuts else MAX_SENTENCE_CHARS
        pieces.append(sentence[:cut].strip())
        sentence = sentence[cut:]
    return [p for p in (*pieces, sentence.strip()) if p]


def sentences(text: str) -> list[str]:
    """Sentences (a "." ends one only before a space or the end: "3.13", "Node.js" stay whole),
    a long one in pieces of at most MAX_SENTENCE_CHARS."""
    return [p for s in _SENTENCE_SPLIT.split(text) if s and s.strip() for p in _pieces(s.strip())]


def is_chinese(text: str) -> bool:
    cjk = len(_CJK_RE.findall(text))
    latin_words = len(re.findall(r"[A-Za-z]+", text))
    return cjk > 0 and cjk >= latin_words


def _pseg() -> Any:
    return jieba_posseg()


@dataclass
class Mention:
    start: int
    end: int
    index: int  # entity draft index
    kind: str  # "person", "self", "named"


class _Sentence:
    """One sentence being read: the entity mentions found so far, in text order."""

    def __init__(self, draft: GraphDraft, memory_id: int, last_person: list[int]) -> None:
        self.draft = draft
        self.memory_id = memory_id
        self.mentions: list[Mention] = []
        self.typed_relation = False
        self.last_person = last_person  # shared across the sentences of one memory

    def add(
        self,
        name: str,
        entity_type: str,
        start: int,
        end: int,
        *,
        confident: bool = True,
        kind: str = "named",
    ) -> int:
        idx = self.draft.entity(name, entity_type, self.memory_id, confident=confident)
        self.mentions.append(Mention(start, end, idx, kind))
        self.mentions.sort(key=lambda m: m.start)
        if kind == "person":
            self.last_person[:] = [idx]
        return idx

    def relate(self, source: int | None, target: int, relation_type: str) -> None:
        if source is None:
            return
        self.typed_relation = True
        self.draft.relate(source, target, relation_type, self.memory_id)

    def subject_before(self, pos: int, text: str, self_name: str, clause_start: bool) -> int | None:
        """Who does what the phrase at `pos` says: the person or user named last before it."""
        before = [m for m in self.mentions if m.end <= pos and m.kind in ("person", "self")]
        if before:
            return before[-1].index
        if clause_start:
            return self.draft.entity(self_name, "person", self.memory_id)
        return None

    def cooccurrence(self) -> None:
        """Named things mentioned together, when no rule related anything in this sentence."""
        if self.typed_relation:
            return
        named: list[int] = []
        for m in self.mentions:
            if m.kind == "named" and m.index not in named:
                named.append(m.index)
        for a, b in list(pairwise(named))[:3]:
            self.draft.relate(a, b, "related_to", self.memory_id, "mentioned together")


# --- Chinese ----------------------------------------------------------------------------------

_ZH_CLAUSE_LEAD = re.compile(
    r"^(?:今天|昨天|明天|现在|目前|最近|平时|一直|也|还|都|正在|已经|后来|之后|然后|并且|而且|同时|另外|此外|通常|经常|总是|更|比较|非常|特别|很)*"
)
_ZH_WORKS_AT = [
    re.compile(rf"在([{_CJK_CHAR}A-Za-z0-9&·]{{2,20}}?)(?:工作|上班|任职|就职|实习)"),
    re.compile(
        rf"(?:就职于|任职于|供职于|受雇于|入职了?|加入了?)([{_CJK_CHAR}A-Za-z0-9&·]{{2,20}})"
    ),
]
_ZH_LOCATED = re.compile(
    rf"(?:住在|居住在|住于|生活在|定居在|定居于|位于|坐落于|搬到了?|搬去了?|常驻)([{_CJK_CHAR}]{{2,15}})"
)
_ZH_PREFERS = re.compile(
    r"(?:偏好|喜欢|偏爱|更喜欢|钟爱|倾向于|爱喝|爱吃)([^，。；！？、,.;!?\n]{1,30})"
)
_ZH_USES = re.compile(
    r"(?:使用|采用|常用|改用|换成|基于|借助|依赖|用)\s*"
    r"([A-Za-z][A-Za-z0-9.+#_-]*(?:\s+[A-Z][a-z][A-Za-z0-9.+#_-]*)*(?:\s+[vV]?\d[\d.]*)?(?:\s*(?:和|与|、|及|以及|,|，)\s*[A-Za-z][A-Za-z0-9.+#_-]*(?:\s+[A-Z][a-z][A-Za-z0-9.+#_-]*)*(?:\s+[vV]?\d[\d.]*)?)*)"
)
_ZH_PROJECT = re.compile(
    rf"(?:负责|参与|开发|在做|正在做|主导|维护|推进)(?:了)?([{_CJK_CHAR}A-Za-z0-9_\-]{{2,20}}?项目)"
)
_ZH_GOAL = re.compile(r"(?:目标是|目标为|目标：|目标:|目的是)\s*([^。；！？\n]{2,60})")
_ZH_KNOWS = [
    re.compile(rf"认识([{_CJK_CHAR}]{{2,4}})"),
    re.compile(
        rf"(?:用户|我)的(?:朋友|同事|同学|老师|导师|上司|领导|老板|搭档|队友)([{_CJK_CHAR}]{{2,4}})"
    ),
    re.compile(
        rf"([{_CJK_CHAR}]{{2,4}})是(?:用户|我)的(?:朋友|同事|同学|老师|导师|上司|领导|老板|搭档|队友)"
    ),
]
_ZH_PART_OF = re.compile(
    rf"([{_CJK_CHAR}A-Za-z0-9]{{2,20}})(?:属于|隶属于|是)([{_CJK_CHAR}A-Za-z0-9]{{2,20}}?)的(?:一部分|子公司|成员|分支)"
)
_VERSION = re.compile(r"^[vV]?\d+(?:\.\d+)*[a-z]?$")


def _is_person_name(word: str) -> bool:
    if not _CJK_ONLY.match(word) or not 2 <= len(word) <= 4:
        return False
    return word[0] in _SURNAMES or word[:2] in _COMPOUND_SURNAMES


def _latin_ok(word: str) -> bool:
    w = word.lower()
    if len(w) < 2 or w in _LATIN_STOP or not re.search(r"[a-z]", w):
        return False
    # "Q3", "V4", "H100"-style codes alone are versions/quarters/units, not things.
    return not re.fullmatch(r"[a-z]\d+[a-z]?", w)


def _clean_zh_object(text: str) -> str:
    return text.strip().strip("的了着过吧呢啊")


def _extract_zh(sentence: str, s: _Sentence, *, hmm: bool = True) -> None:
    tokens = [(t.word, t.flag) for t in _pseg().cut(sentence, HMM=hmm)]
    spans: list[tuple[str, str, int, int]] = []
    pos = 0
    for word, flag in tokens:
        spans.append((word, flag, pos, pos + len(word)))
        pos += len(word)

    # Self references and people first: they are the subjects of what follows.
    for word, _flag, start, end in spans:
        if word in _SELF_ZH_WORDS:
            s.add(SELF_ZH, "person", start, end, kind="self")
        elif word in _PRONOUNS_ZH and s.last_person:
            s.mentions.append(Mention(start, end, s.last_person[0], "person"))
    consumed: set[int] = set()  # Latin words already part of a multi-word name
    for i, (word, flag, start, end) in enumerate(spans):
        nxt = spans[i + 1][0] if i + 1 < len(spans) else ""
        if i in consumed:
            continue
        if flag.startswith("nr") and flag != "nrt" and _is_person_name(word):
            s.add(word, "person", start, end, kind="person")
        elif flag == "ns" and len(word) >= 2 and word not in _ZH_PLACE_STOP:
            s.add(word, "location", start, end)
        elif flag == "nt" and len(word) >= 2:
            s.add(word, "organization", start, end)
        elif nxt in _ORG_SUFFIX_WORDS and flag in ("nz", "nrt", "nt", "n", "eng", "j"):
            s.add(word + nxt, "organization", start, end + len(nxt))
        elif flag == "eng" and _latin_ok(word):
            name, stop = word, end
            j = i + 1
            while True:
                # "Spring Boot", "Google Cloud": capitalised words after a name, one space
                # apart, are one name (jieba cuts them apart at the space).
                k = j + 1 if j < len(spans) and spans[j][0] == " " else j
                if k == j or k >= len(spans) or spans[k][1] != "eng":
                    break
                nxt_word = spans[k][0]
                # Title-case words only: "Binance USDT" is an exchange and a coin.
                if not nxt_word[:1].isupper() or nxt_word.isupper() or _VERSION.match(nxt_word):
                    break
                name, stop = f"{name} {spans[k][0]}", spans[k][3]
                consumed.update({j, k})
                j = k + 1
            # "DeepSeek V4": a version right after a name belongs to it.
            while j < len(spans) and spans[j][0].isspace():
                j += 1
            if j < len(spans) and _VERSION.match(spans[j][0]) and spans[j][1] in ("eng", "m"):
                name, stop = f"{name} {spans[j][0]}", spans[j][3]
            s.add(name, "concept", start, stop, confident=False)
    s.mentions.sort(key=lambda m: m.start)

    def clause_start(pos: int) -> bool:
        head = re.split(r"[，,：:]", sentence[:pos])[-1]
        return not _ZH_CLAUSE_LEAD.sub("", head).strip()

    def subject(pos: int) -> int | None:
        return s.subject_before(pos, sentence, SELF_ZH, clause_start(pos))

    for pattern in _ZH_WORKS_AT:
        for m in pattern.finditer(sentence):
            place = _clean_zh_object(m.group(1))
            location = None
            if "的" in place:
                head, place = place.rsplit("的", 1)
                if head and head not in _ZH_PLACE_STOP and 2 <= len(head) <= 10:
                    location = s.add(head, "location", m.start(1), m.start(1) + len(head))
            if len(place) < 2 or place in _ZH_PLACE_STOP:
                continue
            org = s.add(place, "organization", m.start(1), m.end(1))
            s.relate(subject(m.start()), org, "works_at")
            if location is not None:
                s.relate(org, location, "located_in")
    for m in _ZH_LOCATED.finditer(sentence):
        place = _clean_zh_object(m.group(1).split("的")[0])
        if len(place) < 2 or place in _ZH_PLACE_STOP:
            continue
        loc = s.add(place, "location", m.start(1), m.start(1) + len(place))
        # "公司位于深圳": a named thing right before 位于 is what is located.
        before = [x for x in s.mentions if x.end <= m.start() and x.index != loc]
        src = before[-1].index if before and before[-1].end == m.start() else subject(m.start())
        s.relate(src, loc, "located_in")
    for m in _ZH_USES.finditer(sentence):
        for tool in re.split(r"\s*(?:和|与|、|及|以及|,|，)\s*", m.group(1)):
            tool = tool.strip()
            if tool and _latin_ok(tool.split()[0]):
                idx = s.add(tool, "skill", m.start(1), m.end(1))
                s.relate(subject(m.start()), idx, "uses")
    for i, (word, flag, start, _end) in enumerate(spans):
        # Chinese-script tools ("使用飞书"): an nz word right after a usage verb.
        if flag == "nz" and i > 0 and spans[i - 1][0] in ("使用", "采用", "常用", "用", "改用"):
            idx = s.add(word, "skill", start, start + len(word))
            s.relate(subject(spans[i - 1][2]), idx, "uses")
    for m in _ZH_PREFERS.finditer(sentence):
        lead = sentence[max(0, m.start() - 2) : m.start()]
        if "不" in lead or "没" in lead:
            continue  # 不喜欢 / 并不偏好: no relation type says "dislikes"
        obj = _clean_zh_object(m.group(1))
        tool = re.match(r"^(?:用|使用)\s*([A-Za-z][A-Za-z0-9.+#_-]*)", obj)
        if tool and _latin_ok(tool.group(1)):
            idx = s.add(tool.group(1), "skill", m.start(1), m.end(1))
        elif len(obj) >= 2:
            idx = s.add(obj, "preference", m.start(1), m.end(1))
        else:
            continue
        s.relate(subject(m.start()), idx, "prefers")
    for m in _ZH_PROJECT.finditer(sentence):
        idx = s.add(m.group(1), "project", m.start(1), m.end(1))
        s.relate(subject(m.start()), idx, "works_on")
    for m in _ZH_GOAL.finditer(sentence):
        goal = _clean_zh_object(re.split(r"[，,]", m.group(1))[0])
        if len(goal) >= 2:
            idx = s.add(goal, "goal", m.start(1), m.end(1))
            s.relate(subject(m.start()), idx, "has_goal")
    for n, pattern in enumerate(_ZH_KNOWS):
        for m in pattern.finditer(sentence):
            name = m.group(1)
            if not _is_person_name(name):
                continue
            person = s.add(name, "person", m.start(1), m.end(1), kind="person")
            who = s.subject_before(m.start(), sentence, SELF_ZH, True) if n == 0 else None
            me = s.draft.entity(SELF_ZH, "person", s.memory_id)
            s.relate(who if who is not None and who != person else me, person, "knows")
    for m in _ZH_PART_OF.finditer(sentence):
        part = _named_at(s, m.start(1), m.end(1))
        whole = _named_at(s, m.start(2), m.end(2))
        if part is not None and whole is not None:
            s.relate(part, whole, "part_of")
    s.cooccurrence()


def _named_at(s: _Sentence, start: int, end: int) -> int | None:
    """The entity mentioned inside [start, end) nearest its end, if any."""
    inside = [m for m in s.mentions if m.start >= start and m.end <= end]
    return inside[-1].index if inside else None


# --- English ----------------------------------------------------------------------------------

_NAME = (
    r"[A-Z][\w&'+#.-]*[\w+#](?:\s+(?:of\s+|&\s+)?[A-Z][\w&'+#.-]*[\w+#])*(?:\s+v?\d+(?:\.\d+)*)?"
)
_NAME_RE = re.compile(rf"(?<![\w.])(?:{_NAME}|[A-Z])(?![\w])")
_ADVERB = r"(?:\s+(?:now|also|currently|still|mostly|usually|often|recently|really|actually))?"
_NEG = re.compile(r"\b(?:not|never|don't|doesn't|didn't|do not|does not|no longer)\s+$", re.I)
# Runs of spaces here and in _AUX_TAIL are tried from their first space only (the lookbehind):
# from each of them, a long run took quadratic time.
_STOP_PHRASE = re.compile(
    r"(?<!\s)\s+(?:but|because|although|though|while|when|since|so|which|who|and then|if|unless|as)\b.*$",
    re.I,
)
_SELF_EN = re.compile(r"\b(?:I|[Mm]e|[Mm]y|[Tt]he user|[Uu]ser)\b")
_PRONOUN_EN = re.compile(r"\b(?:he|she|He|She)\b")
_KIN = (
    r"friend|colleague|coworker|co-worker|manager|boss|mentor|teammate|wife|husband|partner|"
    r"sister|brother|mother|father|son|daughter"
)
_EN_IS_KIN = re.compile(rf"({_NAME})\s+is\s+(?:my|the user's|our)\s+(?:{_KIN})\b")
_ROLE = (
    r"engineer|developer|programmer|architect|designer|manager|lead|analyst|scientist|"
    r"researcher|trader|student|teacher|professor|doctor|nurse|lawyer|consultant|founder|"
    r"co-founder|ceo|cto|cfo|intern|administrator|admin|writer|editor|accountant|recruiter|"
    r"director|owner|investor|tester|marketer|salesperson|colleague|friend|coworker"
)
# "Bob is a backend engineer": a name with a person's role is a person.
_EN_IS_ROLE = re.compile(
    rf"({_NAME})\s+is\s+(?:a|an|the|our|my|their)\s+(?:[\w-]+\s+){{0,3}}?(?:{_ROLE})s?\b", re.I
)
# "Alice asked Bob …": who says, asks or tells things is a person, and so is who is told.
_SPEECH = (
    r"asked|asks|told|tells|said|says|suggested|suggests|mentioned|replied|agreed|promised|"
    r"reminded|thanked|emailed|messaged|called|invited|hired|reviewed|approved"
)
_EN_SPEAKER = re.compile(rf"(?<![\w.])({_NAME})\s+(?:{_SPEECH})\b")
_EN_ADDRESSEE = re.compile(
    rf"\b(?:asked|told|reminded|thanked|emailed|messaged|called|invited|hired)\s+({_NAME})\b"
)
_EN_PATTERNS: list[tuple[str, re.Pattern[str], str]] = [
    (
        "works_at",
        re.compile(
            rf"\b(?:works?|working|worked|employed|interns?|interning)\s+(?:at|for|by)\s+(?:the\s+)?({_NAME})"
        ),
        "organization",
    ),
    ("works_at", re.compile(rf"\b(?:joined|joins)\s+(?:the\s+)?({_NAME})"), "organization"),
    (
        "located_in",
        re.compile(
            rf"\b(?:lives?|living|lived|resides?|residing|moved|relocated|settled)\s+(?:in|to|at)\s+({_NAME})"
        ),
        "location",
    ),
    # Things are based or located somewhere too: the subject need not be a person.
    ("located_in", re.compile(rf"\b(?:based|located|headquartered)\s+in\s+({_NAME})"), "location"),
    ("knows", re.compile(rf"\b(?:knows|met|befriended)\s+({_NAME})"), "person"),
    (
        "knows",
        re.compile(rf"\b(?:{_KIN}),?\s+({_NAME})"),
        "person",
    ),
]
_EN_USES = re.compile(
    r"\b(?:uses?|using|used|codes?\s+in|writes?\s+code\s+in|programs?\s+in|relies\s+on|built\s+with|switched\s+to|works?\s+with)\s+"
    r"((?:the\s+)?[\w.+#-]+(?:\s+v?\d+(?:\.\d+)*)?(?:(?:\s*,\s*|\s+and\s+|\s+or\s+)[\w.+#-]+(?:\s+v?\d+(?:\.\d+)*)?)*)"
)
_EN_PREFERS = re.compile(
    r"\b(?:prefers?|preferred|likes?|loves?|enjoys?|favou?rs?)\s+([^.,;!?\n]{2,80})", re.I
)
_EN_WORKS_ON = re.compile(
    r"\b(?:works?|working|worked)\s+on\s+(?:the\s+|a\s+|an\s+|his\s+|her\s+|my\s+)?([^.,;!?\n]{2,60})",
    re.I,
)
_EN_GOAL = re.compile(
    r"\b(?:(?:goal|aim|objective|plan)\s+is\s+to|wants?\s+to|plans?\s+to|hopes?\s+to|aims?\s+to)\s+([^.,;!?\n]{2,80})",
    re.I,
)
_EN_PART_OF = re.compile(
    rf"({_NAME})\s+is\s+(?:a\s+)?(?:part|member|subsidiary|division|unit)\s+of\s+(?:the\s+)?({_NAME})"
)
_EN_ARTICLES = frozenset({"the", "a", "an", "my", "his", "her", "their", "our", "it", "them"})
_HUMAN_VERB = re.compile(
    r"\b(?:works?|working|worked|employed|interns?|interning|joined|joins|lives?|living|lived|"
    r"resides?|residing|moved|relocated|settled|knows|met|befriended)\b"
)
_AUX_TAIL = re.compile(
    r"(?<!\s)(?:\s+(?:is|was|are|were|has been|had been|is now|now|also|currently|still|mostly|"
    r"usually|often|recently|really|actually))+$"
)


def _short_phrase(text: str, max_words: int) -> str:
    text = _STOP_PHRASE.sub("", text.strip())
    words = text.split()[:max_words]
    return " ".join(words).strip(" '\"")


def _en_name_ok(name: str) -> bool:
    first = name.split()[0]
    if name.lower() in _EN_NOT_NAMES or first.lower() in _EN_NOT_NAMES:
        return False
    return _latin_ok(first) or len(name.split()) > 1


def _extract_en(sentence: str, s: _Sentence) -> None:
    for m in _SELF_EN.finditer(sentence):
        s.add(SELF_EN, "person", m.start(), m.end(), kind="self")
    for m in _PRONOUN_EN.finditer(sentence):
        if s.last_person:
            s.mentions.append(Mention(m.start(), m.end(), s.last_person[0], "person"))
    first_word_end = len(sentence) - len(sentence.lstrip())
    verbs_after = re.compile(
        rf"^{_ADVERB}\s+(?:works?|worked|lives?|lived|moved|joined|knows|met|prefers?|likes?|loves?|enjoys?|uses?|used|is|was|has|wants?|plans?)\b"
    )

    def clause_start(pos: int) -> bool:
        head = re.split(r"[,:]", sentence[:pos])[-1].strip()
        return not head or head.lower() in ("also", "now", "currently", "usually", "often")

    def subject(pos: int, human: bool) -> int | None:
        """The name right before the verb (a person, when the verb says so), else the user."""
        head = _AUX_TAIL.sub("", sentence[:pos].rstrip())
        m = re.search(rf"({_NAME})$", head)
        if m and _en_name_ok(m.group(1)):
            if human:
                return s.add(m.group(1), "person", m.start(1), m.end(1), kind="person")
            return s.add(m.group(1), "concept", m.start(1), m.end(1), confident=False)
        return s.subject_before(pos, sentence, SELF_EN, clause_start(pos))

    for m in _EN_IS_KIN.finditer(sentence):
        if _en_name_ok(m.group(1)):
            person = s.add(m.group(1), "person", m.start(1), m.end(1), kind="person")
            me = s.draft.entity(SELF_EN, "person", s.memory_id)
            if person != me:
                s.relate(me, person, "knows")
    for pattern in (_EN_IS_ROLE, _EN_SPEAKER, _EN_ADDRESSEE):
        for m in pattern.finditer(sentence):
            name = m.group(1)
            if _en_name_ok(name) and not _SELF_EN.fullmatch(name):
                s.add(name, "person", m.start(1), m.end(1), kind="person")
    # People first ("my friend Carol ... works for Stripe"): they are the subjects of the rest.
    for relation_type, pattern, target_type in sorted(_EN_PATTERNS, key=lambda p: p[0] != "knows"):
        for m in pattern.finditer(sentence):
            lead = sentence[: m.start()]
            if _NEG.search(lead):
                continue
            name = m.group(1)
            if not _en_name_ok(name):
                continue
            kind = "person" if target_type == "person" else "named"
            target = s.add(name, target_type, m.start(1), m.end(1), kind=kind)
            src = subject(m.start(), bool(_HUMAN_VERB.match(sentence, m.start())))
            if relation_type == "knows" and src == target:
                continue
            s.relate(src, target, relation_type)
    for m in _EN_USES.finditer(sentence):
        if _NEG.search(sentence[: m.start()]):
            continue
        src = subject(m.start(), False)
        for tool in re.split(r"\s*,\s*|\s+and\s+|\s+or\s+", m.group(1)):
            tool = re.sub(r"^the\s+", "", tool.strip(), flags=re.I).rstrip(".-")
            if not tool or tool.lower() in _EN_ARTICLES or not _latin_ok(tool.split()[0]):
                continue
            if tool.lower() in _EN_NOT_NAMES:
                continue
            idx = s.add(tool, "skill", m.start(1), m.end(1))
            s.relate(src, idx, "uses")
    for m in _EN_PREFERS.finditer(sentence):
        if _NEG.search(sentence[: m.start()]):
            continue
        obj = _short_phrase(m.group(1), 8)
        obj = re.sub(r"^to\s+", "", obj, flags=re.I)
        if len(obj) < 2 or obj.lower() in _EN_ARTICLES:
            continue
        idx = s.add(obj, "preference", m.start(1), m.end(1))
        s.relate(subject(m.start(), True), idx, "prefers")
    for m in _EN_WORKS_ON.finditer(sentence):
        obj = re.sub(r"\s+project$", "", _short_phrase(m.group(1), 5), flags=re.I)
        if len(obj) < 2 or obj.lower() in _EN_ARTICLES:
            continue
        idx = s.add(obj, "project", m.start(1), m.end(1))
        s.relate(subject(m.start(), True), idx, "works_on")
    for m in _EN_GOAL.finditer(sentence):
        if _NEG.search(sentence[: m.start()]):
            continue
        goal = _short_phrase(m.group(1), 10)
        if len(goal) >= 2:
            idx = s.add(goal, "goal", m.start(1), m.end(1))
            s.relate(subject(m.start(), True), idx, "has_goal")
    for m in _EN_PART_OF.finditer(sentence):
        if _en_name_ok(m.group(1)) and _en_name_ok(m.group(2)):
            part = s.add(m.group(1), "concept", m.start(1), m.end(1), confident=False)
            whole = s.add(m.group(2), "concept", m.start(2), m.end(2), confident=False)
            s.relate(part, whole, "part_of")
    # Names no pattern consumed: mid-sentence capitalised runs, or a sentence-initial one that
    # looks like a name rather than a capitalised verb ("Prefers concise answers").
    taken = [(x.start, x.end) for x in s.mentions]
    for m in _NAME_RE.finditer(sentence):
        name = m.group(0)
        if any(a <= m.start() < b or a < m.end() <= b for a, b in taken):
            continue
        if not _en_name_ok(name):
            continue
        if m.start() == first_word_end:
            camel = bool(re.search(r"[a-z][A-Z]|\d", name.split()[0]))
            acronym = name.split()[0].isupper() and len(name.split()[0]) >= 2
            multi = len(name.split()) > 1
            if not (camel or acronym or multi or verbs_after.match(sentence[m.end() :])):
                continue
        s.add(name, "concept", m.start(), m.end(), confident=False)
    s.cooccurrence()


# --- who a statement is about ------------------------------------------------------------------

# "Alice asked for …", "Bob prefers …": a name, then what people (not things) do or want.
_EN_THIRD_PARTY = re.compile(
    rf"^\s*({_NAME})\s+(?:{_SPEECH}|wants?|wanted|needs?|needed|requests?|requested|prefers?|"
    r"preferred|likes?|liked|loves?|dislikes?|hates?|expects?)\b"
)


def third_party_subject(text: str) -> str | None:
    """The person other than the user a statement is about, when it opens with one ("Alice
    asked for a weekly summary", "张伟喜欢喝茶"), else None: the persona must not take another
    speaker's wishes for the user's own."""
    m = _EN_THIRD_PARTY.match(text)
    if m:
        name = m.group(1)
        if (
            _en_name_ok(name)
            and not _SELF_EN.fullmatch(name)
            and name.lower()
            not in (
                "he",
                "she",
            )
        ):
            return name
        return None
    if not is_chinese(text):
        return None
    # Only its opening is cut into words: the first one is all that is read, and jieba cuts a
    # whole run of characters before it yields its first word (seconds for a long one).
    for token in _pseg().cut(text.strip()[:100]):
        word, flag = token.word, token.flag
        if word.isspace():
            continue
        if flag.startswith("nr") and flag != "nrt" and _is_person_name(word):
            return str(word)
        return None
    return None


# --- entry point ------------------------------------------------------------------------------


def extract_offline(memories: list[tuple[int, str]]) -> GraphDraft:
    """(memory_id, text) pairs -> a draft graph, every entity and relation tied to its memory."""
    draft = GraphDraft()
    for memory_id, text in memories:
        last_person: list[int] = []
        read = 0  # characters of this memory read so far
        for sentence in sentences(text):
            s = _Sentence(draft, memory_id, last_person)
            if is_chinese(sentence):
                _extract_zh(sentence, s, hmm=read < HMM_CHARS)
            else:
                _extract_en(sentence, s)
            read += len(sentence)
    return draft
