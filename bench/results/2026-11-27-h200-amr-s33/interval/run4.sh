#!/usr/bin/env bash
# Session 33, device call 4 (same binary as calls 2-3): the open-flow square cylinder adapting
# every 200 and every 1000 steps of level 0 (the intervals that bring the time in refinement
# to 2.6 % and 0.6 %, fair/): do St and C_D hold? Then the cell-edit GPU test (both storages),
# which goes through the in-place halo form when an edit follows an adaptation.
source scripts/amr-gpu-lib.sh
OPEN="$S/scenes/square_cylinder_open_amr_2d.toml"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee "$W/device.txt"
for i in 200 1000; do
  "$S/esoflow" run "$OPEN" --backend cuda --steps 20000 --set amr.interval=$i --set solver.stats_every=10 --export "$W/open-amr-i$i" > "$W/open-amr-i$i.log" 2>&1
  cp "$W/open-amr-i$i/stats.csv" "$W/open-amr-i$i-stats.csv"; rm -rf "$W/open-amr-i$i"
  echo "interval $i: $(grep -h '^done' "$W/open-amr-i$i.log" | cut -c1-40) $(python3 scripts/strouhal.py "$W/open-amr-i$i-stats.csv" 10000 20000 0.075 5)"
done
"$S/test-cuda" gpu_cell_edits --nocapture --test-threads 1 > "$W/test-edits.log" 2>&1; echo "test edits rc $?" | tee -a "$W/test-edits.log"
grep -h "test result" "$W"/test-*.log
