#!/usr/bin/env bash
# Session 28, the binary with AMR_STEP_EARLY (default 1 for 16-bit storage, 0 for FP32): GPU tests,
# the main table's benches, the cylinder at equal accuracy; A/B of the code-only early load
# (AMR_STEP_EARLY=2) for FP32 and FP16S, and fixed against adapting without CUDA graphs
# (ESOFLOW_AMR_GRAPHS=0: whether the adapting run's re-captures explain its gap to the fixed mesh).
set -uo pipefail
OUT=${OUT:-out}; W=$OUT/w; mkdir -p $W
S=stage
. scripts/amr-gpu-lib.sh
amr_gpu_tests
$S/esoflow bench --backend cuda --size 256 --lattice D3Q19 --scheme esoteric_pull --precision fp32 --seconds 2 --csv "$W/dense.csv" > "$W/dense.log" 2>&1
$S/esoflow bench --backend cuda --size 256 --lattice D3Q19 --scheme esoteric_pull --precision fp16s --seconds 2 --csv "$W/dense-fp16s.csv" > "$W/dense-fp16s.log" 2>&1
grep -h "D3Q19  esoteric" $W/dense.log $W/dense-fp16s.log
F="--set amr.interval=0"
H="--set solver.precision=\"fp16s\""
for r in 1 2; do
  sph fixed-$r "$F" X=1
  sph fixed-code-early-$r "$F" ESOFLOW_AMR_DEFINES="AMR_STEP_EARLY=2"
done
sph adapt-1 "" X=1
sph adapt-code-early "" ESOFLOW_AMR_DEFINES="AMR_STEP_EARLY=2"
sph fixed16 "$F $H" X=1
sph fixed16-code-early "$F $H" ESOFLOW_AMR_DEFINES="AMR_STEP_EARLY=2"
sph adapt16 "$H" X=1
sph adapt-2 "" X=1
sph fixed-nographs "$F" ESOFLOW_AMR_GRAPHS=0
sph adapt-nographs "" ESOFLOW_AMR_GRAPHS=0
$S/esoflow bench --amr $S/scenes/square_cylinder_amr_2d.toml --backend cuda --steps 500 --seconds 4 --csv $W/cyl.csv > $W/cyl.log 2>&1
echo "cyl $(grep -o 'MLUPS.*' $W/cyl.log | head -1)"
$S/esoflow bench --amr $S/scenes/lid_driven_cavity_amr_2d.toml --backend cuda --steps 500 --seconds 3 --csv $W/cavity.csv > $W/cavity.log 2>&1
echo "cavity $(grep -o 'MLUPS.*' $W/cavity.log | head -1)"
( time $S/esoflow run $S/scenes/square_cylinder_amr_2d.toml --backend cuda --steps 20000 --set solver.stats_every=10 --export $W/cyl-amr ) > $W/cyl-amr.log 2>&1
grep -h "^real" $W/cyl-amr.log
cp $W/cyl-amr/stats.csv $W/cyl-amr-stats.csv 2>/dev/null
rm -rf $W/cyl-amr
tar czf $OUT/w.tar.gz -C $OUT w
