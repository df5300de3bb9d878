#!/usr/bin/env bash
# Session 29, the committed binary (in place selectable with amr.in_place): GPU tests of both
# storages, the dense baseline, the sphere with two buffers and in place through the scene key.
set -uo pipefail
. scripts/amr-gpu-lib.sh
amr_gpu_tests
grep -h "rel diff" "$W/test-amr.log" | grep -vc "rel diff rho 0.00e0 u 0.00e0" | sed 's/^/cases with a nonzero rel diff: /'
dense fp32
P="--set amr.in_place=true"
sph fixed "$F" X=1
sph fixed-inplace "$F $P" X=1
sph adapt "" X=1
sph adapt-inplace "$P" X=1
sph fixed16-inplace "$F $H $P" X=1
grep -h "on cuda" "$W/sph-fixed-inplace.log" | head -1
tar czf $OUT/w.tar.gz -C $OUT w
