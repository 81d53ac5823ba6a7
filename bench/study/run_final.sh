#!/bin/bash
cd /tmp/embbench
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
while pgrep -f run_calib2.sh >/dev/null; do sleep 5; done
.venv/bin/python bilingual.py --models e5,use,minilm > logs/bilingual.log 2>&1
.venv/bin/python qlen_timing.py > logs/qlen_timing.log 2>&1
