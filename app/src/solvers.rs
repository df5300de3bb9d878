//! The app's side of building a solver: the scene named on the command line, and
//! [`sim_core::build`] with the flags' words in its errors and notices.

use crate::{BackendChoice, DEFAULT_SCENE, DEFAULT_SCENE_NAME};
use anyhow::{anyhow, bail};
use sim_core::build::{Backend, BuildError, Choice, Keeps};
use sim_core::scene::{self, LoadedScene};
use sim_core::Solver;
use std::path::{Path, PathBuf};

impl From<BackendChoice> for Backend {
    fn from(b: BackendChoice) -> Backend {
        match b {
            BackendChoice::Auto => Backend::Auto,
            BackendChoice::Cpu => Backend::Cpu,
            BackendChoice::Cuda => Backend::Cuda,
        }
    }
}

impl From<BackendChoice> for Choice {
    /// One GPU (or the CPU), for a caller that keeps what the viewer keeps.
    fn from(b: BackendChoice) -> Choice {
        Choice { backend: b.into(), gpus: 1, keeps: Keeps::VIEWER }
    }
}

fn parse_sets(sets: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    sets.iter()
        .map(|s| {
            let Some((k, v)) = s.split_once('=') else {
                bail!("--set {s}: expected KEY=VALUE, e.g. --set solver.scheme=aa");
            };
            Ok((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

/// Load the scene a command names (or the built-in default), with its `--set` overrides.
pub fn load_scene(path: Option<&Path>, sets: &[String]) -> anyhow::Result<LoadedScene> {
    let ov = parse_sets(sets)?;
    let ls = match path {
        Some(p) => scene::load(p, &ov)?,
        None => scene::from_str(DEFAULT_SCENE, DEFAULT_SCENE_NAME, PathBuf::from("scenes"), &ov)?,
    };
    Ok(ls)
}

/// `--gpus`: a count of GPUs to split the grid over, or `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gpus {
    /// As many as [`sim_core::build::auto_gpus`] predicts fastest (timed on this machine).
    Auto,
    /// This many (1 to 64).
    Count(u32),
}

/// Parse `--gpus`: `auto` or a count from 1 to 64.
///
/// # Errors
/// Anything else, with what is valid.
pub fn parse_gpus(s: &str) -> Result<Gpus, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("auto") {
        return Ok(Gpus::Auto);
    }
    match t.parse::<u32>() {
        Ok(n) if (1..=64).contains(&n) => Ok(Gpus::Count(n)),
        _ => Err(format!("expected auto or a count of GPUs from 1 to 64, got \"{s}\"")),
    }
}

/// The choice the flags `--backend` and `--gpus` make for scene `ls`, for a caller that keeps
/// `keeps`; `--gpus auto` says on stderr what it chose and why.
#[must_use]
pub fn choice(ls: &LoadedScene, backend: BackendChoice, gpus: Gpus, keeps: Keeps) -> Choice {
    let gpus = match gpus {
        Gpus::Count(n) => n.max(1) as usize,
        Gpus::Auto => {
            let c = sim_core::build::auto_gpus(ls, backend.into());
            eprintln!("--gpus auto: {}", c.why);
            c.gpus
        }
    };
    Choice { backend: backend.into(), gpus, keeps }
}

/// An error of [`sim_core::build::build`] in the words of the flags that chose it.
fn flag_error(e: BuildError, choice: &Choice) -> anyhow::Error {
    let g = choice.gpus;
    match e {
        BuildError::AdaptiveOnOneGpu => {
            anyhow!("--gpus {g}: adaptive blocks (amr.enabled = true) run on one GPU; use --gpus 1 or set amr.enabled = false")
        }
        BuildError::GpusNeedCuda => anyhow!("--gpus {g} runs on the CUDA backend; drop --backend cpu (or use --gpus 1)"),
        BuildError::Gpu(why) if g > 1 => anyhow!("--gpus {g}: {why}"),
        BuildError::Memory { origin, why } if g > 1 => anyhow!("--gpus {g}: {origin}: {why}"),
        BuildError::Gpu(why) if choice.backend == Backend::Cuda => anyhow!("--backend cuda: {why}"),
        BuildError::Memory { origin, why } if choice.backend == Backend::Cuda => anyhow!("--backend cuda: {origin}: {why}"),
        e => anyhow::Error::new(e),
    }
}

/// Build the solver a scene needs where the flags say ([`sim_core::build::build`]); a fallback
/// to the CPU is noted on stderr.
pub fn build_solver(ls: &LoadedScene, choice: &Choice) -> anyhow::Result<Box<dyn Solver>> {
    let built = sim_core::build::build(ls, choice).map_err(|e| flag_error(e, choice))?;
    if let Some(n) = built.notice {
        eprintln!("note: {n}");
    }
    Ok(built.solver)
}
