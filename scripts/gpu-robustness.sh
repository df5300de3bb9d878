#!/usr/bin/env bash
# On a GPU host, after scripts/stage-gpu.sh: the GPU tests (required to run, not skipped), the
# set-up time of a 512^3 D3Q19 box, the per-row MLUPS that stats.csv reports for a CUDA run,
# and what a CUDA run saves when it blows up. With OLD=path/to/an/older/esoflow the same
# commands run on it too, for a before/after table. Logs under $OUT; a short table last.
# Usage (repository root): OUT=out bash scripts/gpu-robustness.sh
set -uo pipefail
OUT=${OUT:-out/gpu-robustness}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export ESOFLOW_REQUIRE_GPU=1 ESOFLOW_REQUIRE_NVRTC=1
S=${S:-stage}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1 > "$OUT/gpu.txt"

# GPU tests: sim-core's CUDA and NVRTC tests, the viewer's CUDA frame tests.
if [ "${TESTS:-1}" = 1 ]; then
  timeout "${TEST_SECONDS:-360}" "$S/test-cuda" --test-threads 1 > "$OUT/test-cuda.log" 2>&1; echo "rc=$?" >> "$OUT/test-cuda.log"
  timeout 120 "$S/test-app" --ignored --test-threads 1 > "$OUT/test-app-gpu.log" 2>&1; echo "rc=$?" >> "$OUT/test-app-gpu.log"
fi

# Set-up of a 512^3 box until it is ready to step (the bench's set-up column), and the whole
# command's wall time (what an older binary without the column can be compared on).
setup() {  # $1 binary, $2 label
  local t0 t1
  t0=$(date +%s.%N)
  timeout 300 "$1" bench --backend cuda --gpus 1 --size 512 --lattice D3Q19 --scheme esoteric_pull --precision fp32 \
    --seconds 0.2 > "$OUT/setup-$2.log" 2>&1
  t1=$(date +%s.%N)
  echo "$2 bench --gpus 1 --size 512 wall $(python3 -c "print(round($t1 - $t0, 2))") s" >> "$OUT/setup-$2.log"
}
setup "$S/esoflow" new
[ -n "${OLD:-}" ] && setup "$OLD" old

# stats.csv of a CUDA run with a row every 10 steps: the MLUPS of each row.
rows() {  # $1 binary, $2 label
  rm -rf "$OUT/rows-$2"
  timeout 120 "$1" run scenes/cylinder_2d.toml --backend cuda --set domain.size=[2000,500] --set obstacles.0.center=[400,250] \
    --set obstacles.0.radius=50 --set solver.stats_every=10 --steps 4000 --export "$OUT/rows-$2" > "$OUT/rows-$2.log" 2>&1
  python3 - "$OUT/rows-$2/stats.csv" "$2" >> "$OUT/rows-$2.log" <<'PY'
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if float(r["mlups"]) > 0]
m = [float(r["mlups"]) for r in rows]
print(f"{sys.argv[2]} stats.csv mlups per row: min {min(m):.0f} median {statistics.median(m):.0f} max {max(m):.0f} over {len(m)} rows")
PY
}
rows "$S/esoflow" new
[ -n "${OLD:-}" ] && rows "$OLD" old

# A CUDA run that blows up (Mach 0.43, tau 0.501): the state it keeps as the last good one.
blowup() {  # $1 binary, $2 label
  rm -rf "$OUT/blowup-$2"
  timeout 120 "$1" run --backend cuda --set boundaries.x_min.velocity=[0.25,0] --set fluid.reynolds=4000 \
    --steps 20000 --export "$OUT/blowup-$2" > "$OUT/blowup-$2.log" 2>&1
  echo "rc=$?" >> "$OUT/blowup-$2.log"
  python3 - "$OUT/blowup-$2/fields.csv" "$2" >> "$OUT/blowup-$2.log" <<'PY'
import csv, math, sys
rho, speed = [], []
for r in csv.DictReader(open(sys.argv[1])):
    rho.append(float(r["rho"])); speed.append(math.sqrt(sum(float(r[k]) ** 2 for k in ("ux", "uy", "uz"))))
print(f"{sys.argv[2]} saved state: density {min(rho):.4g} to {max(rho):.4g}, max |u| {max(speed):.4g}")
PY
}
blowup "$S/esoflow" new
[ -n "${OLD:-}" ] && blowup "$OLD" old

echo "== $(cat "$OUT/gpu.txt")"
if [ "${TESTS:-1}" = 1 ]; then
  echo "== GPU tests"; grep -hE "^test result|rc=|FAILED|panicked" "$OUT"/test-cuda.log "$OUT"/test-app-gpu.log | head -20
fi
echo "== set-up"; grep -hE "^D3Q19|wall" "$OUT"/setup-*.log
echo "== stats.csv rows"; grep -h "mlups per row" "$OUT"/rows-*.log; grep -h "^done" "$OUT"/rows-*.log
echo "== blow-up"; grep -hE "saved state|blew up|rc=" "$OUT"/blowup-*.log | cut -c1-220
