#!/usr/bin/env bash
# Session 33, device call 3 (same binary as call 2): the open-flow square cylinder one level
# further (D = 80 finest cells: adaptive blocks on 5 levels against the dense 4033 x 2561 grid),
# and square_cylinder_amr_2d.toml (blockage 1/8) at equal accuracy with the dense solver's
# checkpoints paced (session 28's 8.5x was timed with a checkpoint every 10 dense steps).
source scripts/amr-gpu-lib.sh  # run_stats: the runs with their statistics
OPEN="$S/scenes/square_cylinder_open_amr_2d.toml"
DENSE="$S/scenes/square_cylinder_2d.toml"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee "$W/device.txt"
run_stats cyl-amr 10 "$S/scenes/square_cylinder_amr_2d.toml" --backend cuda --steps 20000
run_stats cyl-dense 20 "$DENSE" --backend cuda --steps 40000
run_stats open-amr-l4 10 "$OPEN" --backend cuda --steps 20000 --set amr.max_level=4 --set amr.near_wall=4 --set amr.wall_margin=120
run_stats open-dense-l4 160 "$DENSE" --backend cuda --steps 320000 \
  --set domain.size=[4033,2561] --set fluid.length=80 --set obstacles.0.min=[960,1241] --set obstacles.0.max=[1039,1320]
echo "cyl-amr $(python3 scripts/strouhal.py "$W/cyl-amr-stats.csv" 10000 20000 0.075 8)"
echo "cyl-dense $(python3 scripts/strouhal.py "$W/cyl-dense-stats.csv" 20000 40000 0.075 16)"
echo "open-amr-l4 $(python3 scripts/strouhal.py "$W/open-amr-l4-stats.csv" 10000 20000 0.075 5)"
echo "open-dense-l4 $(python3 scripts/strouhal.py "$W/open-dense-l4-stats.csv" 160000 320000 0.075 80)"
