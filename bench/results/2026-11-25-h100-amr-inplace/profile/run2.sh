#!/usr/bin/env bash
# Session 29, second in-place binary (P offsets worked out again after the collision, the halo
# table in global memory; the test compares fluid cells only): the GPU tests in place, then
# where the time goes (ESOFLOW_AMR_PROFILE=1: each launch waited for, per kernel), two buffers
# against in place, and in-place variants of the step and restriction through NVRTC defines.
set -uo pipefail
. scripts/amr-gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee "$W/device.txt"
ESOFLOW_AMR_INPLACE=1 timeout 200 "$S/test-cuda" gpu_adapt --nocapture --test-threads 1 > "$W/test-amr-inplace.log" 2>&1; echo "test amr inplace rc $?" | tee -a "$W/test-amr-inplace.log"
grep -h "test result\|FAILED\|panicked\|differ" "$W"/test-*.log | cut -c1-200 | head -20
prof() {
  env "${@:2}" ESOFLOW_AMR_PROFILE=1 "$S/esoflow" bench --amr "$S/scenes/sphere_3d.toml" --backend cuda --steps 100 --seconds 2 --set amr.enabled=true --set amr.max_level=1 $F > "$W/prof-$1.log" 2>&1
  echo "== $1"; grep -h "amr kernel" "$W/prof-$1.log"
}
prof two X=1
prof inplace ESOFLOW_AMR_INPLACE=1
prof inplace-avg2 ESOFLOW_AMR_INPLACE=1 ESOFLOW_AMR_DEFINES="AMR_AVG_MINB=2"
sph fixed "$F" X=1
sph fixed-inplace "$F" ESOFLOW_AMR_INPLACE=1
sph fixed-inplace-keep "$F" ESOFLOW_AMR_INPLACE=1 ESOFLOW_AMR_DEFINES="AMR_EP_KEEP_P=1"
sph fixed-inplace-step2 "$F" ESOFLOW_AMR_INPLACE=1 ESOFLOW_AMR_DEFINES="AMR_STEP_MINB=2"
sph fixed-inplace-avg2 "$F" ESOFLOW_AMR_INPLACE=1 ESOFLOW_AMR_DEFINES="AMR_AVG_MINB=2"
sph fixed-inplace-nopairs "$F" ESOFLOW_AMR_INPLACE=1 ESOFLOW_AMR_DEFINES="AMR_STEP_PAIRS=0"
sph fixed-inplace-serial "$F" ESOFLOW_AMR_INPLACE=1 ESOFLOW_AMR_SERIAL=1
sph fixed-serial "$F" ESOFLOW_AMR_SERIAL=1
tar czf $OUT/w.tar.gz -C $OUT w
