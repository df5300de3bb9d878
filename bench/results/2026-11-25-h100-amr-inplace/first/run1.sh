#!/usr/bin/env bash
# Session 29, first in-place (Esoteric-Pull) binary: the adaptive-block GPU tests with
# ESOFLOW_AMR_INPLACE=1 (against the CPU reference, bit for bit) and without (the two-buffer
# path after the shared edge-value refactor), then fixed and adapting sphere A/B.
set -uo pipefail
. scripts/amr-gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee "$W/device.txt"
ESOFLOW_AMR_INPLACE=1 timeout 240 "$S/test-cuda" gpu_adapt --nocapture --test-threads 1 > "$W/test-amr-inplace.log" 2>&1; echo "test amr inplace rc $?" | tee -a "$W/test-amr-inplace.log"
timeout 200 "$S/test-cuda" gpu_adaptive_blocks_match_cpu --nocapture --test-threads 1 > "$W/test-amr.log" 2>&1; echo "test amr rc $?" | tee -a "$W/test-amr.log"
grep -h "test result\|FAILED\|panicked\|rel diff" "$W"/test-*.log | cut -c1-300 | head -30
dense fp32
for r in 1 2; do
  sph fixed-$r "$F" X=1
  sph fixed-inplace-$r "$F" ESOFLOW_AMR_INPLACE=1
done
sph adapt "" X=1
sph adapt-inplace "" ESOFLOW_AMR_INPLACE=1
sph fixed16 "$F $H" X=1
sph fixed16-inplace "$F $H" ESOFLOW_AMR_INPLACE=1
tar czf $OUT/w.tar.gz -C $OUT w
