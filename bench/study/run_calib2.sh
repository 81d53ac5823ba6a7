#!/bin/bash
# calibration re-run (edits applied to the turn body), after run_round2.sh.
cd /tmp/embbench
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
# LOCOMO_DATA=/absolute/path/to/locomo-dev (snap-research/locomo, CC BY-NC 4.0; download it yourself)
DATA=${LOCOMO_DATA:?set LOCOMO_DATA to the absolute path of your locomo-dev folder}
while pgrep -f run_round2.sh >/dev/null; do sleep 5; done
.venv/bin/python locomo_study.py --data "$DATA" calib --models e5,use,minilm > logs/calib.log 2>&1
.venv/bin/python calib_anchors.py > logs/calib_anchors.log 2>&1
