#!/usr/bin/env bash
# Session 27: the last host-side change (one stream assignment a capture): GPU tests and the sphere.
set -uo pipefail
OUT=${OUT:-out}; W=$OUT/w; mkdir -p $W
S=stage
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee $W/device.txt
$S/test-cuda gpu_adapt --nocapture --test-threads 1 > $W/test-amr.log 2>&1; echo "test amr rc $?" | tee -a $W/test-amr.log
$S/test-cuda gpu_forest --nocapture --test-threads 1 > $W/test-forest.log 2>&1; echo "test forest rc $?" | tee -a $W/test-forest.log
grep -h "test result\|FAILED\|panicked" $W/test-*.log | head
for v in X=1 ESOFLOW_AMR_GRAPHS=0 ESOFLOW_AMR_SERIAL=1; do
  env $v $S/esoflow bench --amr $S/scenes/sphere_3d.toml --backend cuda --steps 200 --seconds 3 --set amr.enabled=true --set amr.max_level=1 --set amr.interval=0 > $W/sph-${v%%=*}.log 2>&1
  echo "sphere fixed $v $(grep -o 'MLUPS (seed-counted) [0-9.]*' $W/sph-${v%%=*}.log)"
done
tar czf $OUT/w.tar.gz -C $OUT w
