#!/usr/bin/env bash
# Session 32, device call 1 (repo root, after scripts/stage-quick.sh on b3d33b1): the adaptive-block
# GPU tests with every test forest on the many-block launch lists (ESOFLOW_AMR_LISTS=many), the
# run session 31 left out on its final binary.
source scripts/amr-gpu-lib.sh
amr_gpu_tests ESOFLOW_AMR_LISTS=many
