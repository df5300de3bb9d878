#!/usr/bin/env bash
# Session 27, final binary (commit 4bcfa5a: pipelined coarse step, step pairs for FP32 by default):
# GPU tests, the benches of scripts/bench-amr-gpu.sh's main table, knob checks, the cylinder run.
set -uo pipefail
. scripts/amr-gpu-lib.sh
amr_gpu_tests
dense fp32
dense fp16s
sph fixed "$F" X=1
sph adapt "" X=1
sph fixed16 "$F $H" X=1
sph adapt16 "$H" X=1
sph fixed-prio "$F" ESOFLOW_AMR_PIPELINE=0
sph fixed-avg64 "$F" ESOFLOW_AMR_DEFINES="AMR_AVG_CELLS=64"
sph fixed-again "$F" X=1
sph adapt-again "" X=1
cyl "" X=1
cavity
( time $S/esoflow run $S/scenes/square_cylinder_amr_2d.toml --backend cuda --steps 20000 --set solver.stats_every=10 --export $W/cyl-amr ) > $W/cyl-amr.log 2>&1
grep -h "^real" $W/cyl-amr.log
rm -f $W/cyl-amr/fields.*
tar czf $OUT/w.tar.gz -C $OUT w
