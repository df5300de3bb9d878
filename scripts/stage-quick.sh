#!/usr/bin/env bash
# Faster than stage-gpu.sh when only the binary and the CUDA test binary changed: builds and
# stages esoflow and test-cuda (plus scenes) into stage/, keeping what else is there.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p stage
cargo build --release -p esoflow
cp target/release/esoflow stage/
exe=$(cargo test --release -p sim-core --test cuda --no-run --message-format=json 2>/dev/null \
      | grep -o '"executable":"[^"]*"' | tail -n 1 | cut -d'"' -f4)
cp "$exe" stage/test-cuda
strip stage/esoflow stage/test-cuda
rm -rf stage/scenes && cp -r scenes stage/
du -sh stage
