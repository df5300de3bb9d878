#!/usr/bin/env bash
# The viewer's pipeline timed on a GPU host without a display (esoflow view --bench): a
# Taylor-Green box on --backend cuda (256^3 D3Q19 unless SIZE is set), drawn offscreen by wgpu
# on the host's Vulkan driver, with one slice and a |vorticity| isosurface (and one slice alone,
# and one slice with TRACERS tracers, 100,000 unless set, moved through every frame),
# frames through host memory (staging) and through GPU memory shared by CUDA and Vulkan
# (interop: the shaders read the shared buffers in place): first as fast as frames come (FPS),
# then paced at 60 FPS (the solver's MLUPS while drawing). Run from
# the repository root after scripts/stage-gpu.sh, with the Vulkan loader's .deb files in .gl/
# (the device README's recipe). Writes $OUT/render-*.log and prints the numbers.
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
S=${SIZE:-256}
SCENE="stage/scenes/taylor_green_3d.toml --set domain.size=[$S,$S,$S] --backend cuda --steps-per-frame ${SPF:-10}"
ISO="iso=vorticity:${ISO:-0.0008}"
run() { # name, extra args
  local name=$1; shift
  # shellcheck disable=SC2086
  timeout 200 stage/esoflow view $SCENE --bench "${SECONDS_EACH:-4}" "$@" > "$OUT/render-$S-$name.log" 2>&1
  echo "== $S^3 $name: $*"
  grep -E "frames drawn|frame path|per frame|MLUPS" "$OUT/render-$S-$name.log"
}
# VIEWS: iso (slice + isosurface), slice (one slice), tracers (one slice and tracers),
# streamlines (one slice and LINES x LINES streamlines, 16 x 16 unless set).
for path in ${PATHS:-shared host}; do
  for view in ${VIEWS:-iso slice}; do
    case "$view" in
      iso) extra=(--view "$ISO") ;;
      tracers) extra=(--view "tracers=${TRACERS:-100000}") ;;
      streamlines) extra=(--view "streamlines=${LINES:-16}") ;;
      *) extra=() ;;
    esac
    run "$path-$view" "${extra[@]}" --frame-path "$path"
    run "$path-$view-60" "${extra[@]}" --frame-path "$path" --bench-fps 60
  done
done
