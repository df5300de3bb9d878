#!/usr/bin/env bash
# Session 32, device call 3 (repo root, after scripts/stage-quick.sh): in place, an adaptation
# works on the halo form (amr_ep_gather alone, both ways) instead of settling to the plain layout
# and taking it up again (gather and local, both ways); the stepping's interpolation a kernel of
# its own (amr_interpolate, no spills) apart from the adaptation's (amr_interpolate_adapt).
# GPU tests (both storages), then the benches.
source scripts/amr-gpu-lib.sh
BIG="--set domain.size=[384,128,128] --set amr.capacity=400000"
IP="--set amr.in_place=true"
amr_gpu_tests
"$S/test-cuda" gpu_cell_edits --nocapture --test-threads 1 > "$W/test-edits.log" 2>&1; echo "test edits rc $?" | tee -a "$W/test-edits.log"
grep -h "test result" "$W"/test-*.log
sph big-adapt "$BIG"
sph big-adapt-ip "$BIG $IP"
sph big-adapt-ip-trace "$BIG $IP" ESOFLOW_AMR_PROFILE=trace
sph fixed "$F"
sph fixed-ip "$F $IP"
sph adapt ""
sph adapt-ip "$IP"
grep -h "^  settle\|^  block maxima\|adaptations, .* us each" "$W"/sph-big-adapt-ip-trace.log
