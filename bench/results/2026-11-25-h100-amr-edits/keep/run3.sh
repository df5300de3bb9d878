#!/usr/bin/env bash
# Session 30, device call 3 (repo root, after scripts/stage-quick.sh): the in-place step keeping
# P's slot offsets across the collision (AMR_EP_KEEP=1, the binary's default) against working
# them out again for the stores (AMR_EP_KEEP=0, the kernels before), on one binary, A/B/A/B;
# then the GPU tests of both storages on the default.
source scripts/amr-gpu-lib.sh
IP="--set amr.in_place=true"
sph fixed-inplace-keep "$F $IP"
sph fixed-inplace-nokeep "$F $IP" ESOFLOW_AMR_DEFINES=AMR_EP_KEEP=0
sph fixed-inplace-keep-2 "$F $IP"
sph fixed-inplace-nokeep-2 "$F $IP" ESOFLOW_AMR_DEFINES=AMR_EP_KEEP=0
sph fixed-inplace-keep-minb3 "$F $IP" ESOFLOW_AMR_DEFINES=AMR_STEP_MINB=3
sph fixed16-inplace-keep "$F $H $IP"
sph fixed16-inplace-nokeep "$F $H $IP" ESOFLOW_AMR_DEFINES=AMR_EP_KEEP=0
sph adapt-inplace-keep "$IP"
sph fixed "$F"
amr_gpu_tests
"$S/test-cuda" gpu_cell_edits --nocapture --test-threads 1 > "$W/test-edits.log" 2>&1; echo "test edits rc $?" | tee -a "$W/test-edits.log"
