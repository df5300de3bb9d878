#!/usr/bin/env bash
# Session 28: amr_step loading a cell's code and values before setting up the links
# (AMR_STEP_EARLY=1) against after them (=0), same binary, same host, interleaved; GPU tests.
set -uo pipefail
OUT=${OUT:-out}; W=$OUT/w; mkdir -p $W
S=stage
. scripts/amr-gpu-lib.sh
amr_gpu_tests
$S/esoflow bench --backend cuda --size 256 --lattice D3Q19 --scheme esoteric_pull --precision fp32 --seconds 2 --csv "$W/dense.csv" > "$W/dense.log" 2>&1
grep -h "D3Q19  esoteric" $W/dense.log
F="--set amr.interval=0"
H="--set solver.precision=\"fp16s\""
for r in 1 2; do
  sph fixed-early-$r "$F" X=1
  sph fixed-late-$r "$F" ESOFLOW_AMR_DEFINES="AMR_STEP_EARLY=0"
done
sph adapt-early "" X=1
sph adapt-late "" ESOFLOW_AMR_DEFINES="AMR_STEP_EARLY=0"
for r in 1 2; do
  sph fixed16-early-$r "$F $H" X=1
  sph fixed16-late-$r "$F $H" ESOFLOW_AMR_DEFINES="AMR_STEP_EARLY=0"
done
cyl() {
  env "${@:2}" $S/esoflow bench --amr $S/scenes/square_cylinder_amr_2d.toml --backend cuda --steps 500 --seconds 4 --csv $W/cyl-$1.csv > $W/cyl-$1.log 2>&1
  echo "cyl-$1 $(grep -o 'MLUPS.*' $W/cyl-$1.log | head -1)"
}
cyl early X=1
cyl late ESOFLOW_AMR_DEFINES="AMR_STEP_EARLY=0"
tar czf $OUT/w.tar.gz -C $OUT w
