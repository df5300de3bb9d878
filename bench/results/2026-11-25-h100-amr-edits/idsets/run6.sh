#!/usr/bin/env bash
# Session 30, device call 6 (repo root, after scripts/stage-quick.sh): the ID sets built over many
# thread blocks too (amr_mesh_id_tiles/_offsets/_write). The forest test (every device array
# against the host's through 40 random adaptations) and the data-moving test with the many-block
# path forced (their forests are small), then the spheres.
source scripts/amr-gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee "$W/device.txt"
ESOFLOW_AMR_LISTS=many "$S/test-cuda" gpu_forest --nocapture --test-threads 1 > "$W/test-forest-many.log" 2>&1; echo "test forest many rc $?"
ESOFLOW_AMR_LISTS=many timeout 100 "$S/test-cuda" gpu_adaptation_moves --nocapture --test-threads 1 > "$W/test-moves-many.log" 2>&1; echo "test moves many rc $?"
B="--set domain.size=[384,128,128] --set amr.capacity=400000"
sph big "$B"
sph big-trace "$B" ESOFLOW_AMR_PROFILE=trace
sph adapt ""
grep -h "^  lists\|^  id sets\|adaptations, " "$W/sph-big-trace.log"
