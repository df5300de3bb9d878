#!/usr/bin/env bash
# Adaptive blocks against the dense solver at equal accuracy, on a GPU host (repository root,
# after scripts/stage-quick.sh): the open-flow square cylinder (scenes/square_cylinder_open_amr_2d.toml,
# blockage 1/32) with its finest level at D = 20, 40 and 80 cells, each against the dense solver on
# the uniform grid of that level, forces sampled at the same physical interval (every 10 steps of
# level 0); then square_cylinder_amr_2d.toml (blockage 1/8) against square_cylinder_2d.toml; the
# open-flow run adapting every 200 and 1000 steps; the bench at three adaptation intervals; and the
# adaptive-block GPU tests. Times are each run's own "done" line (stepping and statistics). St and
# C_D over the second half of each run through scripts/strouhal.py. Logs and stats CSVs go to $W
# (default $OUT/w). Results: bench/results/amr-square-cylinder-equal-accuracy/.
# CASES (default "open l4 small interval bench tests") picks what runs; the D = 80 dense run takes
# about 80 s on an H200.
source scripts/amr-gpu-lib.sh  # run_stats, amr_gpu_tests, S, W
OPEN="$S/scenes/square_cylinder_open_amr_2d.toml"
DENSE="$S/scenes/square_cylinder_2d.toml"
CASES=${CASES:-open l4 small interval bench tests}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee "$W/device.txt"
has() { [[ " $CASES " == *" $1 "* ]]; }
st() { echo "$1 $(python3 scripts/strouhal.py "$W/$1-stats.csv" "$2" "$3" 0.075 "$4")"; }

if has open; then  # finest D = 20 (levels 0-2) and D = 40 (levels 0-3)
  run_stats open-amr 10 "$OPEN" --backend cuda --steps 20000
  run_stats open-dense 40 "$DENSE" --backend cuda --steps 80000 \
    --set domain.size=[1009,641] --set fluid.length=20 --set obstacles.0.min=[240,311] --set obstacles.0.max=[259,330]
  run_stats open-amr-l3 10 "$OPEN" --backend cuda --steps 20000 --set amr.max_level=3 --set amr.near_wall=3 --set amr.wall_margin=60
  run_stats open-dense-l3 80 "$DENSE" --backend cuda --steps 160000 \
    --set domain.size=[2017,1281] --set fluid.length=40 --set obstacles.0.min=[480,621] --set obstacles.0.max=[519,660]
  st open-amr 10000 20000 5; st open-amr-l3 10000 20000 5
  st open-dense 40000 80000 20; st open-dense-l3 80000 160000 40
fi
if has l4; then  # finest D = 80 (levels 0-4)
  run_stats open-amr-l4 10 "$OPEN" --backend cuda --steps 20000 --set amr.max_level=4 --set amr.near_wall=4 --set amr.wall_margin=120
  run_stats open-dense-l4 160 "$DENSE" --backend cuda --steps 320000 \
    --set domain.size=[4033,2561] --set fluid.length=80 --set obstacles.0.min=[960,1241] --set obstacles.0.max=[1039,1320]
  st open-amr-l4 10000 20000 5; st open-dense-l4 160000 320000 80
fi
if has small; then  # blockage 1/8: 66,000 finest cells
  run_stats cyl-amr 10 "$S/scenes/square_cylinder_amr_2d.toml" --backend cuda --steps 20000
  run_stats cyl-dense 20 "$DENSE" --backend cuda --steps 40000
  st cyl-amr 10000 20000 8; st cyl-dense 20000 40000 16
fi
if has interval; then  # does a longer adaptation interval keep the answer?
  for i in 200 1000; do
    run_stats open-amr-i$i 10 "$OPEN" --backend cuda --steps 20000 --set amr.interval=$i
    st open-amr-i$i 10000 20000 5
  done
fi
if has bench; then
  for i in 50 200 1000; do
    "$S/esoflow" bench --amr "$OPEN" --backend cuda --steps 2000 --seconds 4 --set amr.interval=$i --csv "$W/open-bench-$i.csv" > "$W/open-bench-$i.log" 2>&1
    echo "interval $i: $(grep -o 'MLUPS.*' "$W/open-bench-$i.log" | head -1)"
  done
fi
if has tests; then
  amr_gpu_tests
  "$S/test-cuda" gpu_cell_edits --nocapture --test-threads 1 > "$W/test-edits.log" 2>&1; echo "test edits rc $?" | tee -a "$W/test-edits.log"
fi
