#!/usr/bin/env bash
# Session 29, the in-place step at launch bound 2 by default: the GPU tests of both storages, the
# sphere (fixed, adapting, FP16S) with two buffers and in place, and the sphere in 8x the domain
# (--set domain.size=[384,128,128] --set amr.capacity=400000) with both.
set -uo pipefail
. scripts/amr-gpu-lib.sh
amr_gpu_tests
grep -h "rel diff" "$W/test-amr.log" | grep -vc "rel diff rho 0.00e0 u 0.00e0" | sed 's/^/cases with a nonzero rel diff: /'
dense fp32
P="--set amr.in_place=true"
B="--set domain.size=[384,128,128] --set amr.capacity=400000"
sph fixed "$F" X=1
sph fixed-inplace "$F $P" X=1
sph adapt-inplace "$P" X=1
sph fixed16-inplace "$F $H $P" X=1
sph big-fixed "$F $B" X=1
sph big-fixed-inplace "$F $B $P" X=1
sph big-adapt "$B" X=1
sph big-adapt-inplace "$B $P" X=1
grep -h "DDF storage" "$W"/sph-big*.log
tar czf $OUT/w.tar.gz -C $OUT w
