#!/usr/bin/env bash
# Adaptive blocks on a GPU host (after scripts/stage-quick.sh; run from the repo root with stage/
# there): the GPU-vs-CPU test of adaptive blocks, the AMR benches (MLUPS counted per level as the
# AGAL paper counts them, time in refinement) next to the dense Esoteric-Pull bench on the same card, and the square cylinder
# at equal accuracy, adaptive against the uniform fine grid. Logs and CSVs go to work/ and, as
# one archive amr.tar.gz, to $OUT (the device tool brings back only a few files).
# The GPU tests must run here: a missing device fails them instead of reporting them ignored.
export ESOFLOW_REQUIRE_GPU=1
set -uo pipefail
FINAL=${OUT:-out}
OUT=work
mkdir -p "$OUT" "$FINAL"
S=stage
dev=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
echo "device: $dev" | tee "$OUT/device.txt"
$S/test-cuda gpu_forest --nocapture --test-threads 1 > "$OUT/test-forest.log" 2>&1; echo "test rc $?" >> "$OUT/test-forest.log"
$S/test-cuda gpu_adapt --nocapture --test-threads 1 > "$OUT/test-amr.log" 2>&1; echo "test rc $?" >> "$OUT/test-amr.log"
$S/esoflow bench --backend cuda --size 256 --lattice D3Q19 --scheme esoteric_pull --precision fp32 --seconds 2 --csv "$OUT/dense.csv" > "$OUT/dense.log" 2>&1
$S/esoflow bench --amr $S/scenes/sphere_3d.toml --backend cuda --steps 200 --seconds 5 --csv "$OUT/amr-sphere.csv" \
  --set amr.enabled=true --set amr.max_level=1 > "$OUT/amr-sphere.log" 2>&1
$S/esoflow bench --amr $S/scenes/sphere_3d.toml --backend cuda --steps 200 --seconds 5 --csv "$OUT/amr-sphere-fixed.csv" \
  --set amr.enabled=true --set amr.max_level=1 --set amr.interval=0 > "$OUT/amr-sphere-fixed.log" 2>&1
# 16-bit storage (solver.precision = "fp16s"), against the dense Esoteric-Pull FP16S bench.
$S/esoflow bench --backend cuda --size 256 --lattice D3Q19 --scheme esoteric_pull --precision fp16s --seconds 2 --csv "$OUT/dense-fp16s.csv" > "$OUT/dense-fp16s.log" 2>&1
$S/esoflow bench --amr $S/scenes/sphere_3d.toml --backend cuda --steps 200 --seconds 5 --csv "$OUT/amr-sphere-fp16s.csv" \
  --set amr.enabled=true --set amr.max_level=1 --set solver.precision=\"fp16s\" > "$OUT/amr-sphere-fp16s.log" 2>&1
$S/esoflow bench --amr $S/scenes/sphere_3d.toml --backend cuda --steps 200 --seconds 5 --csv "$OUT/amr-sphere-fixed-fp16s.csv" \
  --set amr.enabled=true --set amr.max_level=1 --set amr.interval=0 --set solver.precision=\"fp16s\" > "$OUT/amr-sphere-fixed-fp16s.log" 2>&1
# Where an adaptation's time goes (every launch waited for: slower than the runs above).
ESOFLOW_AMR_PROFILE=1 $S/esoflow bench --amr $S/scenes/sphere_3d.toml --backend cuda --steps 200 --seconds 3 \
  --set amr.enabled=true --set amr.max_level=1 > "$OUT/amr-sphere-profile.log" 2>&1
ESOFLOW_AMR_PROFILE=1 $S/esoflow bench --amr $S/scenes/sphere_3d.toml --backend cuda --steps 100 --seconds 2 \
  --set amr.enabled=true --set amr.max_level=1 --set amr.interval=0 > "$OUT/amr-sphere-fixed-profile.log" 2>&1
$S/esoflow bench --amr $S/scenes/square_cylinder_amr_2d.toml --backend cuda --steps 500 --seconds 5 --csv "$OUT/amr-cyl.csv" > "$OUT/amr-cyl.log" 2>&1
$S/esoflow bench --amr $S/scenes/lid_driven_cavity_amr_2d.toml --backend cuda --steps 500 --seconds 3 --csv "$OUT/amr-cavity.csv" > "$OUT/amr-cavity.log" 2>&1
# Square cylinder, same physical time: 20,000 coarse steps adaptive, 40,000 on the fine grid.
( time $S/esoflow run $S/scenes/square_cylinder_amr_2d.toml --backend cuda --steps 20000 --set solver.stats_every=10 --export "$OUT/cyl-amr" ) > "$OUT/cyl-amr.log" 2>&1
# The uniform fine grid's run does not change with the adaptive code: DENSE_CYL=0 skips it.
[ "${DENSE_CYL:-1}" = 1 ] && ( time $S/esoflow run $S/scenes/square_cylinder_2d.toml --backend cuda --steps 40000 --set solver.stats_every=20 --export "$OUT/cyl-dense" ) > "$OUT/cyl-dense.log" 2>&1
rm -f "$OUT"/cyl-*/fields.*
tar czf "$FINAL/amr.tar.gz" "$OUT"
echo "== summary"
for t in forest amr; do tail -n 2 "$OUT/test-$t.log"; done
grep -h "MLUPS\|refinement\|leaves per level\|updates" "$OUT"/amr-{sphere,sphere-fixed,sphere-fp16s,sphere-fixed-fp16s,cyl,cavity}.log
grep -h "amr adaptation" "$OUT/amr-sphere-profile.log"
grep -h "amr kernel" "$OUT/amr-sphere-fixed-profile.log"
grep -h "D3Q19" "$OUT/dense.log" "$OUT/dense-fp16s.log" | tail -4
grep -h "^real" "$OUT"/cyl-*.log
