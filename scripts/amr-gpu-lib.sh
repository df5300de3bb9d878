# Helpers for adaptive-block runs on a GPU host (sourced by scripts/bench-amr-square-cylinder.sh
# and by ad-hoc run scripts, from the repo root, after scripts/stage-quick.sh). S: the staged
# binaries (default stage); W: where logs and CSVs go (default $OUT/w, OUT the device's output folder,
# default out). F and H: the sphere runs' options for a fixed mesh and for FP16S storage.
# The GPU tests must run here: a missing device fails them instead of reporting them ignored.
export ESOFLOW_REQUIRE_GPU=1
OUT=${OUT:-out}; W=${W:-$OUT/w}; S=${S:-stage}; mkdir -p "$W"
F="--set amr.interval=0"
H="--set solver.precision=\"fp16s\""

# The device line into $W/device.txt, then the adaptive-block GPU tests (forest and solver against
# the CPU reference) with their summary; extra environment for the solver test in $1 (optional;
# ESOFLOW_AMR_LISTS=many runs the test forests, all small, through the many-block launch lists
# that capacities from 65,536 blocks use).
amr_gpu_tests() {
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee "$W/device.txt"
  env ${1:-X=1} "$S/test-cuda" gpu_adapt --nocapture --test-threads 1 > "$W/test-amr.log" 2>&1; echo "test amr rc $?" | tee -a "$W/test-amr.log"
  "$S/test-cuda" gpu_forest --nocapture --test-threads 1 > "$W/test-forest.log" 2>&1; echo "test forest rc $?" | tee -a "$W/test-forest.log"
  grep -h "test result\|FAILED\|panicked" "$W"/test-*.log | head
}

# The sphere bench with two levels: sph_with NAME BINARY "EXTRA ARGS" ENV...; sph NAME "EXTRA ARGS"
# ENV... with $S/esoflow. Prints the MLUPS counted per level (a level-l cell 2^l times a coarse
# step, as the AGAL paper counts them) and the time in refinement.
sph_with() {
  local name=$1 bin=$2 extra=$3; shift 3
  # shellcheck disable=SC2086
  env "$@" "$bin" bench --amr "$S/scenes/sphere_3d.toml" --backend cuda --steps 200 --seconds 4 --set amr.enabled=true --set amr.max_level=1 $extra --csv "$W/sph-$name.csv" > "$W/sph-$name.log" 2>&1
  echo "$name $(grep -o 'MLUPS (a level-l cell counted 2^l times) [0-9.]*' "$W/sph-$name.log") $(grep -o 'time in refinement [0-9.]* %.*' "$W/sph-$name.log")"
}
sph() {
  local name=$1 extra=$2; shift 2
  sph_with "$name" "$S/esoflow" "$extra" "$@"
}

# The dense Esoteric-Pull D3Q19 256^3 bench, the same-host baseline: dense PRECISION (fp32 into
# $W/dense.csv, fp16s into $W/dense-fp16s.csv).
dense() {
  local name=dense; [ "$1" = fp32 ] || name=dense-$1
  "$S/esoflow" bench --backend cuda --size 256 --lattice D3Q19 --scheme esoteric_pull --precision "$1" --seconds 2 --csv "$W/$name.csv" > "$W/$name.log" 2>&1
  grep -h "D3Q19  esoteric" "$W/$name.log"
}

# The adaptive 2D benches: cyl NAME ENV... (square cylinder into $W/cyl-NAME.csv, $W/cyl.csv for
# an empty NAME), cavity.
cyl() {
  local n=cyl${1:+-$1}
  env "${@:2}" "$S/esoflow" bench --amr "$S/scenes/square_cylinder_amr_2d.toml" --backend cuda --steps 500 --seconds 4 --csv "$W/$n.csv" > "$W/$n.log" 2>&1
  echo "$n $(grep -o 'MLUPS.*' "$W/$n.log" | head -1)"
}
cavity() {
  "$S/esoflow" bench --amr "$S/scenes/lid_driven_cavity_amr_2d.toml" --backend cuda --steps 500 --seconds 3 --csv "$W/cavity.csv" > "$W/cavity.log" 2>&1
  echo "cavity $(grep -o 'MLUPS.*' "$W/cavity.log" | head -1)"
}

# The square cylinder at equal accuracy: 20,000 steps timed, its statistics into
# $W/cyl-amr-stats.csv (scripts/strouhal.py cyl-amr-stats.csv 10000 20000 0.075 8 gives St, C_D).
cyl_accuracy() {
  ( time "$S/esoflow" run "$S/scenes/square_cylinder_amr_2d.toml" --backend cuda --steps 20000 --set solver.stats_every=10 --export "$W/cyl-amr" ) > "$W/cyl-amr.log" 2>&1
  grep -h "^real" "$W/cyl-amr.log"
  cp "$W/cyl-amr/stats.csv" "$W/cyl-amr-stats.csv" 2>/dev/null
  rm -rf "$W/cyl-amr"
}

# A run with its statistics every EVERY steps (forces for St and C_D: scripts/strouhal.py), the
# run's own "done" line printed: run_stats NAME EVERY ARGS... (esoflow run ARGS) into
# $W/NAME.log and $W/NAME-stats.csv; the exported fields are removed.
run_stats() {
  local n=$1 e=$2; shift 2
  "$S/esoflow" run "$@" --set solver.stats_every="$e" --export "$W/$n" > "$W/$n.log" 2>&1
  echo "$n: $(grep -h '^done' "$W/$n.log")"
  cp "$W/$n/stats.csv" "$W/$n-stats.csv" 2>/dev/null
  rm -rf "$W/$n"
}
