#!/usr/bin/env bash
# Session 33, device call 2 (repo root, after scripts/stage-quick.sh with the run's rollback
# checkpoints paced in wall time): the open-flow square cylinder at equal accuracy, adaptive
# blocks against the dense solver on the uniform finest grid, forces sampled at the same
# physical interval (every 10 steps of level 0: 40 fine steps with D = 20, 80 with D = 40);
# the run's own "done" time (stepping and statistics, no start-up or export). Then the bench
# of the adaptive run at three intervals, then the adaptive-block GPU tests (session 32's halo
# form for in-place adaptations).
source scripts/amr-gpu-lib.sh  # run_stats: the runs with their statistics
OPEN="$S/scenes/square_cylinder_open_amr_2d.toml"
DENSE="$S/scenes/square_cylinder_2d.toml"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee "$W/device.txt"
run_stats open-amr 10 "$OPEN" --backend cuda --steps 20000
run_stats open-dense 40 "$DENSE" --backend cuda --steps 80000 \
  --set domain.size=[1009,641] --set fluid.length=20 --set obstacles.0.min=[240,311] --set obstacles.0.max=[259,330]
run_stats open-amr-l3 10 "$OPEN" --backend cuda --steps 20000 --set amr.max_level=3 --set amr.near_wall=3 --set amr.wall_margin=60
run_stats open-dense-l3 80 "$DENSE" --backend cuda --steps 160000 \
  --set domain.size=[2017,1281] --set fluid.length=40 --set obstacles.0.min=[480,621] --set obstacles.0.max=[519,660]
for n in open-amr open-amr-l3; do echo "$n $(python3 scripts/strouhal.py "$W/$n-stats.csv" 10000 20000 0.075 5)"; done
echo "open-dense $(python3 scripts/strouhal.py "$W/open-dense-stats.csv" 40000 80000 0.075 20)"
echo "open-dense-l3 $(python3 scripts/strouhal.py "$W/open-dense-l3-stats.csv" 80000 160000 0.075 40)"
for i in 50 200 1000; do
  "$S/esoflow" bench --amr "$OPEN" --backend cuda --steps 2000 --seconds 4 --set amr.interval=$i --csv "$W/open-bench-$i.csv" > "$W/open-bench-$i.log" 2>&1
  echo "interval $i: $(grep -o 'MLUPS.*' "$W/open-bench-$i.log" | head -1)"
done
amr_gpu_tests
