#!/usr/bin/env bash
# Session 28: run13.sh's A/B again once AMR_PLAIN=0 compiled (it left an unused shared array, which
# NVRTC warns about and Esoflow refuses): plain blocks, 4-byte codes, both off; FP32 and FP16S.
set -uo pipefail
. scripts/amr-gpu-lib.sh
dense fp32
for r in 1 2; do
  sph fixed-$r "$F" X=1
  sph fixed-noplain-$r "$F" ESOFLOW_AMR_DEFINES="AMR_PLAIN=0"
  sph fixed-old-$r "$F" ESOFLOW_AMR_DEFINES="AMR_CODES_SPLIT=0 AMR_PLAIN=0"
done
sph adapt "" X=1
sph adapt-noplain "" ESOFLOW_AMR_DEFINES="AMR_PLAIN=0"
sph adapt-old "" ESOFLOW_AMR_DEFINES="AMR_CODES_SPLIT=0 AMR_PLAIN=0"
for r in 1 2; do
  sph fixed16-$r "$F $H" X=1
  sph fixed16-64-$r "$F $H" ESOFLOW_AMR_DEFINES="AMR_CODES_SPLIT=0"
  sph fixed16-old-$r "$F $H" ESOFLOW_AMR_DEFINES="AMR_CODES_SPLIT=0 AMR_PLAIN=0"
done
tar czf $OUT/w.tar.gz -C $OUT w
