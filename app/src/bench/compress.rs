//! `esoflow bench --compress SCENE`: run a scene, then put its DDFs through the block
//! compressor at each threshold: compression ratio, the paper's error measure (NMSE) of density
//! and of the DDFs, the mix of record formats, mass drift, and the time to compress and
//! decompress all DDF planes (on the GPU where there is one, on the CPU otherwise) against the
//! time of one LBM step of the same grid.
//!
//! This measures the codec on a developed flow; `esoflow bench --subgrids` runs the
//! compressed-subgrid solver with it in the loop.

use super::common::date_utc;
use crate::BackendChoice;
use anyhow::{bail, Context};
use sim_core::compress::{field::block_counts, nmse, BlockShape, CompressedField, Thresholds};
use sim_core::domain::is_solid;
use sim_core::precision::Precision;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Thresholds swept when `--tau` is not given.
pub const DEFAULT_TAUS: [f32; 7] = [0.0, 1e-7, 1e-6, 3e-6, 1e-5, 3e-5, 1e-4];

/// One threshold's results.
struct Row {
    tau: f32,
    ratio: f64,
    nmse_rho: f64,
    nmse_ddf: f64,
    formats: [usize; 3],
    mass_drift: f64,
    compress_ms: f64,
    decompress_ms: f64,
}

/// The DDF planes (shifted, `q` planes of the grid, solids zero) of a solver's state.
fn ddf_planes(s: &dyn sim_core::Solver) -> anyhow::Result<(Vec<f32>, usize, [usize; 3])> {
    let c = s.checkpoint();
    if c.precision != Precision::Fp32 {
        bail!("--compress needs FP32 DDFs (compressed subgrids store FP32); add --set solver.precision=fp32");
    }
    let q = c.lattice.q();
    let n = c.size;
    let cells = n[0] * n[1] * n[2];
    let flags = &s.domain().flags;
    let mut planes = vec![0.0f32; q * cells];
    let mut k = 0;
    for (cell, &flag) in flags.iter().enumerate() {
        if is_solid(flag) {
            continue;
        }
        for i in 0..q {
            let b = &c.data[4 * (k * q + i)..4 * (k * q + i) + 4];
            planes[i * cells + cell] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        k += 1;
    }
    Ok((planes, q, n))
}

/// Density (1 + the sum of the shifted DDFs) of every cell.
fn density(planes: &[f32], q: usize, cells: usize) -> Vec<f32> {
    (0..cells).map(|c| 1.0 + (0..q).map(|i| planes[i * cells + c]).sum::<f32>()).collect()
}

/// Compress and decompress every plane with the CPU reference; the decompressed planes, the
/// summed record words, the format mix and the time of each direction (ms).
fn cpu_round(planes: &[f32], q: usize, n: [usize; 3], t: Thresholds) -> (Vec<f32>, usize, [usize; 3], f64, f64) {
    let cells = n[0] * n[1] * n[2];
    let t0 = Instant::now();
    let comp: Vec<CompressedField> =
        (0..q).map(|i| CompressedField::compress(&planes[i * cells..(i + 1) * cells], n, BlockShape::DEFAULT, t)).collect();
    let c_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut back = vec![0.0f32; planes.len()];
    let t1 = Instant::now();
    for (i, c) in comp.iter().enumerate() {
        // The records were just written by the same code, so they decode.
        let _ = c.decompress(&mut back[i * cells..(i + 1) * cells]);
    }
    let d_ms = t1.elapsed().as_secs_f64() * 1e3;
    let mut formats = [0; 3];
    for c in &comp {
        for k in 0..3 {
            formats[k] += c.formats[k];
        }
    }
    (back, comp.iter().map(|c| c.words.len()).sum(), formats, c_ms, d_ms)
}

/// GPU compression and decompression time of all planes in one launch each (ms, best of
/// `reps`), and the words written.
fn gpu_times(planes: &[f32], q: usize, n: [usize; 3], tau: f32, reps: usize) -> anyhow::Result<(f64, f64, u64)> {
    use sim_core::backend::cuda::codec::GpuCodec;
    let mut codec = GpuCodec::on_device0()?;
    let s = codec.stream().clone();
    let d = s.clone_htod(planes)?;
    let blocks = codec.blocks(n) * q;
    let mut out = s.alloc_zeros::<u32>(blocks * (1 + BlockShape::DEFAULT.samples()))?;
    let mut offsets = s.alloc_zeros::<u64>(blocks)?;
    let mut back = s.alloc_zeros::<f32>(planes.len())?;
    let (mut best_c, mut best_d, mut words) = (f64::MAX, f64::MAX, 0);
    for _ in 0..reps {
        s.synchronize()?;
        let t = Instant::now();
        codec.launch_compress(&d, n, q, tau, &mut out, &mut offsets)?;
        let w = codec.written()?;
        best_c = best_c.min(t.elapsed().as_secs_f64() * 1e3);
        words = w.words;
        let t = Instant::now();
        codec.launch_decompress(&out, &offsets, n, q, &mut back)?;
        codec.check_decompress()?;
        best_d = best_d.min(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok((best_c, best_d, words))
}

/// Run the compression bench.
pub fn bench_compress(
    scene: &Path,
    sets: &[String],
    backend: BackendChoice,
    steps: u64,
    taus: &[f32],
    csv: Option<&PathBuf>,
) -> anyhow::Result<()> {
    let ls = crate::solvers::load_scene(Some(scene), sets)?;
    let mut solver = crate::solvers::build_solver(&ls, &backend.into())?;
    let info = solver.info();
    let n = solver.domain().n;
    let cells = n[0] * n[1] * n[2];
    eprintln!("running {} for {steps} steps on {} ...", scene.display(), info.backend);
    let t = Instant::now();
    solver.step(steps)?;
    solver.synchronize()?;
    let secs = t.elapsed().as_secs_f64();
    let mlups = (cells as f64 * steps as f64) / secs / 1e6;
    let step_ms = cells as f64 / (mlups * 1e6) * 1e3;
    let (planes, q, n) = ddf_planes(solver.as_ref())?;
    let gpu = sim_core::build::gpu_available().ok();
    let device =
        gpu.as_ref().map_or_else(|| format!("{} (CPU reference codec)", crate::cpu_name()), |d| format!("{} (CUDA codec)", d.name));
    let rho = density(&planes, q, cells);
    let mass: f64 = planes.iter().map(|&v| f64::from(v)).sum();
    let b = block_counts(n, &BlockShape::DEFAULT);
    println!("device: {device}; date {}", date_utc());
    println!(
        "scene: {} {:?} {} after {steps} steps; {q} DDF planes of {} blocks ({}x{}x{}) of 33x17x17",
        scene.display(),
        n,
        info.lattice,
        b.iter().product::<usize>(),
        b[0],
        b[1],
        b[2]
    );
    println!("LBM step on {} ({}): {step_ms:.3} ms ({mlups:.0} MLUPS)", info.backend, info.scheme);
    println!();
    println!(
        "{:>8} {:>8} {:>10} {:>10} {:>18} {:>10} {:>11} {:>11} {:>9}",
        "tau", "ratio", "NMSE rho", "NMSE ddf", "blocks d/m/coo", "mass drift", "compress ms", "decomp. ms", "x step"
    );
    let mut rows = Vec::new();
    for &tau in taus {
        let t = Thresholds { tau };
        let (back, words, formats, c_cpu, d_cpu) = cpu_round(&planes, q, n, t);
        let (c_ms, d_ms) = match &gpu {
            Some(_) => {
                let (c, d, w) = gpu_times(&planes, q, n, tau, 5)?;
                if w as usize != words {
                    bail!("GPU records ({w} words) differ in size from the CPU reference ({words} words) at tau {tau}");
                }
                (c, d)
            }
            None => (c_cpu, d_cpu),
        };
        let mass2: f64 = back.iter().map(|&v| f64::from(v)).sum();
        let row = Row {
            tau,
            ratio: (planes.len() * 4) as f64 / (words * 4) as f64,
            nmse_rho: nmse(&rho, &density(&back, q, cells)),
            nmse_ddf: nmse(&planes, &back),
            formats,
            mass_drift: (mass2 - mass) / cells as f64,
            compress_ms: c_ms,
            decompress_ms: d_ms,
        };
        println!(
            "{:>8.1e} {:>8.2} {:>10.2e} {:>10.2e} {:>18} {:>10.1e} {:>11.3} {:>11.3} {:>4.2}/{:<4.2}",
            row.tau,
            row.ratio,
            row.nmse_rho,
            row.nmse_ddf,
            format!("{}/{}/{}", formats[0], formats[1], formats[2]),
            row.mass_drift,
            row.compress_ms,
            row.decompress_ms,
            row.compress_ms / step_ms,
            row.decompress_ms / step_ms
        );
        rows.push(row);
    }
    println!();
    println!(
        "ratio: uncompressed FP32 DDF bytes / record bytes; NMSE as the paper's eq. 19; mass drift: change of the summed DDFs per cell;"
    );
    println!("x step: compress / decompress time of all {q} planes over one LBM step of the same grid.");
    if let Some(path) = csv {
        sim_core::atomic_file::write_atomic(path, |f| -> std::io::Result<()> {
            writeln!(f, "# esoflow bench --compress {} {}; device {device}; date {}", scene.display(), sets.join(" "), date_utc())?;
            writeln!(f, "# grid {:?} {} steps {steps}; LBM step {step_ms:.4} ms on {}", n, info.lattice, info.backend)?;
            writeln!(
                f,
                "tau,ratio,nmse_rho,nmse_ddf,blocks_dense,blocks_mask,blocks_coo,mass_drift_per_cell,compress_ms,decompress_ms,step_ms"
            )?;
            for r in &rows {
                writeln!(
                    f,
                    "{:e},{:.4},{:.4e},{:.4e},{},{},{},{:.3e},{:.4},{:.4},{step_ms:.4}",
                    r.tau,
                    r.ratio,
                    r.nmse_rho,
                    r.nmse_ddf,
                    r.formats[0],
                    r.formats[1],
                    r.formats[2],
                    r.mass_drift,
                    r.compress_ms,
                    r.decompress_ms
                )?;
            }
            Ok(())
        })
        .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
