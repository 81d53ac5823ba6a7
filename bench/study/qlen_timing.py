"""e5 / USE / MiniLM single-query CPU time as a function of query length (1 thread).
    .venv/bin/python qlen_timing.py"""
import time
import json
import numpy as np
import locomo_study as L

words = ("what did the user say about the new project deadline and the budget for the next "
         "quarter when we met with the marketing team last tuesday afternoon in the office").split()
out = {}
for m in ("e5", "use", "minilm"):
    mod = L.get_model(m)
    mod.query(["warm"])
    out[m] = {}
    for n in (2, 4, 8, 16, 30):
        q = " ".join(words[:n])
        ts = []
        for _ in range(30):
            c = time.process_time()
            mod.query(q)
            ts.append(1000 * (time.process_time() - c))
        out[m][n] = float(np.median(ts))
    print(m, " ".join("%dw:%.1fms" % (k, v) for k, v in out[m].items()), flush=True)
json.dump(out, open("results/qlen_timing.json", "w"), indent=1)
