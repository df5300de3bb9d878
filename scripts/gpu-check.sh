#!/usr/bin/env bash
# Checks the CUDA backend on a GPU host in one run: the GPU tests, the bench table of every
# lattice and scheme (CSV), the whole-row kernel against bricks only, and every shipped scene on
# --backend cuda.
# Run on the GPU host from the repository root after scripts/stage-gpu.sh: bash scripts/gpu-check.sh
# Writes logs under $OUT (or out/gpu-check) and prints a short table last. Arguments, if any,
# are test-name filters for the GPU tests (default: all of them).
set -uo pipefail
OUT=${OUT:-out/gpu-check}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# The GPU tests must run here: a missing device fails them instead of reporting them ignored.
export ESOFLOW_REQUIRE_GPU=1 ESOFLOW_REQUIRE_NVRTC=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
# GPU tests and the scene runs together (neither is timed), then the bench alone.
timeout "${TEST_SECONDS:-400}" stage/test-cuda --nocapture --test-threads 1 "$@" > "$OUT/test-cuda.log" 2>&1 &
tests_pid=$!
: > "$OUT/scenes.log"
for s in scenes/*.toml; do
  timeout 60 stage/esoflow run "$s" --backend cuda --steps 3000 > /tmp/scene.log 2>&1
  echo "$(basename "$s") rc=$? $(grep -E '^done' /tmp/scene.log | head -c 160)" >> "$OUT/scenes.log"
done
wait $tests_pid
tests_rc=$?
# The Vulkan interop tests (shared frames between CUDA and the renderer): every export they
# use must be there on a GPU host.
if source scripts/vulkan-loader.sh; then
  ESOFLOW_REQUIRE_ADAPTER=1 ESOFLOW_REQUIRE_INTEROP=1 timeout 120 stage/test-interop > "$OUT/test-interop.log" 2>&1
  interop_rc=$?
else
  echo "no Vulkan loader (.gl): the interop tests did not run" > "$OUT/test-interop.log"
  interop_rc=none
fi
timeout 150 stage/esoflow bench --backend cuda --size 256 --lattice D3Q19,D3Q27 --scheme esoteric_pull,one_step_pull,aa \
  --seconds "${BENCH_SECONDS:-0.6}" --csv "$OUT/bench.csv" > "$OUT/bench.log" 2>&1
bench_rc=$?
ESOFLOW_CUDA_ROWS=0 timeout 60 stage/esoflow bench --backend cuda --size 256 --lattice D3Q19 --scheme esoteric_pull \
  --precision fp32,fp16s --seconds 0.6 > "$OUT/bench-bricks-only.log" 2>&1
# Variants: the row kernel one cell per thread (pairs off), and LBM-Ghost.
{ ESOFLOW_CUDA_PAIRS=0 timeout 60 stage/esoflow bench --backend cuda --size 256 --lattice D3Q19,D3Q27 --scheme esoteric_pull \
    --precision fp32,fp16s --seconds 0.6 2>&1 | sed 's/^/pairs-off /'
  timeout 60 stage/esoflow bench --backend cuda --size 256 --lattice D3Q19 --scheme ghost --precision fp32,fp16s --seconds 0.6 2>&1
} > "$OUT/bench-variants.log"
echo "== $(cat "$OUT/gpu.txt")"
echo "== GPU tests rc=$tests_rc"; grep -E "^test |test result" "$OUT/test-cuda.log"
echo "== interop tests rc=$interop_rc"; grep -E "^test |test result|did not run" "$OUT/test-interop.log"
echo "== bench rc=$bench_rc"; grep -E "copy bandwidth|D3Q|bricks|MLUPS|split|fused" "$OUT/bench.log"
echo "== bricks only (ESOFLOW_CUDA_ROWS=0)"; grep -E "D3Q19" "$OUT/bench-bricks-only.log"
echo "== variants"; grep -E "D3Q" "$OUT/bench-variants.log"
echo "== scenes on --backend cuda"; cat "$OUT/scenes.log"
