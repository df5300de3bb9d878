#!/usr/bin/env bash
# Session 30, device call 1 (from the repo root after scripts/stage-quick.sh): the adaptive-block
# GPU tests with the new cell-edit test, then ncu of the step kernel in both DDF storages on the
# fixed-mesh sphere (one level-0 and one level-1 launch each) for the in-place work ahead.
source scripts/amr-gpu-lib.sh
amr_gpu_tests
"$S/test-cuda" gpu_cell_edits --nocapture --test-threads 1 > "$W/test-edits.log" 2>&1; echo "test edits rc $?" | tee -a "$W/test-edits.log"
grep -h "edit [01]\|test result\|panicked" "$W/test-edits.log" | head -40
sph fixed "$F"
sph fixed-inplace "$F --set amr.in_place=true"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
echo "ncu: $NCU"
for st in two inplace; do
  ip=false; [ $st = inplace ] && ip=true
  ESOFLOW_AMR_GRAPHS=0 timeout 200 "$NCU" --set full -k regex:amr_step --launch-skip 600 --launch-count 3 \
    "$S/esoflow" bench --amr "$S/scenes/sphere_3d.toml" --backend cuda --steps 150 --seconds 0.5 \
    --set amr.enabled=true --set amr.max_level=1 --set amr.interval=0 --set amr.in_place=$ip > "$W/ncu-step-$st.txt" 2>&1
  echo "ncu $st rc $?"
  grep -E "amr_step|Duration|L2 Cache Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Issue Slots Busy|Executed Ipc A" "$W/ncu-step-$st.txt" | head -40
done
