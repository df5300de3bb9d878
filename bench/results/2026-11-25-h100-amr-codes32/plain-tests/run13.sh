#!/usr/bin/env bash
# Session 28: plain blocks (AMR_PLAIN: no code read for cells in the open flow) on top of 4-byte
# codes (AMR_CODES_SPLIT), each against the previous behaviour through the knobs, same binary, same
# host, interleaved; the GPU tests with both defaults and with 8-byte codes plus plain blocks.
set -uo pipefail
. scripts/amr-gpu-lib.sh
amr_gpu_tests
mkdir -p $W/t64; W0=$W; W=$W/t64; amr_gpu_tests ESOFLOW_AMR_DEFINES=AMR_CODES_SPLIT=0; W=$W0
dense fp32
dense fp16s
OLD="AMR_CODES_SPLIT=0 AMR_PLAIN=0"
sph fixed "$F" X=1
sph fixed-noplain "$F" ESOFLOW_AMR_DEFINES="AMR_PLAIN=0"
sph fixed-old "$F" ESOFLOW_AMR_DEFINES="$OLD"
sph fixed-again "$F" X=1
sph fixed-noplain-again "$F" ESOFLOW_AMR_DEFINES="AMR_PLAIN=0"
sph fixed-old-again "$F" ESOFLOW_AMR_DEFINES="$OLD"
sph adapt "" X=1
sph adapt-old "" ESOFLOW_AMR_DEFINES="$OLD"
sph fixed16 "$F $H" X=1
sph fixed16-64 "$F $H" ESOFLOW_AMR_DEFINES="AMR_CODES_SPLIT=0"
sph fixed16-old "$F $H" ESOFLOW_AMR_DEFINES="$OLD"
sph fixed16-again "$F $H" X=1
sph fixed16-64-again "$F $H" ESOFLOW_AMR_DEFINES="AMR_CODES_SPLIT=0"
sph fixed16-old-again "$F $H" ESOFLOW_AMR_DEFINES="$OLD"
sph adapt16 "$H" X=1
sph adapt16-old "$H" ESOFLOW_AMR_DEFINES="$OLD"
cyl new X=1
cyl old ESOFLOW_AMR_DEFINES="$OLD"
tar czf $OUT/w.tar.gz -C $OUT w
