#!/usr/bin/env bash
# Session 31, device call 3: the GPU tests of adaptive blocks (both storages) and of cell edits
# on the binary of run2.sh (its defaults: in-place step split, block maxima without a settle).
source scripts/amr-gpu-lib.sh
amr_gpu_tests
"$S/test-cuda" gpu_cell_edits --nocapture --test-threads 1 > "$W/test-edits.log" 2>&1; echo "test edits rc $?" | tee -a "$W/test-edits.log"
