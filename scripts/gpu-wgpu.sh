#!/usr/bin/env bash
# The wgpu backend on a GPU host, beside the CUDA backend in the same run: the wgpu solver's
# tests against the CPU reference on the host's Vulkan driver, `esoflow info`, the bench of
# both backends on the same box, and the default scene on both.
# Run on the GPU host from the repository root after scripts/stage-gpu.sh, with .gl carried
# (see scripts/vulkan-loader.sh): bash scripts/gpu-wgpu.sh
# Writes logs under $OUT (or out/gpu-wgpu) and prints a short table last.
set -uo pipefail
OUT=${OUT:-out/gpu-wgpu}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
if ! source scripts/vulkan-loader.sh; then
  echo "no Vulkan loader (.gl): the wgpu backend cannot run here"
  exit 1
fi
SIZE=${SIZE:-256}
SECS=${BENCH_SECONDS:-1}
stage/esoflow info > "$OUT/info.log" 2>&1
ESOFLOW_REQUIRE_ADAPTER=1 timeout "${TEST_SECONDS:-240}" stage/test-wgpu --test-threads 1 > "$OUT/test-wgpu.log" 2>&1
tests_rc=$?
timeout 150 stage/esoflow bench --backend wgpu --size "$SIZE" --lattice D2Q9,D3Q19,D3Q27 --seconds "$SECS" \
  --csv "$OUT/bench-wgpu.csv" > "$OUT/bench-wgpu.log" 2>&1
timeout 150 stage/esoflow bench --backend cuda --size "$SIZE" --lattice D2Q9,D3Q19,D3Q27 --scheme esoteric_pull \
  --precision fp32 --seconds "$SECS" --csv "$OUT/bench-cuda.csv" > "$OUT/bench-cuda.log" 2>&1
: > "$OUT/scene.log"
for b in wgpu cuda; do
  timeout 120 stage/esoflow run scenes/cylinder_2d.toml --backend "$b" --steps 20000 > "$OUT/scene-$b.log" 2>&1
  echo "$b rc=$? $(grep -E '^done|C_D|St ' "$OUT/scene-$b.log" | tr '\n' ' ' | head -c 400)" >> "$OUT/scene.log"
done
echo "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
echo "== adapters"; grep -A20 "backend wgpu" "$OUT/info.log"
echo "== wgpu tests rc=$tests_rc"; grep -E "^test |test result" "$OUT/test-wgpu.log"
echo "== bench wgpu"; grep -E "device|copy bandwidth|^D" "$OUT/bench-wgpu.log"
echo "== bench cuda"; grep -E "device|copy bandwidth|^D" "$OUT/bench-cuda.log"
echo "== default scene, 20,000 steps"; cat "$OUT/scene.log"
