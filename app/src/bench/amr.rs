//! `esoflow bench --amr SCENE`: run a scene on adaptive blocks (Jaber, Essel & Sullivan 2025) and report
//! what Jaber, Essel & Sullivan 2025 report: MLUPS counted as they count them (a cell of level `l` updated `2^l`
//! times per coarse step), the share of the time spent in refinement (criterion, mesh and data
//! transfer), the leaves per level and the updates against the uniform grid of the finest
//! level (each of its cells updated `2^max_level` times per coarse step).

use super::common::date_utc;
use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Run the bench: `warmup` coarse steps (the forest settles), then coarse steps in chunks of
/// the adaptation interval (or 100) for at least `seconds`.
///
/// # Errors
/// Scene errors, a scene without `[amr]`, the backend refusing.
pub fn bench_amr(
    scene: &Path,
    sets: &[String],
    backend: crate::BackendChoice,
    warmup: u64,
    seconds: f64,
    csv: Option<&PathBuf>,
) -> anyhow::Result<()> {
    let ls = crate::solvers::load_scene(Some(scene), sets)?;
    if !ls.scene.amr.enabled {
        bail!("--amr {}: the scene has no adaptive blocks; set [amr] enabled = true (or --set amr.enabled=true)", scene.display());
    }
    let mut s = crate::solvers::build_solver(&ls, &backend.into())?;
    let info = s.info();
    eprintln!("{} on {} ({}): {} warm-up steps", scene.display(), info.backend, info.device, warmup);
    let t = Instant::now();
    s.step(warmup)?;
    let warm_secs = t.elapsed().as_secs_f64();
    let a0 = s.amr_counts().context("the solver reports no adaptive blocks")?;
    let chunk = if a0.settings.interval > 0 { a0.settings.interval } else { 100 };
    let (mut updates, mut steps, mut uniform) = (0u64, 0u64, 0u64);
    let fine_steps = 1u64 << a0.max_level;
    let t = Instant::now();
    loop {
        let before = s.amr_counts().context("no adaptive blocks")?.updates_per_step;
        s.step(chunk)?;
        updates += before * chunk;
        uniform += s.amr_counts().context("no adaptive blocks")?.effective_cells * fine_steps * chunk;
        steps += chunk;
        if t.elapsed().as_secs_f64() >= seconds {
            break;
        }
    }
    let wall = t.elapsed().as_secs_f64();
    let a1 = s.amr_counts().context("no adaptive blocks")?;
    let adapt = a1.adapt_secs - a0.adapt_secs;
    let stepping = a1.step_secs - a0.step_secs;
    let mlups = updates as f64 / wall / 1e6;
    let mlups_steps = updates as f64 / stepping.max(1e-12) / 1e6;
    let share = updates as f64 / uniform.max(1) as f64;
    let leaves: Vec<String> = a1.leaves.iter().map(ToString::to_string).collect();
    println!("adaptive blocks, {} {} {} on {} ({})", info.lattice, info.precision, scene.display(), info.backend, info.device);
    println!(
        "  {steps} coarse steps in {wall:.2} s (after {warmup} warm-up steps in {warm_secs:.2} s); leaves per level {}; active blocks {} of {}",
        leaves.join("/"),
        a1.blocks.0,
        a1.blocks.1
    );
    println!(
        "  MLUPS (a level-l cell counted 2^l times) {mlups:.1} over the wall time, {mlups_steps:.1} over the stepping time; time in refinement {:.2} % ({} adaptations, {adapt:.3} s)",
        100.0 * adapt / wall,
        a1.adaptations - a0.adaptations
    );
    println!(
        "  updates {:.1} % of the uniform grid of level {} ({} cells, each {} times a coarse step)",
        100.0 * share,
        a1.max_level,
        a1.effective_cells,
        fine_steps
    );
    let stats = s.stats();
    println!("  mass {:.9e}, max |u| {:.4}", stats.mass, stats.max_u);
    println!("  DDF storage {} (the solver's memory {:.3} GB)", info.scheme, info.memory_bytes as f64 / 1e9);
    if let Some(path) = csv {
        sim_core::atomic_file::write_atomic(path, |f| -> std::io::Result<()> {
            writeln!(
                f,
                "# esoflow bench --amr {} --backend {} {} --steps {warmup} --seconds {seconds}; device {}; date {}",
                scene.display(),
                info.backend,
                sets.iter().map(|s| format!("--set {s}")).collect::<Vec<_>>().join(" "),
                info.device,
                date_utc()
            )?;
            writeln!(f, "lattice,precision,backend,coarse_steps,wall_s,mlups_seed,mlups_stepping,refine_share,adaptations,leaves_per_level,active_blocks,capacity,effective_cells,uniform_update_share,scheme,memory_bytes")?;
            writeln!(
                f,
                "{},{},{},{steps},{wall:.4},{mlups:.2},{mlups_steps:.2},{:.5},{},{},{},{},{},{:.5},{},{}",
                info.lattice,
                info.precision,
                info.backend,
                adapt / wall,
                a1.adaptations - a0.adaptations,
                leaves.join("/"),
                a1.blocks.0,
                a1.blocks.1,
                a1.effective_cells,
                share,
                info.scheme,
                info.memory_bytes
            )?;
            Ok(())
        })
        .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
