#!/bin/bash
# Timing, bilingual, calibration and 100k-scale runs, strictly one after another (1 thread each).
set -x
cd /tmp/embbench
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
# LOCOMO_DATA=/absolute/path/to/locomo-dev (snap-research/locomo, CC BY-NC 4.0; download it yourself)
DATA=${LOCOMO_DATA:?set LOCOMO_DATA to the absolute path of your locomo-dev folder}
PY=.venv/bin/python
for m in e5 use minilm; do $PY locomo_study.py --data "$DATA" timing --model $m; done
$PY bilingual.py --models e5,use,minilm
$PY locomo_study.py --data "$DATA" calib --models e5,use,minilm
for m in e5 use; do $PY locomo_study.py --data "$DATA" scale --model $m --n 100000 --q 300; done
