"""Scripts the embedding model never learnt (Hebrew, Greek, the Indic scripts…): its vectors of
such texts are nearly one point, so search, dedup and the offline engine go by their words
(docs/search.md, "Scripts the model does not read"). Through the real stack and model."""

from __future__ import annotations

import pytest

from lifecycle.offline import OfflineEngine
from memories.models import Memory

from .helpers import ok_data
from .test_embeddings import UNRELATED
from .test_memories_api import search, write

pytestmark = pytest.mark.django_db

HEBREW = UNRELATED["he"]  # likes green tea / lives in Haifa / password monthly / meeting Tuesday


def _ids(hits):
    return [h["id"] for h in hits]


def test_a_question_nothing_answers_comes_back_empty(api):
    for text in HEBREW:
        write(api, text)
    # "What is the weather today?": no memory says anything about it.
    assert search(api, "מה מזג האוויר היום") == []
    # "Football match results" in Bengali, against Bengali memories.
    for text in UNRELATED["bn"]:
        write(api, text, agent="bn")
    assert search(api, "ফুটবল ম্যাচের ফলাফল", agent="bn") == []


def test_the_words_it_shares_find_the_memory(api):
    ids = [ok_data(write(api, text))["id"] for text in HEBREW]
    # "Where does the user live? in Haifa?": the city is the word that tells.
    found = search(api, "המשתמש גר בחיפה?")
    assert _ids(found)[:1] == [ids[1]], found
    # "The meeting" finds the meeting, and not the three others.
    assert _ids(search(api, "הפגישה")) == [ids[3]]


def test_an_inflected_greek_question_finds_the_memory(api):
    target = ok_data(write(api, "Ο χρήστης μένει στη Θεσσαλονίκη"))["id"]
    write(api, "Η συνάντηση είναι την Τρίτη")
    # "Where do the users live?": plural forms of both words the memory holds, and no word as
    # written; "where" and "the" hold nothing, so the match is weak but first and alone.
    found = search(api, "Πού μένουν οι χρήστες;", min_score=0.0)
    assert _ids(found) == [target], found


def test_an_explicit_vector_search_still_gets_the_model(api):
    for text in HEBREW:
        write(api, text)
    # Asked for, the dense side alone is what the caller gets (and scores everything alike).
    assert len(search(api, "מה מזג האוויר היום", mode="vector")) == len(HEBREW)


def test_a_script_the_model_reads_keeps_its_dense_side(api):
    ids = [ok_data(write(api, text))["id"] for text in UNRELATED["ru"]]
    # "Where does the user live" shares only "user" with the Kazan memory: the model finds it.
    found = search(api, "Где обитает пользователь")
    assert _ids(found)[:1] == [ids[1]], found


def test_near_writes_are_not_linked_to_every_memory_of_the_script(api):
    for text in HEBREW:
        write(api, text)
    data = ok_data(write(api, "המשתמש אוהב קפה שחור"))  # likes black coffee: a new fact
    assert "related_to" not in data["metadata"]
    assert Memory.objects.count() == len(HEBREW) + 1
    # A copy of a stored memory is still a duplicate.
    again = write(api, HEBREW[2])
    assert again.status_code == 200 and ok_data(again)["dedup_skipped"] is True


# Vietnamese is written in Latin letters the model reads, in a language it never learnt: these
# questions scored the unrelated memories at 0.6-0.9, and a default search returned them all.
VIETNAMESE = [
    "Người dùng thích uống trà xanh vào buổi sáng.",
    "Người dùng sống ở thành phố Đà Nẵng.",
    "Mật khẩu máy chủ được thay đổi mỗi tháng.",
    "Cuộc họp nhóm diễn ra vào thứ Ba hàng tuần.",
    "Người dùng bị dị ứng với đậu phộng.",
    "Người dùng làm kỹ sư phần mềm tại một công ty ngân hàng.",
]


def test_vietnamese_questions_nothing_answers_come_back_empty(api):
    ids = [ok_data(write(api, text, agent="vi"))["id"] for text in VIETNAMESE]
    for question in (
        "Tỷ số trận bóng đá tối qua là bao nhiêu?",  # last night's football score
        "Xe ô tô của người dùng màu gì?",  # the colour of the user's car
        "Người dùng có bao nhiêu anh chị em?",  # how many siblings the user has
        "Mã xác thực hai lớp được gửi qua đâu?",  # where the two-factor code is sent
    ):
        assert search(api, question, agent="vi") == [], question
    # "Where does the user live?": its memory, alone (the password memory came second at 0.9).
    assert _ids(search(api, "Người dùng sống ở đâu?", agent="vi")) == [ids[1]]
    assert _ids(search(api, "Người dùng dị ứng với thứ gì?", agent="vi")) == [ids[4]]


def test_the_offline_compress_keeps_each_fact(settings):
    summaries, _ = OfflineEngine().compress(HEBREW, 1)
    assert len(summaries) == 1
    assert all(text in summaries[0].content for text in HEBREW), summaries[0].content
    # A repeat is still a repeat.
    summaries, _ = OfflineEngine().compress([*HEBREW, HEBREW[0] + "!"], 1)
    assert summaries[0].content.count(HEBREW[0]) == 1
