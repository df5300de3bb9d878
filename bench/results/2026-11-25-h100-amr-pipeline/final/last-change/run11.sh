#!/usr/bin/env bash
# Session 27: the last host-side change (one stream assignment a capture): GPU tests and the sphere.
set -uo pipefail
OUT=${OUT:-out}; W=$OUT/w; mkdir -p $W
S=stage
. scripts/amr-gpu-lib.sh
amr_gpu_tests
for v in X=1 ESOFLOW_AMR_GRAPHS=0 ESOFLOW_AMR_SERIAL=1; do
  env $v $S/esoflow bench --amr $S/scenes/sphere_3d.toml --backend cuda --steps 200 --seconds 3 --set amr.enabled=true --set amr.max_level=1 --set amr.interval=0 > $W/sph-${v%%=*}.log 2>&1
  echo "sphere fixed $v $(grep -o 'MLUPS (seed-counted) [0-9.]*' $W/sph-${v%%=*}.log)"
done
tar czf $OUT/w.tar.gz -C $OUT w
