#!/usr/bin/env bash
# Session 28, the binary with AMR_STEP_EARLY (default 1 for 16-bit storage, 0 for FP32): GPU tests,
# the main table's benches, the cylinder at equal accuracy; A/B of the code-only early load
# (AMR_STEP_EARLY=2) for FP32 and FP16S, and fixed against adapting without CUDA graphs
# (ESOFLOW_AMR_GRAPHS=0: whether the adapting run's re-captures explain its gap to the fixed mesh).
set -uo pipefail
. scripts/amr-gpu-lib.sh
amr_gpu_tests
dense fp32
dense fp16s
for r in 1 2; do
  sph fixed-$r "$F" X=1
  sph fixed-code-early-$r "$F" ESOFLOW_AMR_DEFINES="AMR_STEP_EARLY=2"
done
sph adapt-1 "" X=1
sph adapt-code-early "" ESOFLOW_AMR_DEFINES="AMR_STEP_EARLY=2"
sph fixed16 "$F $H" X=1
sph fixed16-code-early "$F $H" ESOFLOW_AMR_DEFINES="AMR_STEP_EARLY=2"
sph adapt16 "$H" X=1
sph adapt-2 "" X=1
sph fixed-nographs "$F" ESOFLOW_AMR_GRAPHS=0
sph adapt-nographs "" ESOFLOW_AMR_GRAPHS=0
cyl "" X=1
cavity
cyl_accuracy
tar czf $OUT/w.tar.gz -C $OUT w
