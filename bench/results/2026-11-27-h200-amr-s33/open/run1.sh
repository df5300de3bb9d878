#!/usr/bin/env bash
# Session 33, device call 1 (repo root, after scripts/stage-quick.sh on b3d33b1 plus session 32's uncommitted halo form): seed 004's open-flow
# square cylinder (scenes/square_cylinder_open_amr_2d.toml, blockage 1/32, D = 20 finest cells)
# on adaptive blocks, against the uniform finest grid run by the dense solver on the GPU (the
# same far field, 1009 x 641 cells with the boundary layers); forces every 10 steps of level 0
# (stats.csv), timed; then the bench of the adaptive run (MLUPS, time in refinement) at three
# intervals. St and C_D: scripts/strouhal.py STATS FROM TO 0.075 D (D = 5 level-0 cells, 20 for
# the dense run).
source scripts/amr-gpu-lib.sh
OPEN="$S/scenes/square_cylinder_open_amr_2d.toml"
run_stats() { # NAME ARGS...: esoflow run ARGS with stats every 10 steps into $W/NAME-stats.csv
  local n=$1; shift
  ( time "$S/esoflow" run "$@" --set solver.stats_every=10 --export "$W/$n" ) > "$W/$n.log" 2>&1
  echo "$n: $(grep -h '^real' "$W/$n.log")"
  cp "$W/$n/stats.csv" "$W/$n-stats.csv" 2>/dev/null
  rm -rf "$W/$n"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee "$W/device.txt"
run_stats open-amr "$OPEN" --backend cuda --steps 20000
run_stats open-amr-l3 "$OPEN" --backend cuda --steps 20000 --set amr.max_level=3 --set amr.near_wall=3 --set amr.wall_margin=60
run_stats open-dense "$S/scenes/square_cylinder_2d.toml" --backend cuda --steps 80000 \
  --set domain.size=[1009,641] --set fluid.length=20 --set obstacles.0.min=[240,311] --set obstacles.0.max=[259,330]
for i in 50 200 1000; do
  "$S/esoflow" bench --amr "$OPEN" --backend cuda --steps 2000 --seconds 4 --set amr.interval=$i --csv "$W/open-bench-$i.csv" > "$W/open-bench-$i.log" 2>&1
  echo "interval $i: $(grep -o 'MLUPS.*' "$W/open-bench-$i.log" | head -1)"
done
for n in open-amr open-amr-l3; do echo "$n $(python3 scripts/strouhal.py "$W/$n-stats.csv" 10000 20000 0.075 5)"; done
echo "open-dense $(python3 scripts/strouhal.py "$W/open-dense-stats.csv" 40000 80000 0.075 20)"
