"""Entity resolution: when two names mean the same thing.

"Python", "python 3.13" and "Python3" are one skill; "腾讯" and "腾讯公司" one organisation. The
key is `normalise_name`: NFKC, case-folded, version numbers and punctuation dropped, spaces
removed, and (for organisations) legal suffixes dropped. Exact key equality merges outright.
A near key ("postgres" / "postgresql") merges only when the names' embeddings also agree
(calibrated score >= NAME_MATCH_SCORE): spelling alone would join "Java" and "JavaScript"'s
cousins, meaning alone would join "Redis" and "Memcached".

Across scripts: "新加坡" and "Singapore" are one place when both kinds of evidence agree — the
dictionary (CC-CEDICT, memories.retrieval.gloss: the Chinese word is an entry whose English
senses hold every word of the English name) and the embedding (names_agree, as for near keys).
Either alone is not enough: the dictionary glosses 北京 with "capital" and "China" too, and the
embedding puts "Alibaba Cloud" near 阿里云 without saying they are the same. Only for names of
places, organisations and people (CROSS_SCRIPT_TYPES).

Types: a confident proposal ("works at X" makes X an organisation) merges only with an entity of
the same type. A proposal whose type is a guess (a capitalised word with no context becomes a
`concept`) may join an existing entity of another type with the same key: that entity's type is
the better evidence. Never otherwise across types.

Across agents (graph.identity): the same evidence links two agents' entities to one team-level
identity, but only for TEAM_TYPES — names that denote the same thing whoever says them. A person
is not one of them: "用户" / "the user" is each agent's own user, and two agents' "Alice" may well
be two people; nor are preferences, goals and facts, which are about an agent's user.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from dataclasses import dataclass, field

import numpy as np

from memories.retrieval.embeddings import embed_passages, get_embedder
from memories.retrieval.gloss import glossary
from memories.retrieval.text import is_cjk, tokenize

# Calibrated name-embedding score above which two near-identical keys are the same thing: the
# embedding scale's "says the same thing" edge (memories.retrieval.embeddings).
NAME_MATCH_SCORE = 0.85
# Keys this similar by spelling are worth asking the embedding about.
SPELLING_RATIO = 0.8

# "v4", "3.13", "2024", "4o" as separate tokens, and a version glued to a word ("python3").
_VERSION_TOKEN = re.compile(r"(?<![^\W\d_])v?\d+(?:\.\d+)*[a-z]?(?![^\W\d_])")
_GLUED_VERSION = re.compile(r"(?<=[a-z]{2})\d+(?:\.\d+)*$")
_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)
_ORG_SUFFIXES = (
    "股份有限公司",
    "有限责任公司",
    "有限公司",
    "公司",
    "集团",
    "corporation",
    "incorporated",
    "limited",
    "company",
    "corp",
    "gmbh",
    "inc",
    "ltd",
    "llc",
    "co",
)
# Names that are proper names in both scripts: the only types resolved across scripts.
CROSS_SCRIPT_TYPES = frozenset({"location", "organization", "person"})
# The user an agent works for, however a memory names them: one entity, not five.
SELF_KEY = "user"
_SELF_ALIASES = frozenset({"user", "theuser", "用户", "我", "i", "me", "myself"})
# Types whose names mean the same thing to every agent of a team: the only ones linked across
# agents (graph.identity).
TEAM_TYPES = frozenset({"organization", "location", "project", "concept", "skill"})


def normalise_name(name: str, entity_type: str | None = None) -> str:
    """The resolution key of a name ("Python 3.13" -> "python", "Node.js" -> "nodejs")."""
    text = unicodedata.normalize("NFKC", name).casefold().strip()
    words = [w for w in _NON_WORD.split(text) if w]
    plain = "".join(words)
    if plain in _SELF_ALIASES and entity_type in (None, "person"):
        return SELF_KEY
    kept = [_GLUED_VERSION.sub("", w) for w in words if not _VERSION_TOKEN.fullmatch(w)]
    key = "".join(w for w in kept if w)
    if entity_type == "organization":
        for suffix in _ORG_SUFFIXES:
            if key.endswith(suffix) and len(key) > len(suffix):
                key = key[: -len(suffix)]
                break
    # A name that is only a version or a number ("3.13", "2024") keeps its digits.
    return (key or plain or text)[:255]


def team_linkable(name: str, entity_type: str) -> bool:
    """May this entity share a team-level identity with other agents' entities? Only for
    TEAM_TYPES, and never a name of the user (a `concept` "用户" is still some agent's user)."""
    return (
        entity_type in TEAM_TYPES
        and normalise_name(name, "person") != SELF_KEY
        and normalise_name(name, entity_type) != SELF_KEY
    )


def keys_are_close(a: str, b: str) -> bool:
    """Spelling says these keys may be the same thing (the embedding decides)."""
    if not a or not b or a == b:
        return a == b and bool(a)
    short, long_ = sorted((a, b), key=len)
    # "postgres" / "postgresql", "kubernetes" / "kubernetescluster": a prefix of some length.
    min_prefix = 2 if not short.isascii() else 4
    if len(short) >= min_prefix and long_.startswith(short):
        return True
    return difflib.SequenceMatcher(None, a, b).ratio() >= SPELLING_RATIO


def _dictionary_terms(name: str) -> frozenset[str]:
    """The English terms CC-CEDICT gives a Chinese name as a whole entry (not read character by
    character: "币安" is no entry, and its characters' senses say nothing about Binance)."""
    found = glossary().forward.get(name.strip())
    return frozenset(found.split()) if found else frozenset()


def same_across_scripts(chinese: str, english: str) -> bool:
    """A Chinese name and an English one name the same thing: the dictionary entry of the
    Chinese holds every word of the English, and the embedding agrees."""
    words = set(tokenize(english))
    if not words or is_cjk(english) or not is_cjk(chinese):
        return False
    return words <= _dictionary_terms(chinese) and names_agree(chinese, english)


def names_agree(a: str, b: str) -> bool:
    """The embedding model says two names denote the same thing (calibrated score)."""
    vecs = embed_passages([a, b])
    raw = float(np.dot(vecs[0], vecs[1]))
    return float(get_embedder().same_score(raw)) >= NAME_MATCH_SCORE


@dataclass
class Known:
    """An entity of the scope, as the resolver sees it."""

    id: str
    name: str
    entity_type: str
    key: str
    agent_id: str


@dataclass
class Resolver:
    """Finds the existing entity a proposed one stands for, within one extraction run.

    Loaded once with the scope's entities (the agent's own, then the team-wide ones), and told
    about every entity the run creates, so two memories naming "Python" and "python 3.13" in the
    same run meet as well.
    """

    _by_key: dict[str, list[Known]] = field(default_factory=dict)
    # (type, first character of the key) -> entities: the near-key candidates. Names that differ
    # in their first character are not taken for spellings of one another, which keeps a
    # 10k-entity scope from costing 10k string comparisons per proposal.
    _by_head: dict[tuple[str, str], list[Known]] = field(default_factory=dict)

    def add(self, item: Known) -> None:
        self._by_key.setdefault(item.key, []).append(item)
        self._by_head.setdefault((item.entity_type, item.key[:1]), []).append(item)

    def same_key(self, key: str, *, other_than: str | None = None) -> list[Known]:
        """The entities with this resolution key, in the order they were added (`other_than`:
        leave out the entities of this scope, an agent id or "" for team-wide)."""
        return [k for k in self._by_key.get(key, []) if k.agent_id != other_than]

    def resolve(
        self,
        *,
        name: str,
        entity_type: str,
        confident: bool = True,
        other_than: str | None = None,
    ) -> Known | None:
        """The entity this proposal stands for, if any. `other_than` = a scope (agent id, "" for
        team-wide) whose entities are never the answer: linking across agents (graph.identity)
        looks for the same thing in the *other* scopes."""
        key = normalise_name(name, entity_type)
        same_key = self.same_key(key, other_than=other_than)
        # Prefer the agent's own entity over a team-wide one: the list is in that order.
        for item in same_key:
            if item.entity_type == entity_type:
                return item
        if not confident:
            # The proposal's type is a guess; an entity of another type with the same key is
            # the better evidence of what this is. Most specific first (`concept` last).
            typed = sorted(same_key, key=lambda k: (k.entity_type == "concept", k.entity_type))
            if typed:
                return typed[0]
        for item in self._by_head.get((entity_type, key[:1]), []):
            if item.agent_id == other_than:
                continue
            if keys_are_close(item.key, key) and names_agree(item.name, name):
                return item
        if entity_type in CROSS_SCRIPT_TYPES:
            return self._across_scripts(name, entity_type, other_than)
        return None

    def _across_scripts(
        self, name: str, entity_type: str, other_than: str | None = None
    ) -> Known | None:
        """An entity of the type written in the other script that names the same thing."""
        if is_cjk(name):
            terms = _dictionary_terms(name)
            if not terms:
                return None
            candidates = [
                k
                for k in self._of_type(entity_type)
                if k.agent_id != other_than and not is_cjk(k.name) and k.key.isascii()
            ]
            for item in candidates:
                words = set(tokenize(item.name))
                if words and words <= terms and names_agree(name, item.name):
                    return item
            return None
        stems = tokenize(name)
        if not stems:
            return None
        table = glossary()
        # The Chinese words glossed with every word of the name: the entries to look for.
        wanted = set(table.chinese(stems[0]))
        for stem in stems[1:]:
            wanted &= set(table.chinese(stem))
        for word in sorted(wanted):
            for item in self.same_key(normalise_name(word, entity_type), other_than=other_than):
                if item.entity_type == entity_type and same_across_scripts(item.name, name):
                    return item
        return None

    def _of_type(self, entity_type: str) -> list[Known]:
        return [k for (t, _h), items in self._by_head.items() if t == entity_type for k in items]
