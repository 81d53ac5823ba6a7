#!/bin/bash
# bilingual set + round-2 LOCOMO fusion grid (uses cached embeddings), after run_perf.sh.
cd /tmp/embbench
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
while pgrep -f run_perf.sh >/dev/null; do sleep 5; done
.venv/bin/python bilingual.py --models e5,use,minilm > logs/bilingual.log 2>&1
.venv/bin/python locomo_study.py retrieval2 --models e5,use,minilm --tag round2 > logs/retrieval_round2.log 2>&1
