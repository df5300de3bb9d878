#!/usr/bin/env python3
"""Registers and spills per kernel of a CUDA source, from ptxas through NVRTC (no GPU needed).

    cargo test --release -p sim-core --test nvrtc dump_adaptive_block_sources -- --ignored
    python3 scripts/kernel-registers.py target/amr-kernels/amr_D3Q19_fp32.cu [REGEX] [-DNAME=VALUE ...] [--cubin=OUT]

--cubin=OUT also writes the compiled cubin, for `nvdisasm -c OUT` (pip nvidia-cuda-nvdisasm).

Needs libnvrtc (CUDA toolkit, or `pip install nvidia-cuda-nvrtc` with LD_LIBRARY_PATH set to
its lib folder). Compiles for sm_90 without fused multiply-adds, as the solver does.
"""
import ctypes
import ctypes.util
import re
import sys


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    cubin = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--cubin=")), None)
    defines = [a[2:] for a in sys.argv[1:] if a.startswith("-D")]
    if not args:
        sys.exit(__doc__)
    pattern = re.compile(args[1]) if len(args) > 1 else None
    names = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", ctypes.util.find_library("nvrtc")]
    lib = None
    for n in filter(None, names):
        try:
            lib = ctypes.CDLL(n)
            break
        except OSError:
            continue
    if lib is None:
        sys.exit("libnvrtc not found: install the CUDA toolkit or nvidia-cuda-nvrtc and set LD_LIBRARY_PATH")
    head = "".join(f"#define {d.replace('=', ' ', 1)}\n" for d in defines)
    src = (head + open(args[0]).read()).encode()
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"kernels.cu", 0, None, None) != 0:
        sys.exit("nvrtcCreateProgram failed")
    opts = [b"--gpu-architecture=sm_90", b"--std=c++17", b"--fmad=false", b"--ptxas-options=-v"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, log)
    text = log.value.decode()
    if rc != 0:
        sys.exit(text)
    if cubin:
        size = ctypes.c_size_t()
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        data = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetCUBIN(prog, data)
        with open(cubin, "wb") as out:
            out.write(data.raw)
    kernel, rows = None, {}
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            kernel = m.group(1)
            rows[kernel] = ["?", "0"]
            continue
        if kernel is None:
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m:
            rows[kernel][0] = m.group(1)
        m = re.search(r"(\d+) bytes spill stores", line)
        if m:
            rows[kernel][1] = m.group(1)
    print(f"{'kernel':28} {'registers':>9} {'spill B':>8}")
    for k, (r, sp) in sorted(rows.items()):
        if pattern is None or pattern.search(k):
            print(f"{k:28} {r:>9} {sp:>8}")


if __name__ == "__main__":
    main()
