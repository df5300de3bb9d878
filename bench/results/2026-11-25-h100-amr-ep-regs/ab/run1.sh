#!/usr/bin/env bash
# Session 31, device call 1 (repo root, after scripts/stage-quick.sh): the in-place step with
# global loads and stores of its slots (AMR_EP_GLOBAL) and the pushes' sums worked out again after
# the collision (AMR_EP_RECOMPUTE: 96 registers, none spilled at 80), at launch bounds 2 and 3,
# against the step before (both 0) and the two-buffer step; then the GPU tests with bound 3.
source scripts/amr-gpu-lib.sh
IP="--set amr.in_place=true"
sph fixed "$F"
sph fixed-ip "$F $IP"
sph fixed-ip-minb3 "$F $IP" ESOFLOW_AMR_DEFINES=AMR_STEP_MINB=3
sph fixed-ip-old "$F $IP" "ESOFLOW_AMR_DEFINES=AMR_EP_GLOBAL=0 AMR_EP_RECOMPUTE=0"
sph fixed-ip-globalonly "$F $IP" ESOFLOW_AMR_DEFINES=AMR_EP_RECOMPUTE=0
sph fixed-ip-minb3-nopairs "$F $IP" "ESOFLOW_AMR_DEFINES=AMR_STEP_MINB=3 AMR_STEP_PAIRS=0"
sph fixed16 "$F $H"
sph fixed16-ip "$F $H $IP"
sph fixed16-ip-minb3 "$F $H $IP" ESOFLOW_AMR_DEFINES=AMR_STEP_MINB=3
sph adapt ""
sph adapt-ip-minb3 "$IP" ESOFLOW_AMR_DEFINES=AMR_STEP_MINB=3
sph fixed-2 "$F"
sph fixed-ip-2 "$F $IP"
sph fixed-ip-minb3-2 "$F $IP" ESOFLOW_AMR_DEFINES=AMR_STEP_MINB=3
amr_gpu_tests ESOFLOW_AMR_DEFINES=AMR_STEP_MINB=3
"$S/test-cuda" gpu_cell_edits --nocapture --test-threads 1 > "$W/test-edits.log" 2>&1; echo "test edits rc $?" | tee -a "$W/test-edits.log"
