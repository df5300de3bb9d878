#!/usr/bin/env bash
# Run a command and print its peak resident memory (VmHWM, sampled every 2 s) when it ends, with
# its exit code: the host memory a run really held, to set beside its memory plan.
#   scripts/peak-memory.sh ./esoflow run scenes/sphere_3d.toml --steps 40 > run.log 2>&1
set -u
"$@" &
pid=$!
peak=0
while kill -0 "$pid" 2>/dev/null; do
  h=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null)
  [ -n "$h" ] && peak=$h
  sleep 2
done
wait "$pid"
rc=$?
echo "exit code $rc, peak resident memory $peak kB ($(awk -v k="$peak" 'BEGIN {printf "%.2f", k * 1024 / 1e9}') GB)" >&2
exit $rc
