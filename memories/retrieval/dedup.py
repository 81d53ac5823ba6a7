"""When two near-identical memories are *not* duplicates.

Embeddings put "cache hit rate rose from 75% to 92%" and "…from 92% to 75%" at cosine 0.96+,
"the user likes tea" next to "the user does not like tea", and "deploy notes for service alpha"
next to "…beta". A dedup that trusts similarity alone swallows the newer fact (the data-loss
bug users report most about comparable memory services). So a write is only a duplicate when it is
similar enough **and** the old memory already says everything it says: the same numbers, dates,
negations, preferences and qualifiers, every content word of it (Snowball stems and a few
synonyms for English, jieba words for Chinese), and each of its clauses as a run of an old clause
in the same order (who does what to whom; active ↔ passive allowed). What passes: the same words
re-punctuated, with clauses or adverbials moved, with filler removed, or in the passive voice,
and English words swapped for ones WordNet says the old word states (a synonym in a frequent
sense of both; a more general word where saying less is implied: wordnet.py, _word_swaps).
Anything else is written (and linked to the near memory, services.memory_create): a rewording
that changes words otherwise is written even when the embedding finds it equivalent. When in
doubt, the write is kept. Measured on public NLI pairs: docs/search.md, "Dedup safety".
"""

from __future__ import annotations

import difflib
import itertools
import re
import unicodedata
from collections import Counter
from functools import lru_cache

from core.text import combining_marks, han_pieces

from .text import case_carries_meaning, tokenize

# A sign belongs to its number ("-5°C" is not "5°C") unless a word or a number comes right
# before it ("2-3", "v1-2" are ranges and names).
_NUMBER = re.compile(r"(?:(?<![\w.])[-+\u2212])?\d+(?:[.,:/\-]\d+)*\s*%?")
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
    return [
        re.sub(r"\s+", "", m.group(0)).rstrip(".,").replace("\u2212", "-").lstrip("+")
        for m in _NUMBER.finditer(norm)
    ]


# A word of letters and digits, as written (the case kept).
_CASED_WORD = re.compile(r"[^\W_]+")


def case_changed(new: str, old: str) -> str | None:
    """A word of `new` that `old` writes with other capitals, where case carries meaning
    (case_carries_meaning, on either side): "ends in x7Qz" is not "ends in x7QZ"."""
    old_words = set(_CASED_WORD.findall(unicodedata.normalize("NFKC", old)))
    by_lower: dict[str, list[str]] = {}
    for word in old_words:
        by_lower.setdefault(word.casefold(), []).append(word)
    for word in _CASED_WORD.findall(unicodedata.normalize("NFKC", new)):
        if word in old_words:
            continue
        others = by_lower.get(word.casefold(), [])
        if any(case_carries_meaning(word) or case_carries_meaning(o) for o in others):
            return word
    return None


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


# --- "says nothing the old one does not": token alignment -------------------------------------
# Similarity alone cannot tell "prefers short answers and dislikes long ones" from its reversal
# (same words, cosine 0.99), so a skip also needs every statement of the new text to be found in
# the old one: each clause's content words, in the same order (who does what to whom), with the
# same negation, preference and qualifier words around them. Measured on public NLI pairs
# (docs/search.md, "Dedup safety").

# Words that state no fact of their own here: articles, "to be", fillers.
_EN_FILLER = frozenset(
    [
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "there",
        "here",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "which",
        "who",
        "whom",
        "also",
        "just",
        "really",
        "currently",
        "now",
        "then",
        "so",
        "very",
        "quite",
        "one",
    ]
)
# A lower-case key of one spelling → the spelling it is compared as (irregular plurals, a few
# everyday synonyms). Small on purpose: a wrong entry makes two different facts one.
_EN_SYNONYMS = {
    "men": "man",
    "women": "woman",
    "children": "child",
    "kids": "child",
    "kid": "child",
    "people": "person",
    "persons": "person",
    "guy": "man",
    "guys": "man",
    "lady": "woman",
    "ladies": "woman",
    "feet": "foot",
    "teeth": "tooth",
    "mice": "mouse",
    "large": "big",
    "little": "small",
    "quickly": "fast",
    "rapidly": "fast",
    "begins": "start",
    "begin": "start",
    "beginning": "start",
    "outdoors": "outside",
    "photograph": "photo",
    "picture": "photo",
    "automobile": "car",
    "couch": "sofa",
    "speaking": "talk",
    "speaks": "talk",
    "speak": "talk",
}
# Irregular verb forms → the base form (Snowball leaves "driven", "rode", "held" alone), so the
# passive "is being driven by" meets "drives".
_EN_IRREGULAR = {
    form: base
    for base, forms in (
        ("beat", "beaten"),
        ("bite", "bit bitten"),
        ("blow", "blew blown"),
        ("break", "broke broken"),
        ("bring", "brought"),
        ("build", "built"),
        ("buy", "bought"),
        ("catch", "caught"),
        ("choose", "chose chosen"),
        ("dig", "dug"),
        ("draw", "drew drawn"),
        ("drink", "drank drunk"),
        ("drive", "drove driven"),
        ("eat", "ate eaten"),
        ("fall", "fell fallen"),
        ("feed", "fed"),
        ("fight", "fought"),
        ("find", "found"),
        ("fly", "flew flown"),
        ("freeze", "froze frozen"),
        ("get", "got gotten"),
        ("give", "gave given"),
        ("grow", "grew grown"),
        ("hang", "hung"),
        ("hide", "hid hidden"),
        ("hold", "held"),
        ("keep", "kept"),
        ("know", "knew known"),
        ("lead", "led"),
        ("leap", "leapt"),
        ("make", "made"),
        ("meet", "met"),
        ("pay", "paid"),
        ("ride", "rode ridden"),
        ("run", "ran"),
        ("say", "said"),
        ("sell", "sold"),
        ("send", "sent"),
        ("shake", "shook shaken"),
        ("shoot", "shot"),
        ("sing", "sang sung"),
        ("sit", "sat"),
        ("sleep", "slept"),
        ("speak", "spoke spoken"),
        ("spin", "spun"),
        ("stand", "stood"),
        ("steal", "stole stolen"),
        ("strike", "struck"),
        ("sweep", "swept"),
        ("swim", "swam swum"),
        ("take", "took taken"),
        ("teach", "taught"),
        ("tear", "tore torn"),
        ("tell", "told"),
        ("think", "thought"),
        ("throw", "threw thrown"),
        ("wake", "woke woken"),
        ("wear", "wore worn"),
        ("write", "wrote written"),
    )
    for form in forms.split()
}
# Words whose presence changes what a sentence claims, in either direction: modality and
# hedges ("may", "planned"), quantifiers ("all", "some", "only"), number words, privative
# adjectives ("fake gun" is no gun). They must be the same on both sides.
_EN_QUALIFIERS = frozenset(
    [
        "may",
        "might",
        "could",
        "would",
        "should",
        "must",
        "can",
        "will",
        "shall",
        "maybe",
        "perhaps",
        "probably",
        "possibly",
        "likely",
        "almost",
        "nearly",
        "hardly",
        "barely",
        "plan",
        "plans",
        "planned",
        "planning",
        "intend",
        "intends",
        "going",
        "try",
        "tries",
        "tried",
        "trying",
        "want",
        "wants",
        "wanted",
        "all",
        "some",
        "every",
        "each",
        "any",
        "most",
        "many",
        "few",
        "several",
        "only",
        "just",
        "more",
        "less",
        "fewer",
        "both",
        "either",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "twenty",
        "thirty",
        "hundred",
        "thousand",
        "million",
        "dozen",
        "couple",
        "pair",
        "single",
        "fake",
        "toy",
        "former",
        "pretend",
        "pretending",
        "fictional",
        "imitation",
        "first",
        "last",
    ]
)
_ZH_FILLER = frozenset(
    [
        "的",
        "地",
        "得",
        "了",
        "着",
        "是",
        "就",
        "也",
        "很",
        "呢",
        "吧",
        "啊",
        "呀",
        "哦",
        "嘛",
        "啦",
        "而且",
        "并且",
        "那么",
        "这个",
        "那个",
    ]
)
_ZH_QUALIFIERS = (
    "可能",
    "可以",
    "好像",
    "似乎",
    "据说",
    "听说",
    "估计",
    "恐怕",
    "吗",
    "?",
    "也许",
    "或许",
    "大概",
    "应该",
    "必须",
    "打算",
    "计划",
    "准备",
    "想",
    "要",
    "会",
    "能",
    "所有",
    "全部",
    "都",
    "一些",
    "有些",
    "只",
    "仅",
    "几乎",
    "差点",
    "假",
    "前任",
    "第一",
    "最后",
    "一",
    "二",
    "两",
    "三",
    "四",
    "五",
    "六",
    "七",
    "八",
    "九",
    "十",
    "百",
    "千",
    "万",
    "亿",
    "多",
    "少",
)
# Words that look negative but are not a negation ("非常" very, "未来" future, "别人" others).
_ZH_NOT_NEGATION = frozenset(
    [
        "非常",
        "未来",
        "别人",
        "别的",
        "无论",
        "不仅",
        "不过",
        "不少",
        "无数",
        "莫名",
        "并非",
        "未必",
        "不但",
        "除非",
        "是非",
        "无非",
    ]
)
_ZH_NEG_CHARS = "不没无非未别勿莫"
_CLAUSE_BREAK = re.compile(r"[,;:!?。，；：！？\n]|\.(?=\s|$)|\s(?:and|but|while|whereas)\s")
_ZH_CLAUSE_WORDS = ("但是", "但", "而且", "并且", "然而", "可是")
_PASSIVE = {"by", "被", "PASSIVE"}
_EN_PARTICLES = frozenset(["up", "down", "on", "off", "out", "away", "over", "back"])
_EN_BE = frozenset(["is", "are", "was", "were", "be", "been", "being"])
_EN_PARTICIPLES = frozenset(
    form for form in _EN_IRREGULAR if form.endswith(("n", "t", "d", "g", "k", "ck"))
)
# "the trunk of a tree" → "tree trunk" (one noun of another, said either way).
# Not for amounts ("a group of") nor places and parts ("in front of", "the top of").
_EN_OF_COMPOUND = re.compile(
    r"\b(?!(?:group|lot|couple|pair|piece|number|bunch|few|front|back|top|bottom|side|middle"
    r"|edge|end|center|centre|rest|out|ahead|instead|because|kind|sort|type|part|most|all|some"
    r"|none|each|any|one|both|many|much|full)\b)([a-z]+) of (?:a |an |the )?([a-z]+)\b"
)
# "a guitar which is electric" → "electric guitar", "the boy, who is young," → "young boy".
# "a blue colored jacket" → "blue jacket", "a ball colored in red" → "red ball".
# "a shirt dyed purple", "a ball colored in red" → "purple shirt", "red ball"; then "a blue
# colored jacket", "a yellow dyed shirt" → "blue jacket", "yellow shirt".
# A noun: one word ("t-shirt" with its hyphen), or two when WordNet has them as one noun ("guinea
# pig", "water fountain"), so that an adjective goes before the whole noun, not inside it.
_EN_NOUN = r"((?:[a-z]+ )?[a-z]+(?:-[a-z]+)?)"
# "a room painted beige" is a beige room as "a shirt dyed purple" is a purple shirt.
_EN_COLORED_IN = re.compile(rf"\b{_EN_NOUN},? (?:colou?red|dyed|painted)(?: in)? ([a-z]+)\b")
_EN_COLORED = re.compile(r"\b([a-z]+) (?:colou?red|dyed)\b(?! (?:in|by|with)\b)")
# "the black and white dog", "black, pink and white uniforms" → "black white dog", "black pink
# white uniforms" (adjectives before a noun: one description, not two clauses).
_EN_ADJ_LIST = re.compile(r"\b((?:[a-z]+, )*[a-z]+),? and ([a-z]+) ([a-z]+)\b")
# "a ball, which is green and big," → "green big ball".
_EN_RELATIVE_ADJS = re.compile(
    r"\b([a-z]+),? (?:which|that|who) (?:is|are) ((?:[a-z]+, )*[a-z]+,? and [a-z]+)"
    r"(?=\s*(?:[,.;!?]|$|\s(?:is|are)\s))"
)


def _adjectives(words: list[str]) -> bool:
    from . import wordnet

    return all(
        w not in _EN_FILLER and w not in _EN_QUALIFIERS and wordnet.base_forms(w, "a")
        for w in words
    )


def _noun_group(words: str) -> tuple[str, str]:
    """(what precedes the noun, the noun) of an _EN_NOUN match: "guinea pig" is one noun,
    "a shirt" is "a " + shirt."""
    from . import wordnet

    first, _, last = words.rpartition(" ")
    if first and wordnet.base_forms(f"{first}_{last}", "n"):
        return "", words
    return (first + " " if first else ""), last


def _word_before_noun(match: re.Match[str]) -> str:
    """Group 2 put before the noun of group 1 (an _EN_NOUN): "a bridge made of rope" → "a rope
    bridge", "a guinea pig which is small" → "a small guinea pig"."""
    before, noun = _noun_group(match.group(1))
    return f"{before}{match.group(2)} {noun}"


def _adjectives_before_noun(match: re.Match[str]) -> str:
    """The same when group 2 is adjectives only ("a room painted beige"; "the male, who is dark
    skinned," → "dark skinned male": two adjectives, one description); else left as it is."""
    if not _adjectives(match.group(2).split()):
        return match.group(0)
    return _word_before_noun(match)


def _dressed_in(match: re.Match[str]) -> str:
    # "a skier dressed in black" is a skier in black; "is getting dressed in the hall" is not.
    if match.group(1) in _EN_BE or match.group(1) in ("get", "gets", "got", "getting"):
        return match.group(0)
    return f"{match.group(1)} in"


def _adj_list(match: re.Match[str]) -> str:
    from . import wordnet

    adjs = [*match.group(1).split(", "), match.group(2)]
    noun = match.group(3)
    if not _adjectives(adjs) or not wordnet.base_forms(noun, "n") or _adjectives([noun]):
        return match.group(0)
    return " ".join([*adjs, noun])


def _relative_adjs(match: re.Match[str]) -> str:
    adjs = re.split(r",? and |, ", match.group(2))
    if not _adjectives(adjs):
        return match.group(0)
    return " ".join([*adjs, match.group(1)])


# "a dog of large size" → "large dog", "a boy of young age" → "young boy".
_EN_OF_QUALITY = re.compile(r"\b([a-z]+) of ([a-z]+) (?:size|age|height|colou?r|shape)\b")
# "a bridge made of rope" → "rope bridge" (before the "of" compound below).
_EN_MADE_OF = re.compile(rf"\b{_EN_NOUN} made (?:of|from|out of) ([a-z]+)\b")
# "a rod for fishing", "a pen for cattle", "a park built for skating" → "fishing rod", "cattle
# pen", "skating park": a noun (after a determiner, maybe one adjective) for what it is for; not
# a verb ("the user waits for the bus", "the team voted for Alice").
_EN_FOR_PARTICIPLE = r"(?:made|used|built|bred|suited|designed|meant)\b"
_EN_FOR_COMPOUND = re.compile(
    r"\b((?:a|an|the|some|his|her|their|its|my|our|your|two|three|four|five|several|many)"
    rf"(?: (?!{_EN_FOR_PARTICIPLE})[a-z]+)?) (?!{_EN_FOR_PARTICIPLE})([a-z]+)"
    rf" (?:{_EN_FOR_PARTICIPLE} )?for (?:the )?([a-z]+)\b"
)


def _for_compound(match: re.Match[str]) -> str:
    from . import wordnet

    det, head, use = match.group(1), match.group(2), match.group(3)
    if (
        head in _EN_FILLER
        or head in _EN_QUALIFIERS
        or head.endswith(("ing", "ed"))
        or not wordnet.base_forms(head, "n")
        or (head.endswith("s") and wordnet.base_forms(head, "v"))
        or not (use.endswith("ing") or wordnet.base_forms(use, "n"))
    ):
        return match.group(0)
    return f"{det} {use} {head}"


_EN_RELATIVE_END = r"(?=\s*(?:[,.;!?]|$|\s(?:and|is|are)\s))"
_EN_RELATIVE_ADJ = re.compile(
    rf"\b{_EN_NOUN},? (?:which|that|who) (?:is|are) ([a-z]+){_EN_RELATIVE_END}"
)
_EN_RELATIVE_ADJ_PAIR = re.compile(
    rf"\b{_EN_NOUN},? (?:which|that|who) (?:is|are) ([a-z]+ [a-z]+){_EN_RELATIVE_END}"
)
# "worn by a man who is pushing a bike" → "worn by a man, man is pushing a bike": a relative
# clause on the last noun of a clause (nothing after it but the clause's end) says its own clause
# about that noun, which then reads as the clause "a man is pushing a bike" does. Not a relative
# in the middle ("the dog that is chasing the cat is brown": where it ends is a parse).
_EN_RELATIVE_ING = re.compile(
    r"\b([a-z]+),? (?:who|that|which) (is|are) ([a-z]+ing\b(?:(?!\b(?:is|are|was|were)\b)[^,.;!?])*)"
    r"(?=[,.;!?]|$)"
)
_EN_RELATIVE_WORDS = re.compile(r"\b(?:which|that|who)\b")
_EN_COLOUR_WORDS = re.compile(r"\b(?:colou?red|dyed|painted)\b")
_EN_DRESSED_IN = re.compile(r"\b([a-z]+) dressed (?:up )?in\b")


# Participles spelled like the verb: "is being cut / put / read / spread by".
_EN_SAME_FORM_PARTICIPLES = frozenset(
    [
        "cut",
        "put",
        "read",
        "spread",
        "hit",
        "set",
        "shut",
        "split",
        "cast",
        "beat",
        "burst",
        "hurt",
        "knit",
        "shed",
        "slit",
        "thrust",
        "upset",
    ]
)


_EN_PROGRESSIVE = re.compile(r"\b(?:is|are|was|were)(?: being)? [a-z]+ing\b")
_EN_SOME = re.compile(
    r"\b(?:some|(?:a|the) group of|a few) (?!of\b|one\b|body\b|thing\b|where\b|time\b)(?=[a-z])"
)


# The runs `_clauses` compares: Chinese characters (cut by jieba), or letters, digits and
# combining marks of any script, with apostrophes and a number's decimals or percent. Not only
# [a-z]: a reader blind to other scripts saw no word at all in "Пользователь не любит чай" and
# "Müller" as "m" + "ller", so a reversal in Russian or a changed name was "nothing new".
_RUN = re.compile(
    rf"[\u3400-\u9fff]+|(?:[^\W_\u3400-\u9fff]|')"
    rf"(?:[^\W_\u3400-\u9fff]|[{combining_marks(unspaced=True)}]|')*(?:[.%][0-9]+)*%?"
    r"|[^\w\s]"
)


def _symbol(char: str) -> bool:
    """A character that states something: a math sign, a currency, an arrow, a check mark, an
    emoji (Unicode categories S*) — "status: ✅" and "status: ❌", "x == y" and "x != y",
    "$100" and "€100" say different things in the same words. Not the backtick, which formats
    code rather than saying anything."""
    return char != "`" and unicodedata.category(char).startswith("S")


# An article comes before a noun or its adjective, never before one of these or at the end.
_NOT_AFTER_ARTICLE = frozenset(
    ["in", "on", "at", "for", "to", "of", "with", "from", "by", "and", "or", "but", "than", "as"]
)
_NEXT_WORD = re.compile(r"[^\S\n]*([a-z0-9']+)?")


def _label(run: str, part: str, end: int) -> bool:
    """Whether an "a" is a name, not the article: "plan A", "vitamin A", "an A in math", "Plan A
    is better" — at the end of its clause, or before a verb "to be" or a preposition. Read as
    the article it was dropped, and "We chose plan A" stated nothing "We chose plan B" did not."""
    if run != "a":
        return False
    following = _NEXT_WORD.match(part, end)
    word = following.group(1) if following else None
    return word is None or word in _EN_BE or word in _NOT_AFTER_ARTICLE


def _latin(run: str) -> bool:
    """Written in the Latin alphabet (diacritics allowed): read as English words (stems,
    WordNet), which leave a word of another language as it is."""
    return run.isascii() or all(
        not c.isalpha() or unicodedata.name(c, "").startswith("LATIN") for c in run
    )


def _zh_words(run: str) -> list[str]:
    from .text import search_tokenizer

    out: list[str] = []
    for word in (w for piece in han_pieces(run) for w in search_tokenizer().lcut(piece, HMM=True)):
        # "不喜欢" → NOT + 喜欢: a negation is compared as a marker, its verb as a word.
        if len(word) > 1 and word[0] in _ZH_NEG_CHARS and word not in _ZH_NOT_NEGATION:
            out.extend(["NOT", word[1:]])
        elif word in _ZH_NOT_NEGATION:
            out.append(word)
        elif len(word) == 1 and word in _ZH_NEG_CHARS:
            out.append("NOT")
        else:
            out.append(word)
    return out


def _en_word(word: str) -> str:
    from .text import _stem

    if word in _EN_NEGATIONS:
        return "NOT"
    if word in _EN_SYNONYMS:
        return _EN_SYNONYMS[word]
    if word in _EN_IRREGULAR:
        return _stem(_EN_IRREGULAR[word])
    stem = _stem(word)
    return _EN_SYNONYMS.get(stem, stem)


# A clause opening on its verb ("and is smiling") and the subject of one that names it.
_EN_ELIDED_SUBJECT = re.compile(r"\s*(?:is|are|was|were)\s")
_EN_SUBJECT = re.compile(r"\s*((?:[a-z'-]+\s+){1,8}?)(?:is|are|was|were)\s")


def clauses(text: str, *, manner: bool = True, relatives: bool = True) -> list[list[str]]:
    """The text as clauses of compared words: stems/jieba words, fillers dropped, NOT markers.
    `manner=False`: without its manner adverbs ("carefully", _manner_adverbs).
    `relatives=False`: a clause-final relative ("… by a man who is pushing a bike") left inside
    its clause (_EN_RELATIVE_ING), the reading before that rewriting."""
    return [list(c) for c in _clauses(text, manner, relatives)]


@lru_cache(maxsize=1024)
def _clauses(text: str, manner: bool, relatives: bool) -> tuple[tuple[str, ...], ...]:
    # Cached: one dedup check reads the same two texts once per candidate word swap.
    norm = unicodedata.normalize("NFKC", text).lower().replace("n't", "nt").replace("’", "'")
    # The rewritings below run only where their keyword is (each is a scan of the text).
    if _EN_RELATIVE_WORDS.search(norm):
        norm = _EN_RELATIVE_ADJS.sub(_relative_adjs, norm)
        norm = _EN_RELATIVE_ADJ_PAIR.sub(_adjectives_before_noun, norm)
        norm = _EN_RELATIVE_ADJ.sub(_word_before_noun, norm)
        if relatives:
            norm = _EN_RELATIVE_ING.sub(r"\1, \1 \2 \3", norm)
    if "dressed" in norm:
        norm = _EN_DRESSED_IN.sub(_dressed_in, norm)
    if _EN_COLOUR_WORDS.search(norm):
        norm = _EN_COLORED_IN.sub(_adjectives_before_noun, norm)
        norm = _EN_COLORED.sub(r"\1", norm)
    norm = _EN_ADJ_LIST.sub(_adj_list, norm)
    norm = _EN_OF_QUALITY.sub(r"\2 \1", norm)
    if "made" in norm:
        norm = _EN_MADE_OF.sub(_word_before_noun, norm)
    norm = _EN_FOR_COMPOUND.sub(_for_compound, norm)
    norm = _EN_OF_COMPOUND.sub(r"\2 \1", norm)
    if _EN_PROGRESSIVE.search(norm):
        # "Some men are sawing" / "Men are sawing" / "A group of men is sawing": in an event
        # that is going on, a bare plural already means "some" (not so in a general statement:
        # "dogs bark").
        norm = _EN_SOME.sub("", norm)
    for word in _ZH_CLAUSE_WORDS:
        norm = norm.replace(word, "，")
    out: list[list[str]] = []
    subject = ""
    for part in _CLAUSE_BREAK.split(norm):
        elided = _EN_ELIDED_SUBJECT.match(part)
        if elided and subject:
            # "… and is smiling": the clause's subject is the previous clause's, which the
            # words must carry (else "a man talks to a woman and is smiling" would read as a
            # run of "a man talks to a woman who is smiling").
            part = subject + " " + part
        else:
            head = _EN_SUBJECT.match(part)
            subject = head.group(1) if head else ""
        words: list[str] = []
        prev = ""
        for match in _RUN.finditer(part):
            run = match.group(0)
            if len(run) == 1 and not run.isalnum() and run != "'":
                sign = run in "+\u2212" and part[match.end() : match.end() + 1].isdigit()
                if _symbol(run) and not sign:  # a number's sign is compared with the number
                    words.append(run)  # compared as a word: it must be there, in its place
                continue
            if re.match(r"[\u3400-\u9fff]", run):
                words.extend(w for w in _zh_words(run) if w not in _ZH_FILLER)
            elif not _latin(run):
                # Another script (Cyrillic, Hangul, kana, Thai, Hebrew…): compared as written,
                # whole — a run without spaces (Thai) is one word, so any change in it is new.
                words.append(run.strip("'"))
            elif not manner and _is_manner_adverb(run):
                continue
            elif run.strip("'") and (run not in _EN_FILLER or _label(run, part, match.end())):
                if prev in _EN_BE and (
                    run.endswith("ed") or run in _EN_PARTICIPLES or run in _EN_SAME_FORM_PARTICIPLES
                ):
                    words.append("PASSIVE")  # "is being cut (by …)": roles are swapped
                words.append(_en_word(run.strip("'")))
            if not run.endswith("ly"):  # "is carelessly held": the adverb sits in between
                prev = run
        if words:
            out.append(words)
    return tuple(tuple(c) for c in out)


# The tense of "to be", which the compared words leave out: "Alice was the owner" says she no
# longer is. Compared only when both texts use the verb (an active rewording has none).
_EN_BE_TENSE = {"is": "now", "are": "now", "am": "now", "was": "past", "were": "past"}


def _be_tenses(text: str) -> set[str]:
    return {_EN_BE_TENSE[w] for w in _words(text) if w in _EN_BE_TENSE}


def _qualifiers(text: str, flat: list[str]) -> Counter[str]:
    found = Counter(w for w in flat if w in _EN_QUALIFIERS)
    norm = unicodedata.normalize("NFKC", text)  # also "？" → "?": a question states no fact
    for marker in _ZH_QUALIFIERS:
        if marker in norm:
            found[marker] += norm.count(marker)
    return found


def _in_order(
    part: list[str], clause: list[str], *, anchored: bool, moved: list[list[str]]
) -> bool:
    """`part` is a run of `clause` (from its first word if anchored), in the same order. Words of
    the clause may be left out inside the run only when they are another clause of the new text,
    moved ("用户每天早上喝绿茶" / "每天早上，用户喝绿茶"); any other word left out inside changes
    what the rest says ("is not wearing a hat" / "is wearing a hat", "eating a cut onion" /
    "cutting an onion", "in front of the car" / "in the car"). A negation before the run is
    caught by the rule on where the run starts; one after it negates what the new text omits.
    """
    if not part:
        return True
    starts = [0] if anchored else [i for i, w in enumerate(clause) if w == part[0]]
    for start in starts:
        if clause[start] != part[0]:
            continue
        if start > 0 and not any(_has_run(m, clause[:start]) for m in moved):
            # The run begins inside the old clause: what precedes it there (the subject, "in
            # front of") must be said by the new text too, or the run means something else
            # ("standing in front of the burning car" / "standing and burning a car").
            continue
        pos, ok = start + 1, True
        for word in part[1:]:
            if pos < len(clause) and clause[pos] == word:
                pos += 1
                continue
            gap = next((m for m in moved if clause[pos : pos + len(m)] == m), None)
            if gap is None or pos + len(gap) >= len(clause) or clause[pos + len(gap)] != word:
                ok = False
                break
            pos += len(gap) + 1
        if ok:
            return True
    return False


def _has_run(words: list[str], run: list[str]) -> bool:
    n = len(run)
    return any(words[i : i + n] == run for i in range(len(words) - n + 1))


def _active(clause: list[str]) -> list[str]:
    """ "Y is cut … by X" → "X cut Y …" (the passive's roles in active order); else unchanged."""
    if "PASSIVE" in clause:
        at = clause.index("PASSIVE")
        if "by" in clause[at + 2 :]:
            by = clause.index("by", at + 2)
            verb = clause[at + 1 : at + 2]
            if at + 2 < by and clause[at + 2] in _EN_PARTICLES:
                verb = clause[at + 1 : at + 3]  # "is being put on by": a phrasal verb
            rest = clause[at + 1 + len(verb) : by]
            return [*clause[by + 1 :], *verb, *clause[:at], *rest]
        return _plain(clause)
    if "被" in clause:
        at = clause.index("被")
        if at >= 1 and at + 2 <= len(clause):
            # "Y 被 X v …": agent X, verb v, patient Y.
            return [clause[at + 1], *clause[at + 2 :], *clause[:at]]
    return clause


def _active_readings(clause: list[str]) -> list[list[str]]:
    """Every active order of a passive clause: with and without a particle, with the words after
    "by" split into the agent and an adverbial; an agentless passive as "someone" doing it."""
    if "PASSIVE" not in clause:
        return [clause]
    at = clause.index("PASSIVE")
    if at + 1 >= len(clause):
        return [_plain(clause)]
    verbs = [clause[at + 1 : at + 2]]
    by = clause.index("by", at + 2) if "by" in clause[at + 2 :] else len(clause)
    if at + 2 < by and clause[at + 2] in _EN_PARTICLES:
        verbs.append(clause[at + 1 : at + 3])
    out: list[list[str]] = []
    for verb in verbs:
        rest = clause[at + 1 + len(verb) : by]
        if by == len(clause):
            out.append(["someon", *verb, *clause[:at], *rest])
            continue
        tail = clause[by + 1 :]
        for k in range(len(tail), 0, -1):
            out.append([*tail[:k], *verb, *clause[:at], *rest, *tail[k:]])
    return out


def _plain(clause: list[str]) -> list[str]:
    return [w for w in clause if w != "PASSIVE"]


def _clause_found(
    part: list[str], old: list[list[str]], moved: list[list[str]] | None = None
) -> bool:
    """One new clause is stated by the old text: inside one old clause, in the same order, or
    as an old clause's opening words (its subject) followed by the start of a later clause."""
    moved = moved or []
    for j, clause in enumerate(old):
        if _in_order(part, clause, anchored=False, moved=moved):
            return True
        for i in range(j):
            head = old[i]
            k = 0
            while k < len(part) and k < len(head) and part[k] == head[k]:
                k += 1
            if 0 < k < len(part) and _in_order(part[k:], clause, anchored=True, moved=moved):
                return True
    return False


Swap = tuple[tuple[str, ...], tuple[str, ...]]


def unstated_reason(new: str, old: str, *, swaps: tuple[Swap, ...] = ()) -> str | None:
    """Why `new` says something `old` does not (a word, a qualifier, a role, a clause); or None.
    `swaps`: runs of compared words of `new` to read as runs of `old` (WordNet, _word_swaps).

    A clause-final relative is read as a clause of its own (_EN_RELATIVE_ING); when that reading
    finds something new, the one with the relative inside its clause is tried too: both are
    readings of the same texts ("a man wearing a black shirt is sitting at the table" states
    "a black shirt is worn by a man who is sitting at the table" only the second way)."""
    reason = _unstated(new, old, swaps=swaps, relatives=True)
    if (
        reason is not None
        and any(_EN_RELATIVE_ING.search(t.lower()) for t in (new, old))
        and _unstated(new, old, swaps=swaps, relatives=False) is None
    ):
        return None
    return reason


def _unstated(new: str, old: str, *, swaps: tuple[Swap, ...], relatives: bool) -> str | None:
    new_clauses = clauses(new, relatives=relatives)
    old_clauses = clauses(old, relatives=relatives)
    if swaps:
        new_clauses = [_swapped(c, swaps) for c in new_clauses]
    new_flat = [w for c in new_clauses for w in c]
    old_flat = [w for c in old_clauses for w in c]
    missing = sorted(set(new_flat) - set(old_flat) - _PASSIVE)
    if missing:
        return "adds " + ", ".join(missing[:3])
    if _qualifiers(new, new_flat) != _qualifiers(old, old_flat):
        return "qualifier differs"
    tenses = (_be_tenses(new), _be_tenses(old))
    if all(tenses) and tenses[0] != tenses[1]:
        return "tense differs"
    reason = _roles_reason(new_clauses, old_clauses)
    if reason and len(new_clauses) == len(old_clauses) == 1:
        # One clause on each side with the same one manner adverb: where it stands does not
        # change what it says ("is quickly running" / "is running quickly", "is strongly
        # whisked by" / "is strongly whisking"). With two verbs it could move between them.
        adverbs = _manner_adverbs(new)
        if len(adverbs) == 1 and adverbs == _manner_adverbs(old):
            plain_new = [
                _swapped(c, swaps) for c in clauses(new, manner=False, relatives=relatives)
            ]
            if not _roles_reason(plain_new, clauses(old, manner=False, relatives=relatives)):
                return None
    return reason


def _is_manner_adverb(word: str) -> bool:
    from . import wordnet

    return (
        word.endswith("ly")
        and word not in _EN_QUALIFIERS
        and word not in _TEMPORAL
        and word in wordnet.base_forms(word, "r")
    )


def _manner_adverbs(text: str) -> list[str]:
    return sorted(_en_word(w) for w in _words(text) if _is_manner_adverb(w))


def _roles_reason(new_clauses: list[list[str]], old_clauses: list[list[str]]) -> str | None:
    """Each new clause is found in the old ones with the same roles (see unstated_reason)."""
    for part in new_clauses:
        others = [_plain(c) for c in new_clauses if c is not part]
        if _clause_found(_plain(part), [_plain(c) for c in old_clauses], others):
            continue
        # Active ↔ passive voice states the same roles in another order.
        active_old = [_active(c) for c in old_clauses]
        if _clause_found(_active(part), active_old):
            continue
        # The same inside one clause, where the passive's agent may be followed by an adverbial
        # ("is dunked by a man at the game" = "a man dunks … at the game") and "on"/"out" may
        # be a preposition, not a particle ("is poured on the tomatoes by the man").
        readings = [r for c in old_clauses for r in _active_readings(c)]
        if any(
            _in_order(mine, theirs, anchored=False, moved=[])
            for mine in _active_readings(part)
            for theirs in readings
        ):
            continue
        return "roles or clauses differ: " + " ".join(part[:6])
    return None


def conflict_reason(new: str, old: str) -> str | None:
    """Why `new` says something different from `old` although they look alike; None if it doesn't."""
    if numbers(new) != numbers(old):
        return "numbers differ"
    if (word := case_changed(new, old)) is not None:
        return f"case differs: {word}"
    if negation_count(new) % 2 != negation_count(old) % 2:
        return "negation differs"
    if preference_terms(new) != preference_terms(old):
        return "stated preference differs"
    if temporal_terms(new) != temporal_terms(old):
        return "dates differ"
    # Everything `new` states must be stated by `old`: its words (stems, a few synonyms), its
    # qualifiers, and each clause's words in the same roles. Similar alone is never enough.
    new_words = {w for c in clauses(new) for w in c} - _PASSIVE
    old_words = {w for c in clauses(old) for w in c} - _PASSIVE
    added, removed = new_words - old_words, old_words - new_words
    if added:
        # A word swapped for one WordNet says the old word states (a synonym in a frequent
        # sense of both; a more general word where that cannot widen the claim): read the new
        # word as the old one, then every other rule applies as usual.
        for swaps in _word_swaps(new, old, added=added, old_words=old_words, removed=removed):
            if unstated_reason(new, old, swaps=swaps) is None:
                return None
    if added and not removed:
        return "adds detail"
    if added and (min(len(added), len(removed)) <= 2 or _same_frame(old, new)):
        # A word or two swapped in an otherwise identical sentence is how a value or a name
        # changes ("service alpha" -> "service beta", "prefers tea" -> "prefers coffee"); the
        # same frame with several slots filled differently is another fact about other things
        # ("张伟在北京的华为工作" / "李娜在上海的腾讯工作"). The lifecycle reads both as updates.
        return "replaces " + ", ".join(sorted(removed)[:3])
    if added:
        return "says other things: " + ", ".join(sorted(added)[:3])
    return unstated_reason(new, old)


def _same_frame(old: str, new: str) -> bool:
    """At least 40 % of the words kept, in the same order, around the substituted ones."""
    a, b = tokenize(old), tokenize(new)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    kept = sum(block.size for block in matcher.get_matching_blocks())
    return kept >= 0.4 * max(len(a), len(b))


# --- WordNet word swaps -------------------------------------------------------------------------
# Which WordNet relations prove "the old word states the new one" (measured: docs/search.md,
# "Dedup safety"). Synonyms only within the most frequent senses of both words: "cut" and "chop"
# share no frequent sense, "bike" and "bicycle" do; all senses would merge "cracking" with
# "breaking" (of a voice) and far worse.
_WN_SENSES = 3
# A more general word ("walking" after "pacing", "person" after "man") says less, which is only
# safe where saying less is implied: not under a negation, a universal or downward quantifier, a
# preference ("avoids dogs" does not state "avoids animals"), a modal or a question.
# The old (specific) word in one of its first senses, up to 3 steps ("pacing" -> walk, "guitar"
# -> stringed instrument -> musical instrument); the new word in any of its senses, as long as
# no frequent sense of the two is a sibling of the other (wordnet.contrasted: "girl"/"woman").
_WN_HYPERNYM_DEPTH = 3
_WN_GENERAL_SENSES: int | None = None
_WN_CONTRAST_SENSES = 3
_EN_DOWNWARD = frozenset(
    [
        "all",
        "every",
        "each",
        "any",
        "few",
        "only",
        "no",
        "none",
        "nobody",
        "nothing",
        "never",
        "neither",
        "nor",
        "without",
        "if",
        "unless",
        "less",
        "fewer",
        "at",  # "at most"
        "most",
        "except",
        "instead",
        "than",
        "whether",
    ]
)
_WN_MAX_CANDIDATES = 8


def _surface_seq(text: str) -> list[tuple[str, str]]:
    """English words of the text in order, (as written, as compared), fillers kept as ("", "")."""
    norm = unicodedata.normalize("NFKC", text).lower().replace("n't", "nt").replace("’", "'")
    out: list[tuple[str, str]] = []
    for word in re.findall(r"[a-z']+|[^a-z'\s]+", norm):
        word = word.strip("'")
        if not word or not word.isalpha() or word in _EN_FILLER:
            out.append(("", ""))
        else:
            out.append((word, _en_word(word)))
    return out


def _surfaces(seq: list[tuple[str, str]]) -> dict[str, set[str]]:
    """English compared word -> the words of the text compared as it ("chopping" -> chop)."""
    out: dict[str, set[str]] = {}
    for word, compared in seq:
        if word:
            out.setdefault(compared, set()).add(word)
    return out


def _collocations(seq: list[tuple[str, str]]) -> list[tuple[str, tuple[str, str]]]:
    """Two adjacent words that are one WordNet lemma ("young lady", "table tennis")."""
    from . import wordnet

    out: list[tuple[str, tuple[str, str]]] = []
    for (w1, c1), (w2, c2) in itertools.pairwise(seq):
        if not (w1 and w2 and _swappable(w1) and _swappable(w2)):
            continue
        if wordnet.known(f"{w1}_{w2}"):
            out.append((f"{w1}_{w2}", (c1, c2)))
        elif _closed_compound(w1, w2):
            out.append((w1 + w2, (c1, c2)))
        elif w2 in _EN_PARTICLES:
            # A phrasal verb, inflected on its verb ("climbing up" → climb_up, "chopped up" →
            # chop_up): WordNet lists it under the verb's base form only. It is then one word,
            # swapped only as WordNet says ("climb up" = climb; "climb down" is not climb).
            out.extend(
                (f"{base}_{w2}", (c1, c2))
                for base in wordnet.base_forms(w1, "v")[:1]
                if wordnet.base_forms(f"{base}_{w2}", "v")
            )
    return out


def _closed_compound(w1: str, w2: str) -> bool:
    """ "back yard" is the noun "backyard" written apart: WordNet has the joined word as a noun
    that is a kind of its last part (at most 2 steps up: backyard → yard, seashore → shore), and
    the first part is mostly a noun. Not when the first part is mostly an adjective, whose
    compounds name something else ("darkroom" is not any dark room, "blackbird" any black bird;
    those are not kinds of the last part within 2 steps either, as "greenhouse", "doghouse")."""
    from . import wordnet

    joined = w1 + w2
    return (
        bool(wordnet.base_forms(joined, "n"))
        and len(wordnet.senses(w1, "n")) > len(wordnet.senses(w1, "a"))
        and wordnet.more_general(w2, joined, first_general=None, first_specific=_WN_SENSES, depth=2)
    )


def _swapped(clause: list[str], swaps: tuple[Swap, ...]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(clause):
        for src, dst in swaps:
            if tuple(clause[i : i + len(src)]) == src:
                out.extend(dst)
                i += len(src)
                break
        else:
            out.append(clause[i])
            i += 1
    return out


def _monotone(text: str) -> bool:
    """Saying less is implied here: no negation, downward quantifier, preference, modal, question."""
    words = set(_words(text))
    return (
        negation_count(text) == 0
        and not words & _EN_DOWNWARD
        and not words & _EN_QUALIFIERS
        and not preference_terms(text)
        and "?" not in unicodedata.normalize("NFKC", text)
    )


def _swappable(word: str) -> bool:
    return (
        word.isalpha()
        and word.isascii()
        and word not in _EN_QUALIFIERS
        and word not in _EN_NEGATIONS
        and word not in _EN_PREFERENCE
        and word not in _TEMPORAL
        and word not in _EN_DOWNWARD
        and word not in _EN_FILLER
    )


def _plural(word: str) -> bool:
    """A plural noun ("shrimps"): a swap must not change how many ("a prawn" / "shrimps")."""
    from . import wordnet

    forms = wordnet.base_forms(word, "n")
    return bool(forms) and word not in forms


def _word_swaps(
    new: str, old: str, *, added: set[str], old_words: set[str], removed: set[str]
) -> list[tuple[Swap, ...]]:
    """Ways to read every added word of `new` as words of `old` that state it (WordNet): one
    word for one ("slicing" -> cutting), for two that are one lemma ("girl" -> young lady), or
    two that are one lemma for one ("dark glasses" -> sunglasses)."""
    if not all(w.isascii() for w in added) or "NOT" in added:
        return []  # Chinese and numbers: no WordNet
    new_seq, old_seq = _surface_seq(new), _surface_seq(old)
    new_forms, old_forms = _surfaces(new_seq), _surfaces(old_seq)
    general = _monotone(new) and _monotone(old)
    # The old words (and word pairs) a new word may stand for: the dropped ones first.
    targets: list[tuple[list[str], tuple[str, ...]]] = [
        ([w for w in old_forms.get(r, ()) if _swappable(w)], (r,))
        for r in [*sorted(removed), *sorted(old_words - removed)]
        if r != "NOT"
    ]
    targets += [([lemma], pair) for lemma, pair in _collocations(old_seq)]
    targets = [(surf, run) for surf, run in targets if surf]

    choices: list[list[Swap]] = []
    pending = set(added)
    for lemma, pair in _collocations(new_seq):
        if not pending & set(pair):
            continue
        via: list[Swap] = [
            (pair, run) for surf, run in targets if _states([lemma], surf, general=general)
        ]
        if via:
            choices.append(via)
            pending -= set(pair)
    for a in sorted(pending):
        surf_a = [w for w in new_forms.get(a, ()) if _swappable(w)]
        found: list[Swap] = [
            ((a,), run) for surf, run in targets if _states(surf_a, surf, general=general)
        ]
        if not found:
            return []
        choices.append(found)
    out: list[tuple[Swap, ...]] = []
    for combo in itertools.product(*choices):
        out.append(tuple(combo))
        if len(out) >= _WN_MAX_CANDIDATES:
            break
    return out


def _states(new_words: list[str], old_words: list[str], *, general: bool) -> bool:
    """WordNet says one of `old_words` states one of `new_words` (see _WN_SENSES)."""
    from . import wordnet

    pairs = [(x, y) for x in new_words for y in old_words if _plural(x) == _plural(y)]
    related = any(wordnet.synonyms(x, y, first=_WN_SENSES) for x, y in pairs) or (
        general
        and any(
            wordnet.more_general(
                x,
                y,
                first_general=_WN_GENERAL_SENSES,
                first_specific=_WN_SENSES,
                depth=_WN_HYPERNYM_DEPTH,
            )
            and not wordnet.contrasted(x, y, first=_WN_CONTRAST_SENSES)
            for x, y in pairs
        )
    )
    return related and not any(wordnet.antonyms(x, y) for x, y in pairs)
