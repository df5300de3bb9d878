#!/usr/bin/env bash
# Session 30, device call 4 (repo root, after scripts/stage-quick.sh): where an adaptation's time
# goes (ESOFLOW_AMR_PROFILE=trace: every operation timed with events, no waits inside) in the
# sphere, the sphere in 8x the domain (1.91 % in refinement in session 29) and the square
# cylinder, two DDF buffers.
source scripts/amr-gpu-lib.sh
B="--set domain.size=[384,128,128] --set amr.capacity=400000"
sph trace "" ESOFLOW_AMR_PROFILE=trace
sph big-trace "$B" ESOFLOW_AMR_PROFILE=trace
sph big "$B"
cyl trace ESOFLOW_AMR_PROFILE=trace
for f in "$W"/sph-trace.log "$W"/sph-big-trace.log "$W"/cyl-trace.log; do echo "== $f"; grep -A40 "adaptation trace" "$f" | head -45; done
