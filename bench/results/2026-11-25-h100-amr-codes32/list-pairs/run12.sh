#!/usr/bin/env bash
# Session 28: step codes as 4 bytes a cell (AMR_CODES_SPLIT) and launch lists that keep the
# step's block pairs (AMR_LIST_PAIRS), each against the previous behaviour through the knobs,
# same binary, same host, interleaved.
set -uo pipefail
OUT=${OUT:-out}; W=$OUT/w; mkdir -p $W
S=stage
. scripts/amr-gpu-lib.sh
amr_gpu_tests
$S/esoflow bench --backend cuda --size 256 --lattice D3Q19 --scheme esoteric_pull --precision fp32 --seconds 2 --csv "$W/dense.csv" > "$W/dense.log" 2>&1
grep -h "D3Q19  esoteric" $W/dense.log
F="--set amr.interval=0"
H="--set solver.precision=\"fp16s\""
OLD="AMR_CODES_SPLIT=0 AMR_LIST_PAIRS=0"
sph fixed "$F" X=1
sph fixed-old "$F" ESOFLOW_AMR_DEFINES="$OLD"
sph fixed-split "$F" ESOFLOW_AMR_DEFINES="AMR_LIST_PAIRS=0"
sph fixed-lists "$F" ESOFLOW_AMR_DEFINES="AMR_CODES_SPLIT=0"
sph fixed-again "$F" X=1
sph fixed-old-again "$F" ESOFLOW_AMR_DEFINES="$OLD"
sph adapt "" X=1
sph adapt-old "" ESOFLOW_AMR_DEFINES="$OLD"
sph fixed16 "$F $H" X=1
sph fixed16-old "$F $H" ESOFLOW_AMR_DEFINES="$OLD"
cyl() {
  env "${@:2}" $S/esoflow bench --amr $S/scenes/square_cylinder_amr_2d.toml --backend cuda --steps 500 --seconds 4 --csv $W/cyl-$1.csv > $W/cyl-$1.log 2>&1
  echo "cyl-$1 $(grep -o 'MLUPS.*' $W/cyl-$1.log | head -1)"
}
cyl new X=1
cyl old ESOFLOW_AMR_DEFINES="$OLD"
tar czf $OUT/w.tar.gz -C $OUT w
