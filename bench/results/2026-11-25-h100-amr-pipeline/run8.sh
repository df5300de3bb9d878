#!/usr/bin/env bash
# Session 27 (final cut: far/feed parts, deferred restriction, priority streams): GPU tests, then
# an A/B of the knobs (`bash run8.sh`); `bash run8.sh prev` ran next on the same host (device still
# held) with session 26's binary in stage/esoflow-prev (outputs in same-host-prev/).
set -uo pipefail
OUT=${OUT:-out}; W=$OUT/w; mkdir -p $W
S=stage
. scripts/amr-gpu-lib.sh
PART=${1:-main}
F="--set amr.interval=0"
H="--set solver.precision=\"fp16s\""
if [ "$PART" = prev ]; then
sph_with fixed-prev $S/esoflow-prev "$F" X=1
sph_with fixed-new3 $S/esoflow "$F" X=1
sph_with adapt-prev $S/esoflow-prev "" X=1
sph_with adapt-new3 $S/esoflow "" X=1
sph_with fixed16-prev $S/esoflow-prev "$F $H" X=1
$S/esoflow-prev bench --amr $S/scenes/square_cylinder_amr_2d.toml --backend cuda --steps 500 --seconds 4 --csv $W/cyl-prev.csv > $W/cyl-prev.log 2>&1
echo "cyl prev $(grep -o 'MLUPS.*' $W/cyl-prev.log | head -1)"
else
amr_gpu_tests
$S/esoflow bench --backend cuda --size 256 --lattice D3Q19 --scheme esoteric_pull --precision fp32 --seconds 2 --csv "$W/dense.csv" > "$W/dense.log" 2>&1
grep -h "D3Q19" $W/dense.log | tail -2
N=$S/esoflow
for r in 1 2; do
  sph_with fixed$r $N "$F" X=1
  sph_with fixed-prio$r $N "$F" ESOFLOW_AMR_PIPELINE=0
done
sph_with fixed-neither $N "$F" ESOFLOW_AMR_PIPELINE=0 ESOFLOW_AMR_PRIORITY=0
sph_with fixed-avg64 $N "$F" ESOFLOW_AMR_DEFINES="AMR_AVG_CELLS=64"
sph_with adapt $N "" X=1
sph_with adapt-prio $N "" ESOFLOW_AMR_PIPELINE=0
sph_with fixed16 $N "$F $H" X=1
sph_with fixed16-prio $N "$F $H" ESOFLOW_AMR_PIPELINE=0
sph_with adapt16 $N "$H" X=1
sph_with adapt16-prio $N "$H" ESOFLOW_AMR_PIPELINE=0
sph_with adapt2 $N "" X=1
for v in X=1 ESOFLOW_AMR_PIPELINE=0; do
  env $v $N bench --amr $S/scenes/square_cylinder_amr_2d.toml --backend cuda --steps 500 --seconds 4 --csv $W/cyl-${v%%=*}.csv > $W/cyl-${v%%=*}.log 2>&1
  echo "cyl $v $(grep -o 'MLUPS.*' $W/cyl-${v%%=*}.log | head -1)"
done
$N bench --amr $S/scenes/lid_driven_cavity_amr_2d.toml --backend cuda --steps 500 --seconds 3 --csv $W/cavity.csv > $W/cavity.log 2>&1
echo "cavity $(grep -o 'MLUPS.*' $W/cavity.log | head -1)"
( time $N run $S/scenes/square_cylinder_amr_2d.toml --backend cuda --steps 20000 --set solver.stats_every=10 --export $W/cyl-amr ) > $W/cyl-amr.log 2>&1
grep -h "^real" $W/cyl-amr.log
rm -f $W/cyl-amr/fields.*
fi
tar czf $OUT/w.tar.gz -C $OUT w
