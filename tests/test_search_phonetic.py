"""The phonetic name match of cross-script search (memories.retrieval.phonetic; docs/search.md,
"Phonetic name match"): a name written in Chinese by its sound meets its English spelling when
CC-CEDICT does not know it, and an unrelated name does not."""

from __future__ import annotations

import pytest

from memories.retrieval import gloss
from memories.retrieval.phonetic import PhoneticTable, english_keys, pinyin_keys, token_keys

from .test_memories_api import search, write

LANDLORD_ZH = "用户的房东叫埃尔维，每月五号收房租"
LANDLORD_EN = "Elway, the user's landlord, collects the rent on the fifth of every month."


@pytest.mark.parametrize(
    ("syllables", "english"),
    [
        (("ka", "ka"), "gaga"),
        (("mai", "te", "lin"), "matlin"),
        (("ai", "er", "wei"), "elway"),
        (("shi", "mi", "si"), "smith"),
        (("ai", "er", "wei", "si"), "elvis"),
        (("pu", "lei", "si", "li"), "presley"),
    ],
)
def test_a_transliteration_and_its_english_spelling_share_a_key(syllables, english):
    assert pinyin_keys(syllables) & english_keys(english)


@pytest.mark.parametrize(
    ("syllables", "english"),
    [
        (("ai", "er", "wei"), "johnson"),
        (("mai", "te", "lin"), "garcia"),
        (("ka", "ka"), "elway"),
    ],
)
def test_unrelated_names_share_no_key(syllables, english):
    assert not pinyin_keys(syllables) & english_keys(english)


def test_only_words_that_may_be_names_get_a_key():
    table = gloss.glossary()
    # Characters typical of transliteration, derived from the dictionary's own names.
    assert {"斯", "特", "尔", "卡", "琳"} <= set(table.translit)
    assert not {"四", "手", "重", "新"} & set(table.translit)
    assert token_keys("麦特琳", table)  # unknown to the dictionary, written like a name
    assert not token_keys("重新", table)  # a common word
    assert not token_keys("手中", table)
    assert token_keys("matlin", table)  # not an English word the dictionary glosses
    assert not token_keys("short", table)  # 短: an English word is matched by its meaning


def test_the_table_matches_both_ways_and_reads_new_terms():
    table = gloss.glossary()
    phonetic = PhoneticTable()
    terms = ["elway", "房东", "埃尔维"]
    phonetic.extend(terms, table)
    assert phonetic.matches("埃尔维", table) == {"elway"}
    assert phonetic.matches("elway", table) == {"埃尔维"}
    assert phonetic.matches("麦特琳", table) == frozenset()
    terms.append("matlin")
    phonetic.extend(terms, table)
    assert phonetic.matches("麦特琳", table) == {"matlin"}
    # A key that is a prefix of the other (a stem, a name jieba cut short) matches too.
    phonetic.extend([*terms, "yosemit"], table)
    assert phonetic.matches("约塞米", table) == {"yosemit"}


# The local backend's index matches names by sound; a partial index of the milvus backend's
# candidates keeps the dictionary alone (docs/search.md, "Phonetic name match").
@pytest.mark.local_index
@pytest.mark.django_db
def test_an_english_question_finds_a_name_written_in_chinese(api, settings):
    write(api, LANDLORD_ZH)
    write(api, "每周五下午三点开团队周会，讨论迭代进度")
    write(api, "服务器的日志保留三十天，超过后自动归档到对象存储")
    found = search(api, "Who is Elway?", limit=5)
    assert [m["content"] for m in found][:1] == [LANDLORD_ZH], found
    assert found[0]["score"] >= 0.3
    assert search(api, "Who is Johnson?", limit=5) == []  # another name: nothing
    settings.SEARCH_XLING_PHONETIC = False  # the dictionary alone does not know the name
    assert LANDLORD_ZH not in [m["content"] for m in search(api, "Who is Elway?", limit=5)]


@pytest.mark.local_index
@pytest.mark.django_db
def test_a_chinese_question_finds_a_name_written_in_english(api, settings):
    write(api, LANDLORD_EN)
    write(api, "The user runs 5 km every morning before work.")
    write(api, "Database migrations are written with Alembic and reviewed by the DBA.")
    query = "埃尔维哪天收钱？"  # when does Elway collect the money
    found = search(api, query, limit=5)
    assert [m["content"] for m in found][:1] == [LANDLORD_EN], found
    assert found[0]["score"] >= 0.3
    assert search(api, "麦特琳哪天收钱？", limit=5) == []  # another name: nothing
    settings.SEARCH_XLING_PHONETIC = False
    assert LANDLORD_EN not in [m["content"] for m in search(api, query, limit=5)]
