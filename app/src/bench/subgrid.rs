//! `esoflow bench --subgrids SCENE --backend cuda`: run a scene on the GPU compressed-subgrid
//! solver (Flint et al. 2024) at each threshold, with compression in the loop, and report what
//! the paper's Table 1 reports: time per step split into LBM, decompression, compression,
//! interfaces (ghost frame in, changed shells out) and record moves, MLUPS, the long-run
//! compression ratio, memory (device and spilled to host), mass drift and, with `--raw`, the
//! NMSE of density against the uncompressed subgrid run of the same steps.

use super::common::date_utc;
use anyhow::{bail, Context};
use sim_core::backend::cuda::subgrid::CudaSubgridSolver;
use sim_core::compress::nmse;
use sim_core::domain::Domain;
use sim_core::units::human_bytes;
use sim_core::Solver;
use std::path::{Path, PathBuf};
use std::time::Instant;

impl Row {
    /// Wall time not covered by GPU work: host waits (record sizes, spills) and launch gaps.
    fn sync(&self) -> f64 {
        self.step_ms - (self.lbm + self.decompress + self.compress + self.interfaces + self.store)
    }
}

struct Row {
    tau: Option<f32>,
    mlups: f64,
    step_ms: f64,
    lbm: f64,
    decompress: f64,
    compress: f64,
    interfaces: f64,
    store: f64,
    busiest: f64,
    ratio: f64,
    device_bytes: u64,
    host_bytes: u64,
    tau_range: (f32, f32),
    drift: f64,
    nmse: Option<f64>,
}

/// Run the bench. `taus` are compressed runs; `raw` adds the uncompressed subgrid run first
/// (the baseline of the time per cell update and the reference of the NMSE).
///
/// # Errors
/// Scene errors, no GPU, a budget that cannot hold the state.
pub fn bench_subgrids(
    scene: &Path,
    sets: &[String],
    steps: u64,
    taus: &[f32],
    raw: bool,
    gpus: usize,
    csv: Option<&PathBuf>,
) -> anyhow::Result<()> {
    let gpu = sim_core::build::gpu_available().map_err(|e| anyhow::anyhow!("--subgrids runs on the GPU: {e}"))?;
    let mut sets = sets.to_vec();
    sets.push("compression.enabled=true".into());
    let ls = crate::solvers::load_scene(Some(scene), &sets)?;
    let c = &ls.scene.compression;
    // Runs of small grids compare the reassembled dense state with a reference's (two dense
    // copies on the host, as a checkpoint takes).
    let small = ls.derived.size.iter().product::<usize>() <= 64 << 20;
    let keeps = sim_core::build::Keeps { saved_states: 0, checkpoints: small && raw, export: false };
    sim_core::build::plan(&ls, sim_core::memory::Place::Gpus(gpus), keeps)?;
    let devices = if gpus > 1 { sim_core::backend::cuda::multi::devices_for(gpus)? } else { vec![0] };
    let t0 = Instant::now();
    let dom = Domain::from_scene(&ls)?;
    eprintln!("grid voxelised in {:.1} s", t0.elapsed().as_secs_f64());
    let params = sim_core::Params::from_scene(&ls, &dom);
    let n = dom.n;
    let cells = dom.cells();
    let g = c.subgrid_size();
    let budget = c.memory_budget.map(|b| b.0);
    let dense = (4 * dom.lattice.q() * cells) as u64;
    println!("device: {} (sm_{}{})", gpu.name, gpu.cc.0, gpu.cc.1);
    println!(
        "grid {n:?} {} = {cells} cells, {} of FP32 DDFs; subgrids of {g:?}; on {gpus} GPU{}, memory budget {}{}; {steps} steps",
        dom.lattice,
        human_bytes(dense),
        if gpus == 1 { "" } else { "s" },
        budget.map_or_else(|| "none".to_string(), human_bytes),
        if gpus == 1 { "" } else { " each" }
    );
    let mut cases: Vec<Option<f32>> = Vec::new();
    if raw {
        cases.push(None);
    }
    cases.extend(taus.iter().map(|&t| Some(t)));
    let mut rows = Vec::new();
    let mut reference: Option<Vec<f32>> = None;
    for tau in cases {
        let label = tau.map_or_else(|| "raw".to_string(), |t| format!("{t:e}"));
        eprintln!("tau {label}: building ...");
        let t0 = Instant::now();
        let mut s =
            CudaSubgridSolver::new_on(dom.clone(), params.clone(), g, tau, if tau.is_some() { budget } else { None }, &devices, |p| {
                sim_core::domain::initial_state(&ls, p)
            })
            .with_context(|| format!("building the subgrid solver at tau {label}"))?;
        eprintln!("tau {label}: built in {:.1} s; running {steps} steps ...", t0.elapsed().as_secs_f64());
        let m0 = s.stats().mass;
        s.enable_timing();
        s.step(steps)?;
        let st = s.stats();
        let tm = s.timing().unwrap_or_default();
        let k = tm.steps.max(1) as f64;
        let rho = if small && (raw || reference.is_some()) { Some(s.fields().rho) } else { None };
        let nm = match (&reference, &rho, tau) {
            (Some(r), Some(x), Some(_)) => Some(nmse(r, x)),
            _ => None,
        };
        if tau.is_none() {
            reference = rho;
        }
        let info = sim_core::Compressed::compression(&s);
        let row = Row {
            tau,
            mlups: cells as f64 * k / (tm.wall * 1e-3) / 1e6,
            step_ms: tm.wall / k,
            lbm: tm.lbm / k,
            decompress: tm.decompress / k,
            compress: tm.compress / k,
            interfaces: tm.interfaces / k,
            store: tm.store / k,
            busiest: tm.busiest / k,
            ratio: s.ratio(),
            device_bytes: s.bytes() - s.host_bytes(),
            host_bytes: s.host_bytes(),
            tau_range: info.tau,
            drift: (st.mass - m0) / m0,
            nmse: nm,
        };
        if !st.mass.is_finite() {
            eprintln!("tau {label}: the run blew up (first bad cell {:?})", st.first_bad_cell);
        }
        rows.push(row);
    }
    println!();
    println!(
        "{:>4} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>10} {:>10} {:>19} {:>10} {:>9}",
        "GPUs",
        "tau",
        "MLUPS",
        "ms/step",
        "LBM",
        "decomp",
        "comp",
        "iface",
        "store",
        "sync",
        "busiest",
        "ratio",
        "device",
        "host",
        "tau in use",
        "mass drift",
        "NMSE rho"
    );
    for r in &rows {
        println!(
            "{gpus:>4} {:>8} {:>8.1} {:>8.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>10} {:>10} {:>9.1e}..{:<8.1e} {:>10.2e} {:>9}",
            r.tau.map_or_else(|| "raw".to_string(), |t| format!("{t:.0e}")),
            r.mlups,
            r.step_ms,
            r.lbm,
            r.decompress,
            r.compress,
            r.interfaces,
            r.store,
            r.sync(),
            r.busiest,
            r.ratio,
            human_bytes(r.device_bytes),
            human_bytes(r.host_bytes),
            r.tau_range.0,
            r.tau_range.1,
            r.drift,
            r.nmse.map_or_else(|| "-".to_string(), |x| format!("{x:.2e}"))
        );
    }
    println!(
        "(ms per step summed over subgrids, from CUDA events, on several GPUs the mean over GPUs, the planes at the cuts in \
         sync; ms/step is wall-clock and sync the rest of it: host waits, launch gaps and the cut exchange; busiest = the \
         summed phases of the busiest GPU; ratio = FP32 \
         DDFs over shells + records; device = the state's device memory over all GPUs)"
    );
    if let Some(path) = csv {
        sim_core::atomic_file::write_atomic(path, |f| -> std::io::Result<()> {
            writeln!(
                f,
                "# esoflow bench --subgrids {} {} --steps {steps} --gpus {gpus}; device {}{}; date {}",
                scene.display(),
                sets.join(" "),
                if gpus > 1 { format!("{gpus} x ") } else { String::new() },
                gpu.name,
                date_utc()
            )?;
            writeln!(f, "# grid {n:?} {}; subgrids {g:?}; budget {budget:?}; dense {dense} bytes", dom.lattice)?;
            writeln!(f, "gpus,tau,mlups,ms_per_step,lbm_ms,decompress_ms,compress_ms,interfaces_ms,store_ms,sync_ms,ratio,device_bytes,host_bytes,tau_min,tau_max,mass_drift,nmse_rho,busiest_ms")?;
            for r in &rows {
                writeln!(
                    f,
                    "{gpus},{},{:.2},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.3},{},{},{:e},{:e},{:e},{},{:.4}",
                    r.tau.map_or_else(|| "raw".to_string(), |t| format!("{t:e}")),
                    r.mlups,
                    r.step_ms,
                    r.lbm,
                    r.decompress,
                    r.compress,
                    r.interfaces,
                    r.store,
                    r.sync(),
                    r.ratio,
                    r.device_bytes,
                    r.host_bytes,
                    r.tau_range.0,
                    r.tau_range.1,
                    r.drift,
                    r.nmse.map_or_else(String::new, |x| format!("{x:e}")),
                    r.busiest
                )?;
            }
            Ok(())
        })
        .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    if rows.is_empty() {
        bail!("nothing to run: give --tau and/or --raw");
    }
    Ok(())
}
