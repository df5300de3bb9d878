#!/usr/bin/env bash
# Session 31, device call 5 (repo root, after scripts/stage-quick.sh): the GPU tests with each
# level's far blocks split into core and rim for the in-place storage (the core no longer waits
# for the finer level's interpolation; launch lists: core, rim, feeding), on the one-block and
# the many-block launch lists.
source scripts/amr-gpu-lib.sh
amr_gpu_tests
ESOFLOW_AMR_LISTS=many "$S/test-cuda" gpu_adapt --nocapture --test-threads 1 > "$W/test-amr-many.log" 2>&1; echo "test amr many rc $?" | tee -a "$W/test-amr-many.log"
"$S/test-cuda" gpu_cell_edits --nocapture --test-threads 1 > "$W/test-edits.log" 2>&1; echo "test edits rc $?" | tee -a "$W/test-edits.log"
grep -h "test result" "$W"/test-*.log
