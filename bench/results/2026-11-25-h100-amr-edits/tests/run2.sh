#!/usr/bin/env bash
# Session 30, device call 2 (repo root, after scripts/stage-quick.sh): the adaptive-block GPU
# tests, the cell-edit test among them, on the binary with the rest-state fix for solid cells in
# the fields and frames, and the edits' near-wall adaptation at once.
source scripts/amr-gpu-lib.sh
amr_gpu_tests
"$S/test-cuda" gpu_cell_edits --nocapture --test-threads 1 > "$W/test-edits.log" 2>&1; echo "test edits rc $?" | tee -a "$W/test-edits.log"
grep -h "edit [01]\|test result\|panicked" "$W/test-edits.log" | head -40
sph fixed "$F"
sph adapt ""
