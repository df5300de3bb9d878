#!/usr/bin/env bash
# Session 30, device call 5 (repo root, after scripts/stage-quick.sh): the launch lists built over
# many thread blocks (amr_mesh_lists_tiles/_offsets/_write) against the one-block amr_mesh_lists
# (ESOFLOW_AMR_LISTS=1), on one binary: the adaptive-block GPU tests, then the sphere in 8x the
# domain, the sphere and the square cylinder, traced and plain.
source scripts/amr-gpu-lib.sh
B="--set domain.size=[384,128,128] --set amr.capacity=400000"
amr_gpu_tests
sph big "$B"
sph big-one "$B" ESOFLOW_AMR_LISTS=1
sph big-trace "$B" ESOFLOW_AMR_PROFILE=trace
sph adapt ""
sph adapt-one "" ESOFLOW_AMR_LISTS=1
cyl
cyl one ESOFLOW_AMR_LISTS=1
grep -h "^  lists\|^  id sets\|^  codes\|adaptations, " "$W/sph-big-trace.log"
