# Helpers for issue 7's runs on a GPU host (sourced by the run scripts recorded under
# bench/results/, from the repo root, after scripts/stage-quick.sh): the caller sets S (the staged
# binaries, usually stage) and W (where logs and CSVs go).

# The device line into $W/device.txt, then the adaptive-block GPU tests (forest and solver against
# the CPU reference) with their summary; extra environment for the solver test in $1 (optional).
amr_gpu_tests() {
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee "$W/device.txt"
  env ${1:-X=1} "$S/test-cuda" gpu_adapt --nocapture --test-threads 1 > "$W/test-amr.log" 2>&1; echo "test amr rc $?" | tee -a "$W/test-amr.log"
  "$S/test-cuda" gpu_forest --nocapture --test-threads 1 > "$W/test-forest.log" 2>&1; echo "test forest rc $?" | tee -a "$W/test-forest.log"
  grep -h "test result\|FAILED\|panicked" "$W"/test-*.log | head
}

# The sphere bench with two levels: sph_with NAME BINARY "EXTRA ARGS" ENV...; sph NAME "EXTRA ARGS"
# ENV... with $S/esoflow. Prints the seed-counted MLUPS and the time in refinement.
sph_with() {
  local name=$1 bin=$2 extra=$3; shift 3
  # shellcheck disable=SC2086
  env "$@" "$bin" bench --amr "$S/scenes/sphere_3d.toml" --backend cuda --steps 200 --seconds 4 --set amr.enabled=true --set amr.max_level=1 $extra --csv "$W/sph-$name.csv" > "$W/sph-$name.log" 2>&1
  echo "$name $(grep -o 'MLUPS (seed-counted) [0-9.]*' "$W/sph-$name.log") $(grep -o 'time in refinement [0-9.]* %.*' "$W/sph-$name.log")"
}
sph() {
  local name=$1 extra=$2; shift 2
  sph_with "$name" "$S/esoflow" "$extra" "$@"
}
