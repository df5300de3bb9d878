#!/usr/bin/env bash
# Session 28: amr_step loading a cell's code and values before setting up the links
# (AMR_STEP_EARLY=1) against after them (=0), same binary, same host, interleaved; GPU tests.
set -uo pipefail
. scripts/amr-gpu-lib.sh
amr_gpu_tests
dense fp32
for r in 1 2; do
  sph fixed-early-$r "$F" X=1
  sph fixed-late-$r "$F" ESOFLOW_AMR_DEFINES="AMR_STEP_EARLY=0"
done
sph adapt-early "" X=1
sph adapt-late "" ESOFLOW_AMR_DEFINES="AMR_STEP_EARLY=0"
for r in 1 2; do
  sph fixed16-early-$r "$F $H" X=1
  sph fixed16-late-$r "$F $H" ESOFLOW_AMR_DEFINES="AMR_STEP_EARLY=0"
done
cyl early X=1
cyl late ESOFLOW_AMR_DEFINES="AMR_STEP_EARLY=0"
tar czf $OUT/w.tar.gz -C $OUT w
