#!/usr/bin/env bash
# Session 31, device call 6 (binary of run4.sh): the failing solver test again with the launches
# in order (ESOFLOW_AMR_SERIAL=1: passes) and on streams without the deferred restriction
# (ESOFLOW_AMR_PIPELINE=0: fails as in run4.sh).
S=stage
for envv in ESOFLOW_AMR_SERIAL=1 ESOFLOW_AMR_PIPELINE=0; do
  echo "== $envv"
  env $envv timeout 70 $S/test-cuda gpu_adaptive_blocks_match_cpu --nocapture --test-threads 1 2>&1 | grep -E "^cavity D2Q9|panicked|left|right" | head -8
done
