#!/bin/bash
# bilingual set + round-2 LOCOMO fusion grid (uses cached embeddings), after run_perf.sh.
cd /tmp/embbench
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
# LOCOMO_DATA=/absolute/path/to/locomo-dev (snap-research/locomo, CC BY-NC 4.0; download it yourself)
DATA=${LOCOMO_DATA:?set LOCOMO_DATA to the absolute path of your locomo-dev folder}
while pgrep -f run_perf.sh >/dev/null; do sleep 5; done
.venv/bin/python bilingual.py --models e5,use,minilm > logs/bilingual.log 2>&1
.venv/bin/python locomo_study.py --data "$DATA" retrieval2 --models e5,use,minilm --tag round2 > logs/retrieval_round2.log 2>&1
