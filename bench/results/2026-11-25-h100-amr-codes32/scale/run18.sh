#!/usr/bin/env bash
# Session 28, the final binary: the square cylinder adapting every 250 and 1000 coarse steps (time
# in refinement, St and C_D against every 50), and the sphere in a domain of 8 times the cells;
# INTERVALS="2000 5000" bash run18.sh: only the cylinder, at those intervals (a second call).
set -uo pipefail
. scripts/amr-gpu-lib.sh
dense fp32
for n in ${INTERVALS:-250 1000}; do
  env X=1 "$S/esoflow" bench --amr "$S/scenes/square_cylinder_amr_2d.toml" --backend cuda --steps 500 --seconds 4 --set amr.interval=$n --csv "$W/cyl-every$n.csv" > "$W/cyl-every$n.log" 2>&1
  echo "cyl-every$n $(grep -o 'MLUPS.*' "$W/cyl-every$n.log" | head -1)"
  ( time "$S/esoflow" run "$S/scenes/square_cylinder_amr_2d.toml" --backend cuda --steps 20000 --set solver.stats_every=10 --set amr.interval=$n --export "$W/cyl-amr" ) > "$W/cyl-amr-every$n.log" 2>&1
  grep -h "^real" "$W/cyl-amr-every$n.log"
  cp "$W/cyl-amr/stats.csv" "$W/cyl-amr-every$n-stats.csv"; rm -rf "$W/cyl-amr"
done
if [ -z "${INTERVALS:-}" ]; then
  BIG='--set domain.size=[384,128,128] --set amr.capacity=400000'
  sph big-fixed "$F $BIG" X=1
  sph big-adapt "$BIG" X=1
fi
tar czf $OUT/w.tar.gz -C $OUT w
