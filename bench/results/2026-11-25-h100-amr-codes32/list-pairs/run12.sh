#!/usr/bin/env bash
# Session 28: step codes as 4 bytes a cell (AMR_CODES_SPLIT) and launch lists that keep the
# step's block pairs (AMR_LIST_PAIRS), each against the previous behaviour through the knobs,
# same binary, same host, interleaved.
set -uo pipefail
. scripts/amr-gpu-lib.sh
amr_gpu_tests
dense fp32
OLD="AMR_CODES_SPLIT=0 AMR_LIST_PAIRS=0"
sph fixed "$F" X=1
sph fixed-old "$F" ESOFLOW_AMR_DEFINES="$OLD"
sph fixed-split "$F" ESOFLOW_AMR_DEFINES="AMR_LIST_PAIRS=0"
sph fixed-lists "$F" ESOFLOW_AMR_DEFINES="AMR_CODES_SPLIT=0"
sph fixed-again "$F" X=1
sph fixed-old-again "$F" ESOFLOW_AMR_DEFINES="$OLD"
sph adapt "" X=1
sph adapt-old "" ESOFLOW_AMR_DEFINES="$OLD"
sph fixed16 "$F $H" X=1
sph fixed16-old "$F $H" ESOFLOW_AMR_DEFINES="$OLD"
cyl new X=1
cyl old ESOFLOW_AMR_DEFINES="$OLD"
tar czf $OUT/w.tar.gz -C $OUT w
