#!/usr/bin/env bash
# Session 31, device call 7 (repo root, after scripts/stage-quick.sh): the core/rim split again,
# with the schedule's in-place regions per parity (a core step waits for the reads of its
# neighbours' values of the parity before); the GPU tests.
source scripts/amr-gpu-lib.sh
amr_gpu_tests
"$S/test-cuda" gpu_cell_edits --nocapture --test-threads 1 > "$W/test-edits.log" 2>&1; echo "test edits rc $?" | tee -a "$W/test-edits.log"
grep -h "test result" "$W"/test-*.log
