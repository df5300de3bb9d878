#!/usr/bin/env bash
# Session 29, the step kernels' shared preamble, collision and fill word as device functions
# (amr_step_lane, amr_step_collide, amr_step_fill; same registers): the GPU tests of both
# storages and the fixed sphere with each.
set -uo pipefail
. scripts/amr-gpu-lib.sh
amr_gpu_tests
grep -h "rel diff" "$W/test-amr.log" | grep -vc "rel diff rho 0.00e0 u 0.00e0" | sed 's/^/cases with a nonzero rel diff: /'
sph fixed "$F" X=1
sph fixed-inplace "$F --set amr.in_place=true" X=1
tar czf $OUT/w.tar.gz -C $OUT w
