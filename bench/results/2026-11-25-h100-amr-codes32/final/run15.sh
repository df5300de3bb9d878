#!/usr/bin/env bash
# Session 28, final binary (4-byte step codes for FP32 storage, AMR_CODES_SPLIT): GPU tests, the
# benches of the main table, the cylinder at equal accuracy; the FP32 sphere also with the
# previous 8-byte codes (same binary, knob) as the same-host baseline.
set -uo pipefail
. scripts/amr-gpu-lib.sh
amr_gpu_tests
dense fp32
dense fp16s
sph fixed "$F" X=1
sph fixed-8byte "$F" ESOFLOW_AMR_DEFINES="AMR_CODES_SPLIT=0"
sph adapt "" X=1
sph fixed16 "$F $H" X=1
sph adapt16 "$H" X=1
sph fixed-again "$F" X=1
sph adapt-again "" X=1
cyl "" X=1
cavity
cyl_accuracy
tar czf $OUT/w.tar.gz -C $OUT w
