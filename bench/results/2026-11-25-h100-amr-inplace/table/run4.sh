#!/usr/bin/env bash
# Session 29, fourth binary (the in-place step takes P's slots through the thread block's table
# of block pointers, as the two-buffer pushes; in-place restriction at launch bound 2): GPU tests
# of both storages, the dense baseline, two buffers against in place on the sphere (fixed,
# adapting, FP16S) and the cylinder, and the in-place step at launch bound 2.
set -uo pipefail
. scripts/amr-gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee "$W/device.txt"
timeout 300 "$S/test-cuda" gpu_adapt --nocapture --test-threads 1 > "$W/test-amr.log" 2>&1; echo "test amr rc $?" | tee -a "$W/test-amr.log"
grep -h "test result\|FAILED\|panicked\| with data differ" "$W"/test-*.log | grep -v " 0 with data" | cut -c1-220 | head -20
grep -h "rel diff" "$W/test-amr.log" | grep -v "rel diff rho 0.00e0 u 0.00e0" | head
dense fp32
dense fp16s
I=ESOFLOW_AMR_INPLACE=1
prof() {
  env "${@:2}" ESOFLOW_AMR_PROFILE=1 "$S/esoflow" bench --amr "$S/scenes/sphere_3d.toml" --backend cuda --steps 100 --seconds 2 --set amr.enabled=true --set amr.max_level=1 $F > "$W/prof-$1.log" 2>&1
  echo "== $1"; grep -h "amr kernel" "$W/prof-$1.log"
}
prof inplace $I
sph fixed "$F" X=1
sph fixed-inplace "$F" $I
sph fixed-inplace-step2 "$F" $I ESOFLOW_AMR_DEFINES="AMR_STEP_MINB=2"
sph adapt "" X=1
sph adapt-inplace "" $I
sph fixed16 "$F $H" X=1
sph fixed16-inplace "$F $H" $I
sph adapt16-inplace "$H" $I
sph fixed-inplace-2 "$F" $I
cyl "" X=1
cyl inplace $I
tar czf $OUT/w.tar.gz -C $OUT w
