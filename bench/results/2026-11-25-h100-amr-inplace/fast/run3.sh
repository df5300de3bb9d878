#!/usr/bin/env bash
# Session 29, third binary (in-place accessors with an in-block fast path, the restriction loading
# a tap cell's DDFs at once; GPU tests run both storages): the tests, then two buffers against
# in place on the sphere with the in-place restriction and step at launch bound 2 (NVRTC defines).
set -uo pipefail
. scripts/amr-gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee "$W/device.txt"
timeout 300 "$S/test-cuda" gpu_adapt --nocapture --test-threads 1 > "$W/test-amr.log" 2>&1; echo "test amr rc $?" | tee -a "$W/test-amr.log"
grep -h "test result\|FAILED\|panicked\|rel diff\| with data differ" "$W"/test-*.log | grep -v " 0 with data" | cut -c1-220 | head -30
prof() {
  env "${@:2}" ESOFLOW_AMR_PROFILE=1 "$S/esoflow" bench --amr "$S/scenes/sphere_3d.toml" --backend cuda --steps 100 --seconds 2 --set amr.enabled=true --set amr.max_level=1 $F > "$W/prof-$1.log" 2>&1
  echo "== $1"; grep -h "amr kernel" "$W/prof-$1.log"
}
prof inplace ESOFLOW_AMR_INPLACE=1
prof inplace-avg2 ESOFLOW_AMR_INPLACE=1 ESOFLOW_AMR_DEFINES="AMR_AVG_MINB=2"
sph fixed "$F" X=1
sph fixed-inplace "$F" ESOFLOW_AMR_INPLACE=1
sph fixed-inplace-avg2 "$F" ESOFLOW_AMR_INPLACE=1 ESOFLOW_AMR_DEFINES="AMR_AVG_MINB=2"
sph fixed-inplace-avg2-step2 "$F" ESOFLOW_AMR_INPLACE=1 ESOFLOW_AMR_DEFINES="AMR_AVG_MINB=2 AMR_STEP_MINB=2"
sph fixed-inplace-avg2-interp2 "$F" ESOFLOW_AMR_INPLACE=1 ESOFLOW_AMR_DEFINES="AMR_AVG_MINB=2 AMR_INTERP_MINB=2"
sph adapt-inplace-avg2 "" ESOFLOW_AMR_INPLACE=1 ESOFLOW_AMR_DEFINES="AMR_AVG_MINB=2"
sph fixed16-inplace-avg2 "$F $H" ESOFLOW_AMR_INPLACE=1 ESOFLOW_AMR_DEFINES="AMR_AVG_MINB=2"
tar czf $OUT/w.tar.gz -C $OUT w
