"""Search across scripts: an English query for a Chinese memory and the reverse, under defaults.

USE puts a question and its answer lower in raw cosine when they are written in different
scripts, so the search curve alone cut such answers under the default min_score 0.3. The
cross-script curves (memories.retrieval.embeddings.DEFAULT_CROSS_CALIBRATIONS) give a
cross-script pair the score its same-script twin gets: these tests hold that with sentences
written for them.
"""

from __future__ import annotations

import numpy as np
import pytest

from memories import services
from memories.models import MemoryScope
from memories.retrieval import embeddings
from memories.retrieval import search as search_service
from memories.retrieval.embeddings import Calibration, get_embedder
from memories.retrieval.text import is_cjk

from .test_memories_api import search, write

pytestmark = pytest.mark.django_db

# (query, memory in the other script, the same memory in the query's script)
RELATED = [
    (
        "Is the user allergic to peanuts?",
        "用户对花生过敏，点餐时要避开含花生的菜",
        "The user is allergic to peanuts and avoids dishes with peanuts when ordering.",
    ),
    (
        "What coffee does the user drink?",
        "用户喜欢喝无糖的冰美式咖啡",
        "The user likes unsweetened iced americano coffee.",
    ),
    (
        "Where does the user live?",
        "用户住在杭州西湖区，每天骑自行车上班",
        "The user lives in Hangzhou's West Lake district and cycles to work every day.",
    ),
    (
        "When is the weekly team meeting?",
        "每周五下午三点开团队周会，讨论迭代进度",
        "The team meeting is every Friday at 3 pm to discuss sprint progress.",
    ),
    (
        "communication style preferences of the user",
        "用户偏好简洁直接的回复，不喜欢冗长的解释",
        "The user prefers concise, direct replies and dislikes long explanations.",
    ),
    (
        "How long are server logs kept?",
        "服务器的日志保留三十天，超过后自动归档到对象存储",
        "Server logs are kept for thirty days and then archived to object storage.",
    ),
    ("用户对什么药物过敏？", "The user is allergic to penicillin.", "用户对青霉素过敏。"),
    (
        "用户养的猫叫什么名字？",
        "The user's cat is named Miso and needs medication twice a day.",
        "用户的猫叫味噌，每天需要吃两次药。",
    ),
    (
        "用户开什么车？",
        "The user drives a blue Tesla Model 3 bought in 2022.",
        "用户开一辆 2022 年买的蓝色特斯拉 Model 3。",
    ),
    (
        "用户每天早上做什么运动？",
        "The user runs 5 km every morning before work.",
        "用户每天早上上班前跑五公里。",
    ),
    (
        "用户最喜欢的作家是谁？",
        "The user's favourite author is Haruki Murakami.",
        "用户最喜欢的作家是村上春树。",
    ),
    (
        "数据库迁移用什么工具？",
        "Database migrations are written with Alembic and reviewed by the DBA before release.",
        "数据库迁移用 Alembic 编写，发布前由 DBA 审核。",
    ),
]


@pytest.fixture
def reset_embedder():
    yield
    embeddings._embedder = None
    embeddings._embedder_key = None


def _dense(query: str, memory: str) -> float:
    """The calibrated dense score search gives `memory` for `query` (vector mode)."""
    embedder = get_embedder()
    raw = float(embedder.encode_query(query) @ embedder.encode_passages([memory])[0])
    if is_cjk(query) != is_cjk(memory):
        return float(embedder.cross_score(raw, query_cjk=is_cjk(query)))
    return float(embedder.score(raw))


def test_an_english_question_finds_the_chinese_memory_by_default(api):
    write(api, "用户对花生过敏，点餐时要避开含花生的菜")
    write(api, "每周五下午三点开团队周会，讨论迭代进度")
    write(api, "服务器的日志保留三十天，超过后自动归档到对象存储")
    for query, expected in (
        ("Is the user allergic to peanuts?", "用户对花生过敏，点餐时要避开含花生的菜"),
        ("When is the weekly team meeting?", "每周五下午三点开团队周会，讨论迭代进度"),
        ("How long are server logs kept?", "服务器的日志保留三十天，超过后自动归档到对象存储"),
    ):
        found = [m["content"] for m in search(api, query, limit=5)]
        assert found[:1] == [expected], (query, found)


def test_a_chinese_question_finds_the_english_memory_by_default(api):
    write(api, "The user runs 5 km every morning before work.")
    write(api, "The user's cat is named Miso and needs medication twice a day.")
    write(api, "Database migrations are written with Alembic and reviewed by the DBA.")
    found = [m["content"] for m in search(api, "用户每天早上做什么运动？", limit=5)]
    assert found[:1] == ["The user runs 5 km every morning before work."], found


def test_a_shared_memory_in_the_other_script_is_found_by_default(team):
    """Memories shared by another agent are scored from their rows: the same curve applies."""
    memory, _ = services.memory_create(
        team=team,
        scope=MemoryScope.PERSONAL,
        agent_id="researcher",
        content="The user runs 5 km every morning before work.",
    )
    services.memory_share(memory=memory, agent_ids=["coder"], permission="read")
    found = search_service.memory_search(
        search_service.SearchQuery(
            team=team,
            scope=MemoryScope.PERSONAL,
            agent_id="coder",
            text="用户每天早上做什么运动？",
            include_shared=True,
        )
    )
    assert [h.memory.pk for h in found] == [memory.pk]
    assert found[0].score is not None and found[0].score >= 0.3


def test_an_unrelated_question_in_the_other_script_returns_nothing(api):
    write(api, "用户对花生过敏，点餐时要避开含花生的菜")
    write(api, "用户喜欢喝无糖的冰美式咖啡")
    write(api, "The user's cat is named Miso and needs medication twice a day.")
    write(api, "Database migrations are written with Alembic and reviewed by the DBA.")
    assert search(api, "What is the deployment process for the frontend?") == []
    assert search(api, "How often must passwords be rotated?") == []
    assert search(api, "用户的女儿几岁了？") == []
    assert search(api, "团队周会什么时候开？") == []


def test_a_cross_script_pair_scores_what_its_same_script_twin_scores():
    """min_score means the same across scripts: over pairs written both ways, the cross-script
    scores match their twins' on average and about as many of them reach 0.3."""
    cross = np.array([_dense(q, other) for q, other, _ in RELATED])
    same = np.array([_dense(q, twin) for q, _, twin in RELATED])
    assert abs(cross.mean() - same.mean()) < 0.05, (cross.round(2), same.round(2))
    assert abs(int((cross >= 0.3).sum()) - int((same >= 0.3).sum())) <= 1
    unrelated = [
        ("What is the deployment process?", "用户对花生过敏，点餐时要避开含花生的菜"),
        ("How often must passwords be rotated?", "用户喜欢喝无糖的冰美式咖啡"),
        ("用户的女儿几岁了？", "The user is allergic to penicillin."),
        ("团队周会什么时候开？", "The user's cat is named Miso and needs medication twice a day."),
    ]
    assert max(_dense(q, m) for q, m in unrelated) < 0.1


def test_the_cross_script_curve_follows_the_settings(settings, reset_embedder):
    raw = 0.42
    default = get_embedder()
    # An English query reaches "related" at a lower cosine than the search curve; a Chinese one
    # lower still.
    assert default.score(raw) < 0.3 <= default.cross_score(raw, query_cjk=False)
    assert default.cross_score(raw, query_cjk=False) < default.cross_score(raw, query_cjk=True)
    settings.EMBEDDING_CROSS_CALIBRATION = "0:0,0.5:0.5,1:1"
    overridden = get_embedder()
    assert overridden.cross_score(raw, query_cjk=False) == pytest.approx(0.42)
    assert overridden.cross_score(raw, query_cjk=True) == pytest.approx(0.42)
    # A custom search curve without a cross curve: cross-script pairs use the search curve.
    settings.EMBEDDING_CROSS_CALIBRATION = ""
    settings.EMBEDDING_CALIBRATION = "0:0,1:1"
    plain = get_embedder()
    assert plain.cross_score(raw, query_cjk=True) == pytest.approx(plain.score(raw))
    assert isinstance(plain.calibration, Calibration)


def test_the_cross_script_override_applies_to_any_backend(settings, reset_embedder):
    from .fake_openai import FakeOpenAI

    with FakeOpenAI() as fake:
        settings.EMBEDDING_BACKEND = "openai"
        settings.EMBEDDING_MODEL = "fake-embed"
        settings.EMBEDDING_API_BASE_URL = fake.base_url
        embedder = get_embedder()
        # No cross-script curve of its own: the search curve across scripts too.
        assert embedder.cross_score(0.5, query_cjk=True) == pytest.approx(embedder.score(0.5))
        settings.EMBEDDING_CROSS_CALIBRATION = "0:0,1:1"
        assert get_embedder().cross_score(0.5, query_cjk=True) == pytest.approx(0.5)


# --- the dictionary bridge (memories.retrieval.gloss; docs/search.md, "Cross-script scores") ---
# Pairs whose dense score alone stays under the default min_score: only the words the two
# sentences share through CC-CEDICT bring them back.
BALCONY_ZH = "用户在阳台上种西红柿和辣椒"
NEIGHBOUR_EN = "The neighbour keeps a parrot that wakes the user at dawn."


def test_the_bridge_returns_a_chinese_memory_the_embedding_alone_misses(api, settings):
    write(api, BALCONY_ZH)
    write(api, "每周五下午三点开团队周会，讨论迭代进度")
    write(api, "服务器的日志保留三十天，超过后自动归档到对象存储")
    query = "What does the user grow on the balcony?"
    assert _dense(query, BALCONY_ZH) < 0.3
    found = search(api, query, limit=5)
    assert [m["content"] for m in found][:1] == [BALCONY_ZH], found
    assert found[0]["score"] >= 0.3
    settings.SEARCH_XLING_LEXICAL_WEIGHT = 0  # off: the embedding alone
    assert BALCONY_ZH not in [m["content"] for m in search(api, query, limit=5)]


def test_the_bridge_returns_an_english_memory_the_embedding_alone_misses(api, settings):
    write(api, NEIGHBOUR_EN)
    write(api, "The user runs 5 km every morning before work.")
    write(api, "Database migrations are written with Alembic and reviewed by the DBA.")
    query = "用户的邻居养了什么宠物？"
    assert _dense(query, NEIGHBOUR_EN) < 0.3
    found = search(api, query, limit=5)
    assert [m["content"] for m in found][:1] == [NEIGHBOUR_EN], found
    settings.SEARCH_XLING_LEXICAL_WEIGHT = 0
    assert NEIGHBOUR_EN not in [m["content"] for m in search(api, query, limit=5)]


def test_the_bridge_keeps_unrelated_questions_empty(api):
    write(api, BALCONY_ZH)
    write(api, "用户喜欢喝无糖的冰美式咖啡")
    write(api, NEIGHBOUR_EN)
    write(api, "Database migrations are written with Alembic and reviewed by the DBA.")
    assert search(api, "How often must passwords be rotated?") == []
    assert search(api, "Which train does the user take to the office?") == []
    assert search(api, "用户的女儿几岁了？") == []
    assert search(api, "发票要寄到哪个地址？") == []


def test_the_bridge_only_joins_cross_script_pairs():
    from memories.retrieval.scoring import bridge

    dense = np.array([0.2, 0.2, 0.0])
    lexical = np.array([0.0, 1.0, 0.5])
    assert bridge(dense, lexical, 0.5) == pytest.approx([0.2, 0.6, 0.25])
    assert bridge(dense, lexical, 0.0) == pytest.approx(dense)


def test_the_weight_is_checked(settings):
    from memories.checks import search_settings

    settings.SEARCH_XLING_LEXICAL_WEIGHT = 1.5
    assert [e.id for e in search_settings()] == ["memories.E003"]
    settings.SEARCH_XLING_LEXICAL_WEIGHT = 0
    assert search_settings() == []
    for share in (0, 1.2):
        settings.SEARCH_XLING_DENSE_WEIGHT = share
        assert [e.id for e in search_settings()] == ["memories.E003"]


def test_beside_the_bridge_the_embedding_counts_for_less():
    from memories.retrieval.scoring import bridge

    dense = np.array([0.4, 0.4, 0.0])
    lexical = np.array([0.0, 1.0, 0.5])
    assert bridge(dense, lexical, 0.5, 0.7) == pytest.approx([0.28, 0.64, 0.25])


def test_a_cross_script_memory_without_shared_words_keeps_part_of_its_dense_score(api, settings):
    """When the bridge weighs a cross-script memory, only SEARCH_XLING_DENSE_WEIGHT of its
    embedding score counts beside the words; a memory holding a query word as written (a name,
    which BM25 sees) keeps it all; with the bridge off (weight 0) the embedding stands alone."""
    peanuts = "用户对花生过敏，点餐时要避开含花生的菜"
    write(api, peanuts)
    write(api, GRAFANA_ZH)
    query = "Is the user allergic to peanuts?"
    dense = _dense(query, peanuts)
    assert dense >= 0.3

    def score(text: str, content: str) -> float:
        found = search(api, text, limit=5, min_score=0.0)
        return next(m["score"] for m in found if m["content"] == content)

    # The index keeps 8-bit vectors and the API rounds to 4 decimals: a few thousandths apart.
    settings.SEARCH_XLING_LEXICAL_WEIGHT = 1e-9  # the bridge runs, its words weigh nothing
    assert score(query, peanuts) == pytest.approx(0.7 * dense, abs=5e-3)
    settings.SEARCH_XLING_DENSE_WEIGHT = 1.0
    assert score(query, peanuts) == pytest.approx(dense, abs=5e-3)
    settings.SEARCH_XLING_DENSE_WEIGHT = 0.7
    settings.SEARCH_XLING_LEXICAL_WEIGHT = 0  # off: the embedding alone, in full
    assert score(query, peanuts) == pytest.approx(dense, abs=5e-3)
    # "Grafana" is written in the memory: the same-script fusion, the embedding in full.
    settings.SEARCH_XLING_LEXICAL_WEIGHT = 1e-9
    named = "Does Grafana page the on-call engineer?"
    assert score(named, GRAFANA_ZH) > _dense(named, GRAFANA_ZH)


def test_the_share_of_the_embedding_changes_scores_not_the_order(api, settings):
    """SEARCH_XLING_DENSE_WEIGHT decides what passes min_score; the order of cross-script
    memories keeps the embedding in full (it ranks translations and paraphrases better than
    glossed words do: with the share in the order too, the second and third results below
    change)."""
    for content in (
        "用户对花生过敏，点餐时要避开含花生的菜",
        "用户喜欢喝无糖的冰美式咖啡",
        "每周五下午三点开团队周会，讨论迭代进度",
        "服务器的日志保留三十天，超过后自动归档到对象存储",
        "用户在阳台上种西红柿和辣椒",
        "用户开一辆蓝色的特斯拉",
        "用户每天早上上班前跑五公里",
        "用户最喜欢的作家是村上春树",
        "用户的生日是三月十二日",
        "用户在学习西班牙语，每天练习半小时",
    ):
        write(api, content)

    def ranked(query: str) -> list[tuple[str, float]]:
        found = search(api, query, limit=3, min_score=0.0)
        return [(m["content"], m["score"]) for m in found]

    for query in (
        "Server logs are kept for thirty days.",
        "The user runs five kilometres every morning.",
    ):
        settings.SEARCH_XLING_DENSE_WEIGHT = 1.0
        full = ranked(query)
        settings.SEARCH_XLING_DENSE_WEIGHT = 0.7
        share = ranked(query)
        assert [c for c, _ in share] == [c for c, _ in full], query
        assert all(a <= b for (_, a), (_, b) in zip(share, full, strict=True))
        assert share[0][1] < full[0][1]


def test_function_words_and_pronunciation_notes_gloss_nothing():
    """A Chinese word whose first meaning is English stop words only (谁 "who", 什么 "what",
    有 "to have; there is") is left out of the bridge, as English drops its stop words; a note
    on pronunciation (谁: "also pr. [shui2]") is not a meaning."""
    from memories.retrieval import gloss
    from memories.retrieval.text import tokenize

    table = gloss.glossary()
    assert {"谁", "什么", "有", "哪个", "如何"} <= table.function_words()
    assert "过敏" not in table.function_words() and "中" not in table.function_words()
    words = dict(gloss.words(tokenize("谁有什么过敏？")))
    assert list(words) == ["过敏"]
    assert not {"also", "pr", "al", "ed", "ful"} & set().union(*words.values())
    assert "谁" not in table.chinese("also")


def test_the_pieces_of_a_longer_word_are_that_word_once():
    """Search's tokenizer also cuts the pieces out of a longer word (诺曼, 诺曼人): for the bridge
    they are one word, held when any of them is, so a name's pieces read as characters do not
    count three times against the match."""
    from memories.retrieval import gloss
    from memories.retrieval.text import tokenize

    tokens = tokenize("诺曼人在哪里定居？")
    assert {"诺曼", "诺曼人"} <= set(tokens)
    words = dict(gloss.words(tokens))
    assert "诺曼" not in words
    assert {"norman", "诺曼", "诺曼人"} <= words["诺曼人"]


def test_an_irregular_form_joins_its_lemma():
    """The dictionary glosses with lemmas ("to lead"); an English sentence says "led", which
    no stemmer brings back: WordNet's exception lists do."""
    from memories.retrieval import gloss

    table = gloss.glossary()
    assert {"lead", "led"} <= table.english("领导")
    assert "领导" in table.chinese("led")
    assert {"child", "children"} <= table.english("孩子")


@pytest.fixture
def fresh_glossary(settings, tmp_path):
    from memories.retrieval import gloss

    settings.DATA_DIR = tmp_path
    gloss.reset()
    yield gloss
    gloss.reset()  # the next test loads the shared cache again


def test_the_dictionary_loads_offline_and_its_cache_is_rebuilt(fresh_glossary, monkeypatch):
    """Built from the installed package without the network, cached under DATA_DIR and read from
    that file by key (the process keeps no tables); a missing or corrupt cache is rebuilt, a
    valid one is read."""
    import socket
    import sqlite3

    gloss = fresh_glossary

    def no_network(*args, **kwargs):
        raise AssertionError("the dictionary must not need the network")

    monkeypatch.setattr(socket, "socket", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    # Built here, where the network is closed (the child's build is the same code: below).
    monkeypatch.setattr(gloss, "_build_in_child", lambda path: None)
    path = gloss.cache_path()
    assert not path.exists()
    built = gloss.glossary()
    assert {"allerg", "allergi"} <= built.english("过敏")
    assert "过敏" in built.chinese("allerg")
    assert path.exists()
    assert not isinstance(built.forward, dict) and not isinstance(built.reverse, dict)
    assert gloss.glossary() is built  # once per process
    forward, reverse = dict(built.forward.items()), dict(built.reverse.items())
    assert len(forward) > 50_000 and len(reverse) > 20_000
    assert "过敏" in built.forward and "no such word" not in built.forward
    assert built.forward.get("no such word") is None and built.reverse.get(1) is None  # type: ignore[arg-type]

    gloss.reset()
    read = gloss.glossary()  # read back from the cache
    assert read is not built
    assert dict(read.forward.items()) == forward and dict(read.reverse.items()) == reverse
    assert read.function == built.function and read.translit == built.translit
    assert "什么" in read.function_words()

    path.write_bytes(b"SQLite format 3\x00 broken")
    gloss.reset()
    assert gloss.glossary().english("过敏") == built.english("过敏")
    with sqlite3.connect(path) as conn:
        stored = conn.execute("SELECT v FROM forward WHERE k = ?", ("过敏",)).fetchone()
    assert stored == (forward["过敏"],)


def test_a_missing_cache_is_built_by_a_child_process(fresh_glossary, monkeypatch, caplog):
    """A long-lived process keeps ~40 MB of what a build leaves (docs/benchmarks.md): on a miss
    the cache is built by a child interpreter, and this process only reads the file."""
    import logging

    gloss = fresh_glossary

    def not_here(source):
        raise AssertionError("the glossary must not be built in this process")

    monkeypatch.setattr(gloss, "_build", not_here)
    with caplog.at_level(logging.INFO, logger=gloss.__name__):
        table = gloss.glossary()
    assert gloss.cache_path().exists()
    assert {"allerg", "allergi"} <= table.english("过敏")
    assert "in this process" not in caplog.text and "child process" not in caplog.text


def test_a_child_that_cannot_build_leaves_it_to_this_process(fresh_glossary, monkeypatch, caplog):
    """A child that cannot set Django up as this process did (here: settings it cannot import)
    fails; the glossary is then built here, and the search works as before."""
    import logging

    gloss = fresh_glossary
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "no.such.settings")
    with caplog.at_level(logging.INFO, logger=gloss.__name__):
        table = gloss.glossary()
    assert "building the gloss cache in a child process failed" in caplog.text
    assert "No module named 'no'" in caplog.text  # the child's own error is in the log
    assert "in this process" in caplog.text
    assert gloss.cache_path().exists() and "过敏" in table.forward


# A process that loads the glossary: whether it built the cache itself, and whether it reads it.
LOAD_GLOSSARY = """
import json
import django
django.setup()
from memories.retrieval import gloss
built = []
build_here = gloss._build_here
def counted(path):
    built.append(path)
    return build_here(path)
gloss._build_here = counted
table = gloss.glossary()
print(json.dumps({"built": len(built), "reads": "过敏" in table.forward}))
"""


def test_workers_starting_together_on_a_new_data_dir_build_the_cache_once(fresh_glossary):
    """Three processes that miss the cache at once: one builds it, the others wait for its lock
    and read the file it wrote."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    gloss = fresh_glossary
    env = {**os.environ, "DATA_DIR": str(gloss.cache_path().parent)}
    root = Path(__file__).resolve().parent.parent
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", LOAD_GLOSSARY],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    answers = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        answers.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(a["built"] for a in answers) == [0, 0, 1], answers
    assert all(a["reads"] for a in answers)
    assert gloss.cache_path().exists()


def test_a_child_with_other_settings_refuses_to_build(fresh_glossary):
    """The tables depend on the tokenizer's settings: a child whose settings would key the cache
    differently from this process's builds nothing (this process does)."""
    from memories.retrieval import gloss_build

    gloss = fresh_glossary
    path = gloss.cache_path()
    assert gloss_build.main([str(path), "cedict-gloss-other-key.sqlite3"]) == gloss_build.WRONG_KEY
    assert not path.exists()


def test_the_glossary_file_is_reopened_in_a_forked_child(fresh_glossary):
    """A gunicorn master that loaded the glossary forks workers: each child opens the file again
    instead of using its parent's SQLite connection."""
    import os

    gloss = fresh_glossary
    table = gloss.glossary()
    assert "过敏" in table.forward  # the parent's connection is open
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer through the pipe, never return into pytest
        try:
            ok = "过敏" in table.forward and table.forward._file._pid == os.getpid()
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"1"
    assert table.forward._file._pid == os.getpid()  # the parent's own connection is kept


def test_the_console_review_search_crosses_scripts_too(team):
    """The console's search is the API's (memory_review_search runs memory_search per scope)."""
    memory, _ = services.memory_create(
        team=team, scope=MemoryScope.PERSONAL, agent_id="assistant", content=BALCONY_ZH
    )
    found = search_service.memory_review_search(
        team=team, query="What does the user grow on the balcony?"
    )
    assert [mid for mid, _ in found] == [memory.pk]


# --- a change of script ends a word (text.tokenize) ---
# Chinese text glues numbers and Latin names to the next word; read as one token ("2023年3月到期",
# "grafana的告警改成每天汇总一次") they matched neither the number, the name nor the Chinese words,
# in either script. Examples written for these tests.
CONTRACT_ZH = "合同在2023年3月到期，需要提前两个月续签"
GRAFANA_ZH = "运维组决定把Grafana的告警改成每天汇总一次"


def test_numbers_and_latin_names_glued_to_chinese_words_are_words_of_their_own():
    from memories.retrieval.text import tokenize

    assert {"2023", "3", "到期", "续签"} <= set(tokenize(CONTRACT_ZH))
    assert {"grafana", "告警"} <= set(tokenize(GRAFANA_ZH))
    assert "bskyb" in tokenize("BSkyB是什么时候成立的？")
    for tok in tokenize(CONTRACT_ZH) + tokenize(GRAFANA_ZH):
        assert is_cjk(tok) or tok.isascii(), tok  # no token mixes the two scripts


def test_a_possessive_is_its_noun():
    from memories.retrieval.text import tokenize

    # "Kublai's" meets "Kublai" (and the dictionary's glosses of 忽必烈); "it's" is a stop word.
    assert tokenize("Kublai's government") == ("kublai", "govern")
    assert tokenize("It's the team’s winner") == ("team", "winner")
    # Contractions, decimals and hyphenated words stay whole.
    assert tokenize("Don't stop at 3.5 e-mails") == ("don't", "stop", "3.5", "e-mails")


def test_a_glued_name_or_number_is_found_by_keyword_in_a_chinese_memory(api):
    write(api, CONTRACT_ZH)
    write(api, GRAFANA_ZH)
    write(api, "用户喜欢喝无糖的冰美式咖啡")
    found = search(api, "Grafana", mode="keyword", min_score=0.0)
    assert [m["content"] for m in found][:1] == [GRAFANA_ZH], found
    found = search(api, "2023", mode="keyword", min_score=0.0)
    assert [m["content"] for m in found][:1] == [CONTRACT_ZH], found
    # The Chinese word after the number is a word too (same script).
    found = search(api, "续签", mode="keyword", min_score=0.0)
    assert [m["content"] for m in found][:1] == [CONTRACT_ZH], found


def test_an_english_question_finds_a_chinese_memory_through_a_glued_name(api):
    write(api, GRAFANA_ZH)
    write(api, "每周五下午三点开团队周会，讨论迭代进度")
    write(api, "服务器的日志保留三十天，超过后自动归档到对象存储")
    query = "How often does Grafana send alerts?"
    assert _dense(query, GRAFANA_ZH) < 0.3  # the embedding alone does not return it
    found = search(api, query, limit=5)
    assert [m["content"] for m in found][:1] == [GRAFANA_ZH], found
    assert found[0]["score"] >= 0.3
