//! Every CUDA kernel variant compiles under NVRTC for sm_90 (and a sample of them for sm_80)
//! without errors or warnings. Needs libnvrtc (CUDA toolkit or `pip install nvidia-cuda-nvrtc`), not a GPU. Where
//! NVRTC is missing the tests are reported as ignored (not run), with the reason, unless
//! ESOFLOW_REQUIRE_NVRTC=1 (CI sets it), which makes them fail.

mod common;

use sim_core::backend::cuda::{compile, nvrtc_present, KernelConfig, BRICK_SHAPES};
use sim_core::collision::Collision;
use sim_core::lattice::Lattice;
use sim_core::precision::Precision;
use sim_core::schemes::Scheme;

fn configs() -> Vec<KernelConfig> {
    let mut v = Vec::new();
    for lattice in Lattice::ALL {
        let n = if lattice.dims() == 2 { [64, 48, 1] } else { [40, 24, 16] };
        let pick = |s: &([usize; 3], [usize; 3], f64, f64)| if lattice.dims() == 3 { s.0 } else { s.1 };
        let brick = pick(&BRICK_SHAPES[0]);
        for scheme in Scheme::ALL {
            for precision in Precision::ALL {
                v.push(KernelConfig {
                    lattice,
                    scheme,
                    precision,
                    collision: Collision::Bgk,
                    force: false,
                    n,
                    brick,
                    rows: true,
                    ghost_block: 16,
                    boxed: false,
                    halo: 0,
                    slip: false,
                });
            }
        }
        // Free-slip walls compiled in, on the schemes that have them.
        for scheme in [Scheme::EsotericPull, Scheme::EsotericPush, Scheme::Aa, Scheme::OneStepPull] {
            v.push(KernelConfig {
                lattice,
                scheme,
                precision: Precision::Fp16s,
                collision: Collision::Trt,
                force: true,
                n,
                brick,
                rows: true,
                ghost_block: 16,
                boxed: false,
                halo: 0,
                slip: true,
            });
        }
        for collision in Collision::ALL {
            for force in [false, true] {
                v.push(KernelConfig {
                    lattice,
                    scheme: Scheme::EsotericPull,
                    precision: Precision::Fp32,
                    collision,
                    force,
                    n,
                    brick,
                    rows: false,
                    ghost_block: 16,
                    boxed: false,
                    halo: 0,
                    slip: false,
                });
            }
        }
        // A compressed subgrid's working box (with kernels/subgrid.cu), for every collision and
        // the body force, as backend/cuda/subgrid.rs builds it.
        if lattice.dims() == 3 {
            for collision in Collision::ALL {
                v.push(KernelConfig {
                    lattice,
                    scheme: Scheme::EsotericPull,
                    precision: Precision::Fp32,
                    collision,
                    force: collision == Collision::Trt,
                    n: [34, 20, 18],
                    brick,
                    rows: false,
                    ghost_block: 16,
                    boxed: true,
                    halo: 0,
                    slip: false,
                });
            }
        }
        // A multi-GPU slab (backend/cuda/multi.rs): halo layers on the last axis, with the
        // whole-row kernel, FP32 and FP16 storage.
        for precision in [Precision::Fp32, Precision::Fp16s] {
            v.push(KernelConfig {
                lattice,
                scheme: Scheme::EsotericPull,
                precision,
                collision: Collision::Bgk,
                force: false,
                n,
                brick,
                rows: true,
                ghost_block: 16,
                boxed: false,
                halo: lattice.dims(),
                slip: false,
            });
        }
        // The other brick shape compiles too (the loop above also builds the whole-row kernel).
        let other = pick(&BRICK_SHAPES[1]);
        v.push(KernelConfig {
            lattice,
            scheme: Scheme::EsotericPull,
            precision: Precision::Fp16s,
            collision: Collision::Bgk,
            force: false,
            n,
            brick: other,
            rows: false,
            ghost_block: 16,
            boxed: false,
            halo: 0,
            slip: false,
        });
    }
    v
}

fn every_kernel_variant_compiles_without_warnings() {
    use rayon::prelude::*;
    let cfgs = configs();
    // Every variant for sm_90; for sm_80, the oldest architecture the kernels target, the first
    // variant of each lattice. No kernel source tests the architecture, so the other variants
    // would compile the same code again and only double the test's time.
    let mut jobs: Vec<(&KernelConfig, &str)> = cfgs.iter().map(|c| (c, "sm_90")).collect();
    for lattice in Lattice::ALL {
        if let Some(c) = cfgs.iter().find(|c| c.lattice == lattice) {
            jobs.push((c, "sm_80"));
        }
    }
    let failures: Vec<String> = jobs.par_iter().filter_map(|(c, arch)| compile(c, arch).err()).collect();
    assert!(failures.is_empty(), "{} of {} kernel builds failed:\n{}", failures.len(), jobs.len(), failures.join("\n\n"));
    eprintln!("compiled {} kernel variants for sm_90 and {} of them for sm_80", cfgs.len(), jobs.len() - cfgs.len());
}

fn compression_kernels_compile_without_warnings() {
    let shape = sim_core::compress::BlockShape::DEFAULT;
    for arch in ["sm_80", "sm_90"] {
        if let Err(e) = sim_core::backend::cuda::codec::compile_compress(&shape, arch) {
            panic!("{e}");
        }
    }
}

fn adaptive_block_kernels_compile_without_warnings() {
    use rayon::prelude::*;
    use sim_core::lattice::Lattice;
    use sim_core::precision::Precision;
    // (lattice, precision, arch, capacity in blocks, in place)
    let mut jobs = Vec::new();
    for lattice in [Lattice::D2Q9, Lattice::D3Q19, Lattice::D3Q27] {
        // Two DDF buffers and in place (ESOFLOW_AMR_INPLACE), every storage.
        for inplace in [false, true] {
            for precision in Precision::ALL {
                jobs.push((lattice, precision, "sm_90", 1 << 16, inplace));
            }
            // A forest too large for 32-bit offsets into its DDF buffers (AMR_IDX64).
            let wide = 1 << 26;
            assert!(sim_core::backend::cuda::amr::needs_wide_offsets(lattice, wide, inplace));
            jobs.push((lattice, Precision::Fp32, "sm_90", wide, inplace));
        }
    }
    // The oldest architecture the kernels target; no kernel source tests the architecture.
    jobs.push((Lattice::D3Q19, Precision::Fp32, "sm_80", 1 << 16, false));
    let failures: Vec<String> = jobs
        .par_iter()
        .filter_map(|&(lattice, precision, arch, capacity, inplace)| {
            sim_core::backend::cuda::amr::compile_amr(lattice, precision, arch, capacity, inplace).err()
        })
        .collect();
    assert!(failures.is_empty(), "{} of {} builds failed:\n{}", failures.len(), jobs.len(), failures.join("\n\n"));
}

/// The adaptive-block kernels with interpolated walls (`AMR_CURVED`, a run with curved links):
/// every lattice in both storages in FP32 and D3Q19 in FP16S, on sm_90 (the other formats and
/// architectures differ only in enc/dec and code generation, which the curved code uses as the
/// rest does, and the test above compiles those).
fn adaptive_block_kernels_with_curved_walls_compile_without_warnings() {
    use rayon::prelude::*;
    use sim_core::lattice::Lattice;
    use sim_core::precision::Precision;
    let mut jobs = Vec::new();
    for lattice in [Lattice::D2Q9, Lattice::D3Q19, Lattice::D3Q27] {
        for inplace in [false, true] {
            jobs.push((lattice, Precision::Fp32, "sm_90", inplace));
            if lattice == Lattice::D3Q19 {
                jobs.push((lattice, Precision::Fp16s, "sm_90", inplace));
            }
        }
    }
    let failures: Vec<String> = jobs
        .par_iter()
        .filter_map(|&(lattice, precision, arch, inplace)| {
            sim_core::backend::cuda::amr::compile_amr_walls(lattice, precision, arch, 1 << 16, inplace, true).err()
        })
        .collect();
    assert!(failures.is_empty(), "{} of {} builds failed:\n{}", failures.len(), jobs.len(), failures.join("\n\n"));
}

/// Not a check: writes the adaptive-block kernels' full NVRTC sources to
/// `target/amr-kernels/amr_<lattice>_<precision>.cu` for `scripts/kernel-registers.py` (registers and
/// spills per kernel from ptxas, no GPU needed). Run with `--ignored`.
fn dump_adaptive_block_sources() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/amr-kernels");
    std::fs::create_dir_all(&dir).unwrap();
    for lattice in [sim_core::lattice::Lattice::D2Q9, sim_core::lattice::Lattice::D3Q19, sim_core::lattice::Lattice::D3Q27] {
        for p in sim_core::precision::Precision::ALL {
            let src = sim_core::backend::cuda::amr::amr_source(lattice, p);
            std::fs::write(dir.join(format!("amr_{lattice}_{p}.cu")), src).unwrap();
        }
    }
}

fn main() {
    let missing = (!nvrtc_present()).then(|| {
        "libnvrtc not found; install the CUDA toolkit or `pip install nvidia-cuda-nvrtc` and put its lib folder on LD_LIBRARY_PATH"
            .to_string()
    });
    let tests = gated_tests![
        test(every_kernel_variant_compiles_without_warnings),
        test(compression_kernels_compile_without_warnings),
        test(adaptive_block_kernels_compile_without_warnings),
        test(adaptive_block_kernels_with_curved_walls_compile_without_warnings),
        diagnostic(dump_adaptive_block_sources),
    ];
    common::gate::run(common::gate::Gate { require_env: "ESOFLOW_REQUIRE_NVRTC", missing }, tests)
}
