#!/usr/bin/env bash
# Session 28, final binary (4-byte step codes for FP32 storage, AMR_CODES_SPLIT): GPU tests, the
# benches of the main table, the cylinder at equal accuracy; the FP32 sphere also with the
# previous 8-byte codes (same binary, knob) as the same-host baseline.
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
sph fixed "$F" X=1
sph fixed-8byte "$F" ESOFLOW_AMR_DEFINES="AMR_CODES_SPLIT=0"
sph adapt "" X=1
sph fixed16 "$F $H" X=1
sph adapt16 "$H" X=1
sph fixed-again "$F" X=1
sph adapt-again "" X=1
$S/esoflow bench --amr $S/scenes/square_cylinder_amr_2d.toml --backend cuda --steps 500 --seconds 4 --csv $W/cyl.csv > $W/cyl.log 2>&1
echo "cyl $(grep -o 'MLUPS.*' $W/cyl.log | head -1)"
$S/esoflow bench --amr $S/scenes/lid_driven_cavity_amr_2d.toml --backend cuda --steps 500 --seconds 3 --csv $W/cavity.csv > $W/cavity.log 2>&1
echo "cavity $(grep -o 'MLUPS.*' $W/cavity.log | head -1)"
( time $S/esoflow run $S/scenes/square_cylinder_amr_2d.toml --backend cuda --steps 20000 --set solver.stats_every=10 --export $W/cyl-amr ) > $W/cyl-amr.log 2>&1
grep -h "^real" $W/cyl-amr.log
cp $W/cyl-amr/stats.csv $W/cyl-amr-stats.csv 2>/dev/null
rm -rf $W/cyl-amr
tar czf $OUT/w.tar.gz -C $OUT w
