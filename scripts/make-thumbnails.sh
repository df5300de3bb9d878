#!/usr/bin/env bash
# Make the presets window's pictures: each shipped scene run headless for a number of steps
# and rendered offscreen by `esoflow run --screenshot` into scenes/thumbnails/NAME.png.
# Usage: scripts/make-thumbnails.sh [ESOFLOW_BINARY] [SCENE_STEM ...]   (default: every scene)
# BACKEND=cuda runs them on an NVIDIA GPU. sphere_re100_3d needs one: its fields (183 MiB each)
# are over a software renderer's 128 MiB buffer limit, and it is hours on a CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/esoflow}
shift || true
backend=${BACKEND:-auto}
size=320x180
# scene stem | steps | view (field, colour map, isosurface)
table="
cylinder_2d|6000|field=vorticity,cmap=turbo
lid_driven_cavity_2d|20000|field=speed
lid_driven_cavity_3d|3000|field=speed
lid_driven_cavity_amr_2d|8000|field=speed
lid_driven_cavity_re10000_2d|10000|field=vorticity,cmap=turbo
poiseuille_2d|6000|field=ux
schaefer_turek_2d|20000|field=speed
sphere_3d|1500|field=speed,iso=vorticity:0.015
sphere_re100_3d|3000|field=speed,iso=vorticity:0.01
square_cylinder_2d|20000|field=vorticity,cmap=turbo
square_cylinder_amr_2d|10000|field=vorticity,cmap=turbo
square_cylinder_open_amr_2d|10000|field=vorticity,cmap=turbo
taylor_green_2d|500|field=vorticity
taylor_green_3d|2000|field=speed,iso=q:1e-5
"
want=("$@")
mkdir -p scenes/thumbnails
echo "$table" | while IFS='|' read -r stem steps view; do
  [ -n "$stem" ] || continue
  if [ ${#want[@]} -gt 0 ] && [[ ! " ${want[*]} " == *" $stem "* ]]; then continue; fi
  echo "== $stem: $steps steps, $view"
  "$bin" run "scenes/$stem.toml" --backend "$backend" --steps "$steps" --progress-every 60 \
    --screenshot "scenes/thumbnails/$stem.png" --view "$view,size=$size,legend=off"
done
