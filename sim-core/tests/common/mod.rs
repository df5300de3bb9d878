#![allow(dead_code)]
pub mod gate;
use sim_core::scene::{self, LoadedScene, SceneError};
use sim_core::Solver;
use std::path::PathBuf;

/// `--set` overrides as the scene loader takes them.
pub fn ov(sets: &[(&str, &str)]) -> Vec<(String, String)> {
    sets.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
}

/// Scene text with `--set` overrides, named `bad.toml` in its errors.
pub fn parse(text: &str, sets: &[(&str, &str)]) -> Result<LoadedScene, SceneError> {
    scene::from_str(text, "bad.toml", PathBuf::from("."), &ov(sets))
}

pub fn scene(text: &str, overrides: &[(&str, &str)]) -> LoadedScene {
    scene::from_str(text, "test.toml", PathBuf::from("."), &ov(overrides)).unwrap_or_else(|e| panic!("{e}"))
}

pub fn solver(text: &str, overrides: &[(&str, &str)]) -> Box<dyn Solver> {
    sim_core::build::cpu(&scene(text, overrides)).unwrap_or_else(|e| panic!("{e}"))
}

pub fn shipped(name: &str, overrides: &[(&str, &str)]) -> Box<dyn Solver> {
    let ls = shipped_scene(name, overrides);
    sim_core::build::cpu(&ls).unwrap_or_else(|e| panic!("{e}"))
}

/// A scene shipped in `scenes/`, loaded with `--set` overrides.
#[allow(dead_code)]
pub fn shipped_scene(name: &str, overrides: &[(&str, &str)]) -> LoadedScene {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenes").join(name);
    scene::load(&path, &ov(overrides)).unwrap_or_else(|e| panic!("{e}"))
}

/// Largest difference of density and velocity between two solvers' fields.
pub fn max_field_diff(a: &dyn Solver, b: &dyn Solver) -> (f64, f64) {
    let (fa, fb) = (a.fields(), b.fields());
    let mut dr = 0.0f64;
    let mut du = 0.0f64;
    for i in 0..fa.rho.len() {
        dr = dr.max(f64::from((fa.rho[i] - fb.rho[i]).abs()));
        for c in 0..3 {
            du = du.max(f64::from((fa.u[i][c] - fb.u[i][c]).abs()));
        }
    }
    (dr, du)
}

/// Cells of a disc (2D) or ball (3D) around `c`.
pub fn ball(s: &dyn Solver, c: [f32; 3], r: f32) -> Vec<usize> {
    let d = s.domain();
    (0..d.cells())
        .filter(|&i| {
            let p = d.coords(i);
            let dims = d.lattice.dims();
            (0..dims).map(|a| (p[a] as f32 - c[a]).powi(2)).sum::<f32>() <= r * r
        })
        .collect()
}
