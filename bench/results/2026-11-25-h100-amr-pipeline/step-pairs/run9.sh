#!/usr/bin/env bash
# Session 27: amr_step with x-adjacent block pairs sharing warps (AMR_STEP_PAIRS=1) against the
# default mapping, same host; the GPU tests with the pairs.
set -uo pipefail
OUT=${OUT:-out}; W=$OUT/w; mkdir -p $W
S=stage
. scripts/amr-gpu-lib.sh
# (The run logged the solver test alone as test-amr-pairs.log.)
amr_gpu_tests ESOFLOW_AMR_DEFINES=AMR_STEP_PAIRS=1
F="--set amr.interval=0"
H="--set solver.precision=\"fp16s\""
P="ESOFLOW_AMR_DEFINES=AMR_STEP_PAIRS=1"
for r in 1 2; do
  sph fixed$r "$F" X=1
  sph fixed-pairs$r "$F" $P
done
sph adapt "" X=1
sph adapt-pairs "" $P
sph fixed16 "$F $H" X=1
sph fixed16-pairs "$F $H" $P
for v in X=1 $P; do
  n=${v%%=*}
  env $v $S/esoflow bench --amr $S/scenes/square_cylinder_amr_2d.toml --backend cuda --steps 500 --seconds 4 --csv $W/cyl-$n.csv > $W/cyl-$n.log 2>&1
  echo "cyl $v $(grep -o 'MLUPS.*' $W/cyl-$n.log | head -1)"
done
tar czf $OUT/w.tar.gz -C $OUT w
