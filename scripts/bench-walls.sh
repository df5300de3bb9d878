#!/usr/bin/env bash
# Forces at curved walls and open boundaries, measured with `esoflow run`:
#   st          Schaefer and Turek 2D-1 (Re 20) at D = 10, 20, 40: C_D and C_L against 5.58 and
#               0.0106, interpolated walls against the staircase;
#   targets     the two drag checks only: 2D-1 at D = 20 and the sphere scene as shipped;
#   convergence the same with interpolated walls and TRT in diffusive scaling (tau 0.575 at
#               every D, U_mean = 0.5 / D, so the Mach number falls with the grid spacing):
#               the observed order of C_D and C_L against the reference values 5.5795 and
#               0.010618 (John 2004);
#   sphere      a sphere at Re 100 (D = 24, periodic 8 D x 8 D cross-section): mean C_D over the
#               second half of the run and its swing (max - min), started from rest with absorbing
#               layers against started from the mean flow with equilibrium faces;
#   confinement the sphere in periodic cross-sections of 12 D and 16 D: how much of the drag
#               above 1.087 the confinement adds;
#   mach        the sphere at half the free-stream velocity (U = 0.025, Mach 0.043): how much of
#               it the Mach number adds;
#   lattice     the sphere on D3Q27 instead of D3Q19;
#   upstream    the sphere 8 D behind the inlet instead of 4 D (the inlet's absorbing layer holds
#               the velocity at U where the sphere still slows the flow);
#   resolution  the sphere at D = 32, 8 D behind the inlet;
#   blocks      the sphere on adaptive blocks: level 0 at D = 12, the sphere's surroundings on
#               level 1 (D = 24, near-wall refinement, mesh fixed), interpolated against
#               staircase walls; started from the mean flow (no absorbing layers on blocks),
#               BGK (the blocks' collision), with the dense grid at D = 24 run the same way;
#   cost        the cost of curved walls: MLUPS of the sphere scene with interpolated and
#               staircase walls.
# Usage: bash scripts/bench-walls.sh [esoflow binary] [backend] [sections...]
#   ARGS="--gpus 2" adds flags to every run (e.g. several GPUs).
#   (defaults: target/release/esoflow cuda st sphere cost)
# Writes OUT (default bench-walls-out)/*.log and stats folders, and prints the tables last.
set -uo pipefail
BIN=${1:-target/release/esoflow}
BACKEND=${2:-cuda}
shift $(( $# < 2 ? $# : 2 ))
SECTIONS=${*:-st sphere cost}
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
OUT=${OUT:-bench-walls-out}
mkdir -p "$OUT"
ST=scenes/schaefer_turek_2d.toml
SPHERE=scenes/sphere_re100_3d.toml
# The sphere studies' first box (the scene's before it moved the sphere to 8 D behind the inlet
# and widened the cross-section to 12 D): 4 D behind the inlet, 8 D x 8 D.
BOX4D=(--set 'domain.size=[480,192,192]' --set 'obstacles.0.center=[96,95.5,95.5]')

force_of() { grep "force on" "$1" | tail -n 1 | sed 's/.*(\(.*\)).*/\1/' | tr -d ' '; }

st_run() { # D walls collision umean
  local d=$1 walls=$2 coll=$3 u=$4
  local nx=$((22 * d + 1)) ny=$((41 * d / 10 + 2))
  local umax; umax=$(awk "BEGIN{print 1.5*$u}")
  local steps; steps=$(awk "BEGIN{printf \"%d\", 40000*($d/20)*(0.05/$u)}")
  local log="$OUT/st-$d-$walls-$coll-$u.log"
  # shellcheck disable=SC2086
  "$BIN" run "$ST" --backend "$BACKEND" ${ARGS:-} --steps "$steps" \
    --set "domain.size=[$nx,$ny]" --set "obstacles.0.center=[$((2 * d)),$(awk "BEGIN{print 0.5+2*$d}")]" \
    --set "obstacles.0.radius=$(awk "BEGIN{print $d/2}")" --set "fluid.length=$d" --set "fluid.velocity=$u" \
    --set "boundaries.x_min.velocity=[$umax,0]" --set "initial.velocity=[$u,0]" \
    --set "solver.walls=$walls" --set "solver.collision=$coll" --set "solver.stats_every=100000000" >"$log" 2>&1
  local f; f=$(force_of "$log")
  awk -v f="$f" -v d="$d" -v u="$u" -v w="$walls" -v c="$coll" -v s="$steps" 'BEGIN{
    split(f, a, ","); q = 0.5 * u * u * d;
    printf "%-4d %-13s %-5s %-6s %-7d %.4f %+6.2f%%   %.5f %+6.1f%%\n", d, w, c, u, s, a[1]/q, 100*(a[1]/q/5.58-1), a[2]/q, 100*(a[2]/q/0.0106-1) }'
}

sphere_run() { # label free-stream-velocity sets...
  local label=$1 u=$2; shift 2
  local dir="${TMPDIR:-/tmp}/bench-walls-sphere-$label"
  # Statistics only where the binary has the option; else the fields are written too (into TMPDIR).
  if "$BIN" run --help 2>&1 | grep -q -- --export-fields; then
    # shellcheck disable=SC2086
    "$BIN" run "$SPHERE" --backend "$BACKEND" ${ARGS:-} --export "$dir" --export-fields none "$@" >"$OUT/sphere-$label.log" 2>&1
  else
    "$BIN" run "$SPHERE" --backend "$BACKEND" --export "$dir" "$@" >"$OUT/sphere-$label.log" 2>&1
  fi
  cp "$dir/stats.csv" "$OUT/sphere-$label.csv"
  # C_D = 2 F_x / (rho U^2 pi R^2) with R = RADIUS (default 12); second half of the rows.
  python3 - "$OUT/sphere-$label.csv" "$label" "$u" "${RADIUS:-12}" <<'PY'
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
key = next(k for k in rows[0] if k.strip().lower() in ("force_x", "fx", "force x") or k.startswith("force_x"))
u = float(sys.argv[3])
r0 = float(sys.argv[4])
cd = [2 * float(r[key]) / (u ** 2 * math.pi * r0 ** 2) for r in rows]
half = cd[len(cd) // 2:]
print(f"{sys.argv[2]:<28} steps {rows[-1]['step']:>6}  C_D mean {sum(half)/len(half):.4f} ({100*(sum(half)/len(half)/1.087-1):+.2f}% vs 1.087)  swing {max(half)-min(half):.4f}")
PY
}

want st && {
  echo "# Schaefer-Turek 2D-1 on $BACKEND ($("$BIN" info 2>/dev/null | head -n 1))"
  echo "D    walls         coll  U      steps   C_D    err      C_L     err"
  for d in 10 20 40; do st_run $d interpolated trt 0.025; done
  for d in 10 20 40; do st_run $d staircase bgk 0.05; done
  st_run 20 interpolated bgk 0.05
  st_run 20 interpolated trt 0.05
} | tee "$OUT/schaefer-turek.txt"

want targets && {
  echo "# Drag checks: Schaefer-Turek 2D-1 at D = 20 and the sphere scene, on $BACKEND ${ARGS:-}"
  echo "D    walls         coll  U      steps   C_D    err      C_L     err"
  st_run 20 interpolated trt 0.025
  sphere_run "sphere-scene" 0.05
} | tee "$OUT/targets.txt"

want convergence && {
  echo "# Schaefer-Turek 2D-1, diffusive scaling (tau 0.575), on $BACKEND"
  echo "D    walls         coll  U      steps   C_D    err      C_L     err"
  for d in 10 20 40; do st_run $d interpolated trt "$(awk "BEGIN{print 0.5/$d}")"; done
} | tee "$OUT/convergence.txt"
want convergence && python3 - "$OUT/convergence.txt" <<'PY'
import math, sys
rows = [l.split() for l in open(sys.argv[1]) if l[:1].isdigit()]
for name, col, ref in (("C_D", 5, 5.5795), ("C_L", 7, 0.010618)):
    d = [int(r[0]) for r in rows]
    e = [abs(float(r[col]) - ref) for r in rows]
    orders = ", ".join(f"{math.log(e[k] / e[k + 1], d[k + 1] / d[k]):.2f}" for k in range(len(e) - 1) if e[k + 1] > 0)
    print(f"{name}: errors against {ref}: " + ", ".join(f"{x:.5f}" for x in e) + f"; observed order {orders}")
PY

want sphere && {
  echo "# Sphere Re 100, D = 24, on $BACKEND"
  sphere_run "from-rest-sponges" 0.05 "${BOX4D[@]}"
  sphere_run "mean-flow-reflecting-faces" 0.05 "${BOX4D[@]}" --set boundaries.x_min.sponge=0 --set boundaries.x_max.sponge=0 --set 'initial.velocity=[0.05,0,0]'
  sphere_run "staircase-from-rest" 0.05 "${BOX4D[@]}" --set solver.walls=staircase
} | tee "$OUT/sphere.txt"

want confinement && {
  echo "# Sphere Re 100, D = 24, periodic cross-sections, on $BACKEND"
  sphere_run "cross-section-12D" 0.05 --set 'domain.size=[480,288,288]' --set 'obstacles.0.center=[96,143.5,143.5]'
  sphere_run "cross-section-16D" 0.05 --set 'domain.size=[480,384,384]' --set 'obstacles.0.center=[96,191.5,191.5]'
} | tee "$OUT/confinement.txt"

want mach && {
  echo "# Sphere Re 100, D = 24, free-stream velocity halved (Mach 0.043, twice the steps), on $BACKEND"
  sphere_run "velocity-0.025" 0.025 "${BOX4D[@]}" --set fluid.velocity=0.025 --set 'boundaries.x_min.velocity=[0.025,0,0]' --set solver.steps=76800
} | tee "$OUT/mach.txt"

want lattice && {
  echo "# Sphere Re 100, D = 24, D3Q27, on $BACKEND"
  sphere_run "lattice-D3Q27" 0.05 "${BOX4D[@]}" --set domain.lattice=D3Q27
} | tee "$OUT/lattice.txt"

want upstream && {
  echo "# Sphere Re 100, D = 24, 8 D behind the inlet, on $BACKEND"
  sphere_run "upstream-8D" 0.05 --set 'domain.size=[576,192,192]' --set 'obstacles.0.center=[192,95.5,95.5]'
  sphere_run "upstream-12D" 0.05 --set 'domain.size=[672,192,192]' --set 'obstacles.0.center=[288,95.5,95.5]'
  sphere_run "upstream-4D-no-inlet-layer" 0.05 "${BOX4D[@]}" --set boundaries.x_min.sponge=0
} | tee "$OUT/upstream.txt"

want resolution && {
  echo "# Sphere Re 100, D = 32, 8 D behind the inlet, periodic 8 D x 8 D, on $BACKEND"
  RADIUS=16 sphere_run "upstream-8D-D32" 0.05 --set 'domain.size=[768,256,256]' --set 'obstacles.0.center=[256,127.5,127.5]' \
    --set obstacles.0.radius=16 --set fluid.length=32 --set boundaries.x_min.sponge=32 --set boundaries.x_max.sponge=64 --set solver.steps=51200
} | tee "$OUT/resolution.txt"

want blocks && {
  echo "# Sphere Re 100 on adaptive blocks (finest D = 24 around the sphere, D = 12 elsewhere), on $BACKEND"
  for w in interpolated staircase; do
    RADIUS=6 sphere_run "blocks-$w" 0.05 --set amr.enabled=true --set amr.max_level=1 --set amr.near_wall=1 --set amr.wall_margin=6 \
      --set amr.interval=0 --set 'domain.size=[240,96,96]' --set 'obstacles.0.center=[47.75,47.5,47.5]' --set obstacles.0.radius=6 \
      --set fluid.length=12 --set boundaries.x_min.sponge=0 --set boundaries.x_max.sponge=0 --set 'initial.velocity=[0.05,0,0]' \
      --set solver.steps=19200 --set solver.walls=$w --set solver.collision=bgk
  done
  sphere_run "dense-bgk-mean-flow" 0.05 "${BOX4D[@]}" --set solver.collision=bgk --set boundaries.x_min.sponge=0 --set boundaries.x_max.sponge=0 \
    --set 'initial.velocity=[0.05,0,0]'
} | tee "$OUT/blocks.txt"

want cost && {
  echo "# Cost of curved walls: sphere scene, 3000 steps, MLUPS from run's last line"
  for w in interpolated staircase; do
    "$BIN" run "$SPHERE" --backend "$BACKEND" --steps 3000 "${BOX4D[@]}" --set solver.walls=$w --set solver.stats_every=100000000 >"$OUT/mlups-$w.log" 2>&1
    echo "$w: $(grep -o '[0-9.]* MLUPS' "$OUT/mlups-$w.log" | head -n 1)"
  done
} | tee "$OUT/cost.txt"
