"""Small hand-written Chinese/English memory set (30 memories, 26 queries) + calibration pairs.

Run:  OMP_NUM_THREADS=1 .venv/bin/python bilingual.py [--models e5,use,minilm]
Prints R@1 / R@5 per direction (zh->zh, en->en, en->zh, zh->en) for each dense model, BM25 and
BM25+dense fusion; writes results/bilingual.json.  The pair lists below are also used by
`locomo_study.py calib`.
"""
import json
import os
import sys

import locomo_study as L  # sets the 1-thread env vars first
import numpy as np

MEM = {
    # ---- Chinese
    "z1": "用户偏好简洁直接的回复，不喜欢冗长的解释",
    "z2": "Java 接口规范：ResultBean 统一返回格式，@ControllerAdvice 全局异常处理",
    "z3": "用户对花生过敏，点餐时要避开含花生的菜",
    "z4": "项目使用 PostgreSQL 16 作为主数据库，Redis 做缓存",
    "z5": "用户住在杭州西湖区，每天骑自行车上班",
    "z6": "每周五下午三点开团队周会，讨论迭代进度",
    "z7": "用户正在学习日语，目标是明年通过 N2 考试",
    "z8": "前端代码统一使用 TypeScript 和 ESLint，提交前必须通过 lint 检查",
    "z9": "用户的女儿叫小雨，今年六岁，喜欢画画",
    "z10": "部署流程：先合并到 main 分支，CI 通过后自动发布到预发环境",
    "z11": "用户喜欢喝无糖的冰美式咖啡",
    "z12": "服务器的日志保留三十天，超过后自动归档到对象存储",
    "z13": "用户计划十月份去云南旅行，预算一万元",
    "z14": "代码评审至少需要两位同事批准才能合并",
    "z15": "用户习惯晚上十一点以后写代码，早上不要安排会议",
    # ---- English
    "e1": "The user prefers dark mode in every editor and terminal.",
    "e2": "API errors must return a JSON body with the fields code, message and request_id.",
    "e3": "The user's cat is named Miso and needs medication twice a day.",
    "e4": "Our team runs Kubernetes on AWS; staging lives in the eu-west-1 region.",
    "e5": "The user is vegetarian and avoids fish as well.",
    "e6": "Quarterly planning happens in the first week of January, April, July and October.",
    "e7": "The user runs 5 km every morning before work.",
    "e8": "Database migrations are written with Alembic and reviewed by the DBA before release.",
    "e9": "The user's favourite author is Haruki Murakami.",
    "e10": "Passwords must be rotated every 90 days and stored only in the vault.",
    "e11": "The user wants weekly summaries sent on Monday mornings by email.",
    "e12": "The user is allergic to penicillin.",
    "e13": "Unit test coverage must stay above 80 percent for the backend services.",
    "e14": "The user drives a blue Tesla Model 3 bought in 2022.",
    "e15": "The user speaks French and Spanish fluently and is learning German.",
}

QUERIES = [
    # zh -> zh
    ("zh->zh", "用户的沟通风格偏好", "z1"),
    ("zh->zh", "接口返回格式规范", "z2"),
    ("zh->zh", "用户有什么食物过敏", "z3"),
    ("zh->zh", "项目用的是什么数据库", "z4"),
    ("zh->zh", "团队例会是什么时候", "z6"),
    ("zh->zh", "代码合并需要几个人审批", "z14"),
    ("zh->zh", "用户孩子的情况", "z9"),
    # en -> en
    ("en->en", "What editor theme does the user like?", "e1"),
    ("en->en", "How should API errors be formatted?", "e2"),
    ("en->en", "What is the name of the user's pet?", "e3"),
    ("en->en", "Which cloud region is staging in?", "e4"),
    ("en->en", "What are the user's dietary restrictions?", "e5"),
    ("en->en", "How often must passwords be changed?", "e10"),
    ("en->en", "What languages does the user speak?", "e15"),
    # en -> zh
    ("en->zh", "What coffee does the user drink?", "z11"),
    ("en->zh", "How long are server logs kept?", "z12"),
    ("en->zh", "Where is the user travelling in October?", "z13"),
    ("en->zh", "Which language is the user studying for an exam?", "z7"),
    ("en->zh", "What is the deployment process?", "z10"),
    ("en->zh", "When does the user usually write code?", "z15"),
    # zh -> en
    ("zh->en", "用户每天早上做什么运动", "e7"),
    ("zh->en", "数据库迁移用什么工具", "e8"),
    ("zh->en", "用户最喜欢的作家是谁", "e9"),
    ("zh->en", "用户对什么药物过敏", "e12"),
    ("zh->en", "后端单元测试覆盖率要求", "e13"),
    ("zh->en", "用户开什么车", "e14"),
]

# ---- calibration pairs (memory <-> memory) -------------------------------------------
NEAR_DUP = [  # punctuation / casing / word order / one synonym
    (MEM["e1"], "The user prefers dark mode in every editor and terminal"),
    (MEM["e1"], "the user prefers dark mode in every terminal and editor."),
    (MEM["e7"], "Every morning before work, the user runs 5 km."),
    (MEM["e12"], "The user is allergic to penicillin!"),
    (MEM["e10"], "Passwords must be rotated every 90 days and kept only in the vault."),
    (MEM["e14"], "The user drives a blue Tesla Model 3, bought in 2022."),
    (MEM["z11"], "用户喜欢喝无糖的冰美式咖啡。"),
    (MEM["z5"], "用户住在杭州西湖区, 每天骑车上班"),
    (MEM["z1"], "用户偏好简洁、直接的回复；不喜欢冗长的解释。"),
    (MEM["z14"], "代码评审至少要两位同事批准才能合并"),
    (MEM["z6"], "每周五下午3点开团队周会，讨论迭代进度"),
]
PARAPHRASE = [
    (MEM["e1"], "In all editors and terminals, the user likes a dark theme."),
    (MEM["e7"], "Every morning before work, the user goes for a five-kilometre run."),
    (MEM["e12"], "Penicillin causes an allergic reaction in the user."),
    (MEM["e10"], "Rotate passwords every ninety days and keep them solely in the vault."),
    (MEM["e9"], "Haruki Murakami is the writer the user likes most."),
    (MEM["e11"], "Send the user a weekly summary by email every Monday morning."),
    (MEM["z1"], "用户喜欢简短直接的回答，讨厌啰嗦的说明"),
    (MEM["z3"], "用户花生过敏，点菜时不能有花生"),
    (MEM["z6"], "团队周会定在每周五15点，讨论迭代进展"),
    (MEM["z11"], "用户爱喝不加糖的冰美式"),
    (MEM["z14"], "合并代码前需要至少两名同事审核通过"),
]
TRANSLATION = [
    (MEM["z1"], "The user prefers concise, direct replies and dislikes long explanations."),
    (MEM["z3"], "The user is allergic to peanuts; avoid dishes with peanuts when ordering."),
    (MEM["z4"], "The project uses PostgreSQL 16 as its main database and Redis for caching."),
    (MEM["z11"], "The user likes unsweetened iced Americano coffee."),
    (MEM["e7"], "用户每天上班前早上跑步5公里。"),
    (MEM["e9"], "用户最喜欢的作家是村上春树。"),
    (MEM["e12"], "用户对青霉素过敏。"),
]
CONTRADICT = [  # a number or a negation differs: the newer one must win, not be merged away
    ("Test coverage went from 75% to 92% this sprint.", "Test coverage went from 92% to 75% this sprint."),
    ("Project completion is at 75%.", "Project completion is at 92%."),
    (MEM["e7"], "The user runs 10 km every morning before work."),
    (MEM["e13"], "Unit test coverage must stay above 60 percent for the backend services."),
    ("The user is vegetarian.", "The user is not vegetarian."),
    ("The user likes dark mode.", "The user does not like dark mode."),
    (MEM["e10"], "Passwords must be rotated every 30 days and stored only in the vault."),
    ("用户每天跑步5公里", "用户每天跑步10公里"),
    ("用户喜欢喝咖啡", "用户不喜欢喝咖啡"),
    (MEM["z13"], "用户计划十月份去云南旅行，预算两万元"),
    (MEM["z12"], "服务器的日志保留九十天，超过后自动归档到对象存储"),
    ("用户对花生过敏", "用户对花生不过敏"),
]


def lang(t):
    return "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in t) else "en"


def evaluate(models):
    ids = list(MEM)
    texts = [MEM[i] for i in ids]
    gold = [ids.index(g) for _, _, g in QUERIES]
    qtexts = [q for _, q, _ in QUERIES]
    dirs = ["zh->zh", "en->en", "en->zh", "zh->en"]
    tk = lambda t: L.tokenize(t, stop="nltk", stem=True)
    bm = L.BM25([tk(t) for t in texts], k1=0.9, b=0.4)   # the recommended BM25 setting
    B = [bm.scores(tk(q)) for q in qtexts]
    COV = [np.minimum(bm.scores(tk(q)) / max(bm.idf_mass(tk(q)), 1e-9), 1.0) for q in qtexts]
    systems = {"bm25": B}
    cos = {}
    for m in models:
        mod = L.get_model(m)
        D = np.asarray(mod.passage(texts))
        Q = np.asarray(mod.query(qtexts))
        S = [D @ Q[i] for i in range(len(qtexts))]
        cos[m] = dict(S=[x.tolist() for x in S])
        systems["dense " + m] = S
        systems["%s+bm25 minmax a=.5" % m] = [L.weighted([B[i], S[i]], (.5, .5), "minmax", positive=[True, False])
                                              for i in range(len(qtexts))]
        systems["%s+bm25 RRF" % m] = [L.rrf([B[i], S[i]], (1, 1), positive=[True, False]) for i in range(len(qtexts))]
        for a in (0.3, 0.4, 0.6, 0.7):
            systems["%s+bm25 minmax a=%.1f" % (m, a)] = [
                L.weighted([B[i], S[i]], (1 - a, a), "minmax", positive=[True, False]) for i in range(len(qtexts))]
        # script-aware: a memory whose script differs from the query's (CJK vs not) cannot be
        # matched by BM25, so it is scored on the dense side alone with the full weight
        qcjk = [lang(q) == "zh" for q in qtexts]
        mcjk = np.array([lang(t) == "zh" for t in texts])
        for a in (0.3,):
            def sa(i, a=a):
                f = L.weighted([B[i], S[i]], (1 - a, a), "minmax", positive=[True, False])
                d = L.normalise(S[i], "minmax", 100, False)
                other = mcjk != qcjk[i]
                return np.where(other, d, f)
            systems["%s+bm25 minmax a=%.1f script-aware" % (m, a)] = [sa(i) for i in range(len(qtexts))]
        for a in (0.3, 0.5, 0.7):
            systems["%s+bm25 idfcov+minmax a=%.1f" % (m, a)] = [
                L.weighted([COV[i], S[i]], (1 - a, a), ["raw", "minmax"], positive=[True, False])
                for i in range(len(qtexts))]
        # same-language bias: for each query, how often a wrong same-language memory beats the gold one
        wrong_max = [float(np.max(np.delete(S[i], gold[i]))) for i in range(len(qtexts))]
        cos[m]["gold"] = [float(S[i][gold[i]]) for i in range(len(qtexts))]
        cos[m]["wrong_max"] = wrong_max
    res = {}
    for name, S in systems.items():
        row = {}
        for d in dirs + ["total"]:
            sel = [i for i, (dd, _, _) in enumerate(QUERIES) if d == "total" or dd == d]
            r1 = sum(int(np.argmax(S[i]) == gold[i]) for i in sel)
            r5 = sum(int(gold[i] in np.argsort(-np.asarray(S[i]), kind="stable")[:5]) for i in sel)
            row[d] = (r1, r5, len(sel))
        res[name] = row
    return res, cos


def main():
    models = "e5,use,minilm"
    if "--models" in sys.argv:
        models = sys.argv[sys.argv.index("--models") + 1]
    res, cos = evaluate(models.split(","))
    dirs = ["zh->zh", "en->en", "en->zh", "zh->en", "total"]
    print("| system | " + " | ".join(dirs) + " |")
    print("| --- " * (len(dirs) + 1) + "|")
    for name, row in res.items():
        print("| %s | " % name + " | ".join("%d (%d) /%d" % row[d] for d in dirs) + " |")
    for m, c in cos.items():
        print("%s gold cos min/p50/max %s ; best wrong min/p50/max %s" % (
            m, np.round(L.pct(c["gold"], (0, 50, 100)), 3), np.round(L.pct(c["wrong_max"], (0, 50, 100)), 3)))
    os.makedirs(os.path.join(L.HERE, "results"), exist_ok=True)
    with open(os.path.join(L.HERE, "results", "bilingual.json"), "w") as fh:
        json.dump({"recall": res, "cos": cos}, fh, indent=1)


if __name__ == "__main__":
    main()
