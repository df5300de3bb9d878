#!/usr/bin/env bash
# Session 32, device call 2: where an adaptation's time goes, per phase (ESOFLOW_AMR_PROFILE=1:
# every launch waited for) and per operation (=trace), on the 8x sphere adapting (both storages)
# and the square cylinder.
source scripts/amr-gpu-lib.sh
BIG="--set domain.size=[384,128,128] --set amr.capacity=400000"
IP="--set amr.in_place=true"
sph big-adapt "$BIG"
sph big-adapt-ip "$BIG $IP"
sph big-adapt-prof "$BIG" ESOFLOW_AMR_PROFILE=1
sph big-adapt-ip-prof "$BIG $IP" ESOFLOW_AMR_PROFILE=1
sph big-adapt-ip-trace "$BIG $IP" ESOFLOW_AMR_PROFILE=trace
cyl trace ESOFLOW_AMR_PROFILE=trace
for f in "$W"/sph-big-adapt*-prof.log "$W"/*trace.log; do echo "== $f"; grep -h "^amr \|^  " "$f" | head -60; done
