#!/usr/bin/env bash
# Session 29, last binary (amr_ep_slot without its unused halo flag): the GPU tests of both
# storages and the fixed sphere in place.
set -uo pipefail
. scripts/amr-gpu-lib.sh
amr_gpu_tests
grep -h "rel diff" "$W/test-amr.log" | grep -vc "rel diff rho 0.00e0 u 0.00e0" | sed 's/^/cases with a nonzero rel diff: /'
sph fixed-inplace "$F --set amr.in_place=true" X=1
tar czf $OUT/w.tar.gz -C $OUT w
