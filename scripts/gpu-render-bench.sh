#!/usr/bin/env bash
# The viewer's pipeline timed on a GPU host without a display (esoflow view --bench): a 256^3
# D3Q19 Taylor-Green box on --backend cuda, drawn offscreen by wgpu on the host's Vulkan driver,
# first with one slice, then with one slice and a |vorticity| isosurface. Run from the repository
# root after scripts/stage-gpu.sh, with the Vulkan loader's .deb files in .gl/ (the device
# README's recipe). Writes $OUT/render-*.log and prints the numbers.
set -uo pipefail
OUT=${OUT:-out/gpu-render}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
if ! ldconfig -p | grep -q libvulkan; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES=$icd
export WGPU_BACKEND=vulkan
SCENE="stage/scenes/taylor_green_3d.toml --set domain.size=[256,256,256] --backend cuda --steps-per-frame ${SPF:-10}"
# shellcheck disable=SC2086
timeout 120 stage/esoflow view $SCENE --bench "${SECONDS_EACH:-4}" > "$OUT/render-slice.log" 2>&1
# shellcheck disable=SC2086
timeout 120 stage/esoflow view $SCENE --bench "${SECONDS_EACH:-4}" --view "iso=vorticity:${ISO:-0.0008}" > "$OUT/render-iso.log" 2>&1
for f in "$OUT"/render-slice.log "$OUT"/render-iso.log; do echo "== $(basename "$f")"; grep -vE "^\s*$" "$f" | tail -n 6; done
