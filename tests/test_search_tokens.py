"""Search tokens stored with the memory: an index load reads them instead of tokenising again."""

from __future__ import annotations

import numpy as np
import pytest

from memories.models import Memory
from memories.retrieval import index
from memories.retrieval.embeddings import get_embedder
from memories.retrieval.text import tokenize, tokens_for_storage, tokens_from_storage

from .test_memories_api import search, write

pytestmark = pytest.mark.django_db


def test_writes_store_stamped_tokens_and_updates_refresh_them(api):
    mid = write(api, "回测数据源：Binance USDT 永续合约").json()["data"]["id"]
    stored = Memory.objects.get(pk=mid).search_tokens
    assert tokens_from_storage(stored) == tokenize("回测数据源：Binance USDT 永续合约")
    api.put(
        f"/memories/personal/{mid}", {"content": "The staging database is refreshed on Sundays"}
    )
    stored = Memory.objects.get(pk=mid).search_tokens
    assert tokens_from_storage(stored) == tokenize("The staging database is refreshed on Sundays")


def test_tokens_of_another_tokenizer_are_recomputed(settings):
    stored = tokens_for_storage("用户偏好简洁直接的回复")
    assert tokens_from_storage(stored) is not None
    settings.SEARCH_JIEBA_MIN_FREQ = settings.SEARCH_JIEBA_MIN_FREQ + 1
    assert tokens_from_storage(stored) is None  # another dictionary: not trusted
    assert tokens_from_storage("") is None


def test_the_index_uses_stored_tokens_and_falls_back_without_them(api, team):
    a = write(api, "Alice prefers Python for data pipelines").json()["data"]["id"]
    b = write(api, "Bob reviews every unsafe Rust block").json()["data"]["id"]
    # Row a carries tokens the text does not contain: the load must read the stored ones.
    Memory.objects.filter(pk=a).update(search_tokens=tokens_for_storage("zebrafish aquarium"))
    Memory.objects.filter(pk=b).update(search_tokens="")  # written before the column: recompute
    index.registry.clear()
    ix = index.registry.get(
        team_id=team.id, scope="personal", agent_id="assistant", embedder=get_embedder()
    )
    assert "zebrafish" in ix.term_id and "python" not in ix.term_id
    assert b in {r["id"] for r in search(api, "unsafe Rust", mode="keyword")}


def test_reembed_memories_tokens_backfills_missing_and_outdated_tokens(team):
    from io import StringIO

    from django.core.management import call_command

    from memories.services import memory_create

    fresh, _ = memory_create(team=team, scope="personal", agent_id="a", content="ports of call")
    old, _ = memory_create(team=team, scope="personal", agent_id="a", content="回测数据源")
    stale, _ = memory_create(team=team, scope="team", agent_id="", content="ships at sea")
    Memory.objects.filter(pk=old.pk).update(search_tokens="")
    Memory.objects.filter(pk=stale.pk).update(search_tokens="t0.5|ships")
    out = StringIO()
    call_command("reembed_memories", "--tokens", "--team", team.id, stdout=out)
    assert "2 memories without current search tokens" in out.getvalue()
    assert "stored the search tokens of 2 memories" in out.getvalue()
    for m in (fresh, old, stale):
        m.refresh_from_db()
        assert tokens_from_storage(m.search_tokens) == tokenize(m.content)


def test_latin_diacritics_are_folded_and_other_scripts_keep_their_letters():
    # Agents often type a name without its accents; the memory keeps them.
    assert tokenize("Müller moved to Zürich") == tokenize("Muller moved to Zurich")
    assert tokenize("Ergänzungsschulen") == ("erganzungsschulen",)
    assert tokenize("cafés") == tokenize("cafe")  # folded, then stemmed like any English word
    assert tokenize("Straße") == tokenize("Strasse")
    assert tokenize("nǐ hǎo") == ("ni", "hao")  # pinyin with tone marks
    # Letters whose marks tell words apart in their own script stay as written.
    assert tokenize("Привет, мир й") == ("привет", "мир", "й")
    assert tokenize("Đà Nẵng") == ("đà", "nang")  # đ has no plain form; ẵ does
    # Kana keep their voicing marks (kanji are read in simplified form, as all Chinese is).
    assert tokenize("東京 ガス") == ("东京", "ガス")


def test_a_name_written_without_its_accents_finds_the_memory(api):
    target = write(api, "Maria Müller runs the Zürich office").json()["data"]["id"]
    write(api, "Maria Schmidt runs the Berlin office")
    for query in ("Zurich", "Muller"):  # the only word telling the two apart
        found = search(api, query, mode="keyword", min_score=0.0)
        assert [m["id"] for m in found] == [target], (query, found)
    # And the other way round: accents in the question, none in the memory.
    plain = write(api, "Jose Nunez signed the Sao Paulo lease").json()["data"]["id"]
    write(api, "Jose Garcia signed the Lima lease")
    found = search(api, "Núñez São Paulo", mode="keyword", min_score=0.0)
    assert [m["id"] for m in found] == [plain], found


def test_a_word_keeps_its_combining_marks():
    # Devanagari and Bengali vowel signs and viramas are marks, which `\\w` leaves out: the
    # words fell apart into single letters that every other memory in the script shares.
    words = tokenize("नमस्ते दुनिया")  # whole words (then stemmed: Hindi, below)
    assert len(words) == 2 and "नमस्ते".startswith(words[0]) and "दुनिया".startswith(words[1])
    assert tokenize("আমি বই পড়তে ভালোবাসি") == ("আমি", "বই", "পড়তে", "ভালোবাসি")
    # A script written without spaces (Thai) still splits where its marks are: its run is a
    # sentence, and one token per sentence would match nothing.
    assert len(tokenize("ผู้ใช้ชอบดื่มชาเขียว")) > 1
    # A mark with no letter before it (an emoji's variation selector) is no word.
    assert tokenize("Keep going! 🧘\u200d♀\ufe0f") == tokenize("Keep going!")


def test_words_of_a_one_language_script_are_stemmed_in_that_language():
    # Russian, Greek, Hindi, Arabic: inflected forms of a word meet, as English ones do.
    assert tokenize("пользователя живёт") == tokenize("пользователь живет")
    assert tokenize("οι χρήστες") == tokenize("οι χρήστης")
    assert tokenize("किताबें") == tokenize("किताब")
    assert tokenize("المستخدم") == tokenize("مستخدم")
    # A Latin word is read as English whatever its language; other scripts are left as written.
    assert tokenize("usuarios") == ("usuario",)
    assert tokenize("사용자는 המשתמש") == ("사용자는", "המשתמש")
    # Digits of other scripts have no letter to tell their language: left as written.
    assert tokenize("٣٤٥ १२३") == ("٣٤٥", "१२३")


def test_kana_runs_are_cut_where_katakana_and_hiragana_meet():
    assert tokenize("サーバーのパスワードは毎月変わります")[:4] == (
        "サーバー",
        "の",
        "パスワード",
        "は",
    )
    assert tokenize("すごーい") == ("すごーい",)  # the long-vowel mark stays in its word


def test_a_katakana_word_finds_the_japanese_memory_holding_it(api):
    target = write(api, "サーバーのパスワードは毎月変わります").json()["data"]["id"]
    write(api, "会議は火曜日です")
    write(api, "ユーザーはコーヒーが好きです")
    assert [m["id"] for m in search(api, "パスワード")] == [target]


def test_a_hindi_question_matches_only_the_words_it_shares(api):
    tea = write(api, "उपयोगकर्ता को चाय पसंद है").json()["data"]["id"]
    write(api, "बैठक मंगलवार को है")
    write(api, "सर्वर का पासवर्ड हर महीने बदलता है")
    # "How is the weather?": no word in common but the copula; its letters are in all three.
    found = search(api, "मौसम कैसा है", mode="keyword", min_score=0.0)
    assert all(m["score"] < 0.1 for m in found), found
    found = search(api, "चाय", mode="keyword")
    assert [m["id"] for m in found] == [tea], found


# Written for these tests: the same preference in traditional and in simplified characters.
PREFERENCE_TRADITIONAL = "使用者偏好簡潔直接的回覆，不喜歡冗長的解釋"
PREFERENCE_SIMPLIFIED = "使用者偏好简洁直接的回复，不喜欢冗长的解释"


def test_chinese_is_tokenised_in_simplified_characters():
    assert tokenize(PREFERENCE_TRADITIONAL) == tokenize(PREFERENCE_SIMPLIFIED)
    assert {"简洁", "回复", "解释"} <= set(tokenize(PREFERENCE_TRADITIONAL))
    # Only the script: regional vocabulary stays as written (軟體 is 软体, not 软件).
    assert "软体" in tokenize("軟體發佈")
    # Simplified text is cut as before.
    assert tokenize("黑豹队的防守丢了多少分") == ("黑豹", "队", "防守", "丢", "多少", "分")


def test_a_question_in_simplified_characters_finds_a_memory_in_traditional_ones(api):
    target = write(api, "回測資料來源改為幣安永續合約").json()["data"]["id"]
    write(api, "每週五下午開團隊週會")
    found = search(api, "回测数据来源", mode="keyword", min_score=0.0)
    assert [m["id"] for m in found] == [target], found
    # And the other way round.
    plain = write(api, "服务器日志保留三十天").json()["data"]["id"]
    found = search(api, "伺服器日誌保留多久", mode="keyword", min_score=0.0)
    assert [m["id"] for m in found][:1] == [plain], found


def test_the_embedding_reads_chinese_in_simplified_characters():
    from memories.retrieval.embeddings import embed_passages, embed_query
    from memories.retrieval.text import for_embedding

    # The same vector for the two forms, on both sides of a search.
    np.testing.assert_allclose(
        embed_passages([PREFERENCE_TRADITIONAL])[0], embed_passages([PREFERENCE_SIMPLIFIED])[0]
    )
    np.testing.assert_allclose(
        embed_query(PREFERENCE_TRADITIONAL), embed_query(PREFERENCE_SIMPLIFIED)
    )
    # English and simplified text are read as written; Japanese (kana) keeps its kanji.
    for text in ("Prefers short answers", PREFERENCE_SIMPLIFIED, "東京の會議は月曜日です"):
        assert for_embedding(text) == text
    assert for_embedding("會議 on Monday") == "会议 on Monday"


def test_reembed_memories_traditional_replaces_vectors_of_the_text_as_written(team):
    from io import StringIO

    from django.core.management import call_command

    from memories.retrieval.embeddings import embed_passages, to_bytes
    from memories.services import memory_create

    written = {
        "trad": PREFERENCE_TRADITIONAL,
        "simp": PREFERENCE_SIMPLIFIED,
        "en": "The user prefers short, direct answers",
    }
    made = {
        k: memory_create(team=team, scope="personal", agent_id="a", content=v)[0]
        for k, v in written.items()
    }
    # As the previous release stored it: the vector of the traditional text as written (the
    # model itself, without the reading in simplified characters).
    as_written = get_embedder()._cached_encode([PREFERENCE_TRADITIONAL], is_query=False)[0]
    assert not np.allclose(as_written, embed_passages([PREFERENCE_SIMPLIFIED])[0])
    Memory.objects.filter(pk=made["trad"].pk).update(embedding=to_bytes(as_written))
    before = {k: bytes(Memory.objects.get(pk=m.pk).embedding) for k, m in made.items()}
    index.registry.clear()

    def scores() -> dict[int, float]:
        # Through the search backend, whose index is loaded before the command runs: the new
        # vector has to reach it through the change log.
        from memories.retrieval.search import SearchQuery, memory_search

        hits = memory_search(
            SearchQuery(
                team=team,
                scope="personal",
                agent_id="a",
                text="用户喜欢什么样的回复？",
                mode="vector",
                min_score=0.0,
                limit=5,
            )
        )
        return {h.memory.pk: h.score for h in hits}

    stale = scores()
    assert stale[made["trad"].pk] != pytest.approx(stale[made["simp"].pk], abs=1e-3)

    out = StringIO()
    call_command("reembed_memories", "--traditional", "--team", team.id, stdout=out)
    assert "1 memories with Chinese in traditional characters" in out.getvalue()
    assert "re-embedded 1 memories" in out.getvalue()
    after = {k: bytes(Memory.objects.get(pk=m.pk).embedding) for k, m in made.items()}
    assert after["trad"] == to_bytes(embed_passages([PREFERENCE_SIMPLIFIED])[0])
    assert after["trad"] != before["trad"]
    assert after["simp"] == before["simp"] and after["en"] == before["en"]
    fresh = scores()
    assert fresh[made["trad"].pk] == pytest.approx(fresh[made["simp"].pk], abs=1e-4)


def test_reembed_memories_traditional_and_tokens_are_two_runs(team):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="two runs"):
        call_command("reembed_memories", "--traditional", "--tokens")


def test_a_memory_in_traditional_characters_scores_as_its_simplified_twin(api):
    # Two agents, one sentence each: the same preference in the two forms. A question in either
    # form gives both the same dense score, so min_score means the same in both.
    write(api, PREFERENCE_TRADITIONAL, agent="taipei")
    write(api, PREFERENCE_SIMPLIFIED, agent="beijing")
    for question in ("用户喜欢什么样的回复？", "使用者喜歡什麼樣的回覆？"):
        scores = [
            search(api, question, agent=agent, mode="vector", min_score=0.0)[0]["score"]
            for agent in ("taipei", "beijing")
        ]
        assert scores[0] == pytest.approx(scores[1], abs=1e-4), (question, scores)


def test_a_memory_edited_while_its_batch_is_embedded_keeps_its_new_vector(team, monkeypatch):
    from memories import services

    memory, _ = services.memory_create(
        team=team, scope="personal", agent_id="a", content=PREFERENCE_TRADITIONAL
    )
    real = services.embed_passages
    edited = "使用者改為偏好詳細的解釋"

    def edit_meanwhile(texts):  # type: ignore[no-untyped-def]
        # Another worker edits the memory between the batch's read and its write (the edit
        # embeds its own content, through the real function).
        vectors = real(texts)
        monkeypatch.setattr(services, "embed_passages", real)
        services.memory_update(memory=memory, actor=services.Actor(), content=edited)
        return vectors

    monkeypatch.setattr(services, "embed_passages", edit_meanwhile)
    assert services.memories_reembed(memory_ids=[memory.pk]) == 0
    memory.refresh_from_db()
    assert memory.content == edited
    np.testing.assert_allclose(
        np.frombuffer(bytes(memory.embedding), dtype="<f4"), real([edited])[0], rtol=1e-6
    )
    assert tokens_from_storage(memory.search_tokens) == tokenize(edited)


def test_a_stop_word_is_one_as_written_not_once_folded():
    # Vietnamese "ăn" (eat), "án" (a case, a project), "hệ" (system) fold into the English stop
    # words "an", "he": they were dropped, and "the user does not eat beef" lost its verb.
    assert "an" in tokenize("Người dùng không ăn thịt bò")
    assert "an" in tokenize("Dự án phải hoàn thành")
    assert "he" in tokenize("hệ quản trị")
    # English stop words as written still go.
    assert tokenize("an apple for him") == tokenize("apple for")
