#!/usr/bin/env bash
# Build the release binary and the GPU test binaries, strip them, and stage them in stage/
# (git-ignored) for a GPU host. On the GPU host run stage/gpu-check.sh (tests, bench, scenes)
# or stage/run-gpu-tests.sh (tests only).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf stage && mkdir -p stage
# One build of the workspace's tests and binaries (as the tests build them, so nothing is
# compiled twice with other features), then the executables picked by target name.
cargo test --release --workspace --no-run --message-format=json 2>/dev/null > stage/.build.json
pick() { # pick KIND NAME TEST(true|false) DEST
  python3 - "$@" <<'PY'
import json, shutil, sys
kind, name, test, dest = sys.argv[1:]
for line in open("stage/.build.json"):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target") or {}
    if m.get("reason") == "compiler-artifact" and m.get("executable") and t.get("name") == name \
            and kind in t.get("kind", []) and str(m["profile"]["test"]).lower() == test:
        shutil.copy(m["executable"], dest)
        sys.exit(0)
sys.exit(f"no {kind} {name} (test={test}) in the build")
PY
}
pick bin esoflow false stage/esoflow
pick test cuda true stage/test-cuda
pick test nvrtc true stage/test-nvrtc
pick bin esoflow true stage/test-app
pick test interop true stage/test-interop
pick test against_cpu true stage/test-wgpu
rm stage/.build.json
strip stage/*
cp -r scenes stage/
cp scripts/gpu-check.sh scripts/gpu-wgpu.sh scripts/vulkan-loader.sh scripts/gpu-ncu.sh scripts/gpu-render-bench.sh scripts/gpu-robustness.sh scripts/peak-memory.sh stage/
cat > stage/run-gpu-tests.sh <<'SH'
#!/usr/bin/env bash
# Run on the GPU host from the repository root: bash stage/run-gpu-tests.sh
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# On a GPU host the GPU and NVRTC tests must run: a missing device fails them instead of
# reporting them as ignored.
export ESOFLOW_REQUIRE_GPU=1 ESOFLOW_REQUIRE_NVRTC=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
stage/test-nvrtc 2>&1 | tail -3
stage/test-cuda --test-threads 1 2>&1
# The viewer's CUDA tests (shared frames) are ignored where there is no GPU; here they run.
stage/test-app --ignored --test-threads 1 2>&1 | grep -E "^test |test result"
# The Vulkan interop tests need a Vulkan loader (.gl, see scripts/vulkan-loader.sh); with it
# every export they use must be there.
source scripts/vulkan-loader.sh && ESOFLOW_REQUIRE_ADAPTER=1 ESOFLOW_REQUIRE_INTEROP=1 stage/test-interop 2>&1 | tail -12
SH
chmod +x stage/*.sh
du -sh stage
