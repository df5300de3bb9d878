//! The app's side of building a solver: the scene named on the command line, and
//! [`sim_core::build`] with the flags' words in its errors and notices.

use crate::{BackendChoice, DEFAULT_SCENE, DEFAULT_SCENE_NAME};
use anyhow::{anyhow, bail};
use sim_core::build::{Backend, BuildError, Keeps};
use sim_core::scene::{self, LoadedScene};
use sim_core::Solver;
use std::path::{Path, PathBuf};

impl From<BackendChoice> for Backend {
    /// sim-core's backend for a choice; the wgpu backend is the app's (see [`build_solver`]).
    fn from(b: BackendChoice) -> Backend {
        match b {
            BackendChoice::Auto => Backend::Auto,
            BackendChoice::Cpu => Backend::Cpu,
            BackendChoice::Cuda => Backend::Cuda,
            BackendChoice::Wgpu => Backend::Auto,
        }
    }
}

/// Where a solver runs, as the flags say: the backend, GPUs the grid is split over (CUDA) and
/// what the caller keeps besides the solver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The backend.
    pub backend: BackendChoice,
    /// GPUs the grid is split over (1: one GPU; more needs the CUDA backend).
    pub gpus: usize,
    /// What the caller keeps besides the solver.
    pub keeps: Keeps,
}

impl Choice {
    /// sim-core's choice for the CPU and CUDA backends.
    fn core(&self) -> sim_core::build::Choice {
        sim_core::build::Choice { backend: self.backend.into(), gpus: self.gpus, keeps: self.keeps }
    }
}

impl From<BackendChoice> for Choice {
    /// One GPU (or the CPU), for a caller that keeps what the viewer keeps.
    fn from(b: BackendChoice) -> Choice {
        Choice { backend: b, gpus: 1, keeps: Keeps::VIEWER }
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
            let c = sim_core::build::auto_gpus(ls, if backend == BackendChoice::Wgpu { Backend::Cpu } else { backend.into() });
            eprintln!("--gpus auto: {}", c.why);
            c.gpus
        }
    };
    Choice { backend, gpus, keeps }
}

/// An error of [`sim_core::build::build`] in the words of the flags that chose it.
fn flag_error(e: BuildError, choice: &Choice) -> anyhow::Error {
    let g = choice.gpus;
    let cuda = choice.backend == BackendChoice::Cuda;
    match e {
        BuildError::AdaptiveOnOneGpu => {
            anyhow!("--gpus {g}: adaptive blocks (amr.enabled = true) run on one GPU; use --gpus 1 or set amr.enabled = false")
        }
        BuildError::GpusNeedCuda => anyhow!("--gpus {g} runs on the CUDA backend; drop --backend cpu (or use --gpus 1)"),
        BuildError::Gpu(why) if g > 1 => anyhow!("--gpus {g}: {why}"),
        BuildError::Memory { origin, why } if g > 1 => anyhow!("--gpus {g}: {origin}: {why}"),
        BuildError::Gpu(why) if cuda => anyhow!("--backend cuda: {why}"),
        BuildError::Memory { origin, why } if cuda => anyhow!("--backend cuda: {origin}: {why}"),
        e => anyhow::Error::new(e),
    }
}

/// The adapter the wgpu backend runs on: the one ESOFLOW_ADAPTER names (an index of `esoflow
/// info`'s list or part of a name), else wgpu's high-performance pick.
pub(crate) fn adapter_choice() -> esoflow_wgpu::AdapterChoice {
    match std::env::var("ESOFLOW_ADAPTER") {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<usize>() {
            Ok(i) => esoflow_wgpu::AdapterChoice::Index(i),
            Err(_) => esoflow_wgpu::AdapterChoice::Name(v.trim().to_string()),
        },
        _ => esoflow_wgpu::AdapterChoice::Auto,
    }
}

/// The first hardware adapter (a discrete GPU before an integrated or virtual one) that can
/// run compute shaders: where `--backend auto` runs the wgpu backend. Software adapters
/// (lavapipe, llvmpipe, WARP) are left out: the CPU backend is faster on the same cores.
#[must_use]
pub fn auto_adapter() -> Option<esoflow_wgpu::AdapterSummary> {
    use esoflow_wgpu::wgpu::DeviceType;
    let list = esoflow_wgpu::adapters();
    let rank = |t: DeviceType| match t {
        DeviceType::DiscreteGpu => Some(0),
        DeviceType::IntegratedGpu => Some(1),
        DeviceType::VirtualGpu => Some(2),
        DeviceType::Cpu | DeviceType::Other => None,
    };
    list.into_iter().filter_map(|a| rank(a.device_type).map(|r| (r, a))).min_by_key(|(r, a)| (*r, a.index)).map(|(_, a)| a)
}

/// The wgpu solver of a scene on `adapter`, after the host's share of the memory plan (the
/// saved states and exports a run keeps; the grid itself is checked against the adapter's
/// buffer limits by the solver).
fn on_wgpu(ls: &LoadedScene, keeps: Keeps, adapter: &esoflow_wgpu::AdapterChoice) -> anyhow::Result<Box<dyn Solver>> {
    let host = sim_core::memory::Spec::of_scene(ls, sim_core::memory::Place::Gpus(1), keeps);
    let free = sim_core::memory::Free { host: sim_core::memory::host_available(), device: None };
    if let Err(why) = sim_core::memory::check(&host, &free) {
        bail!("{}: {why}", ls.origin);
    }
    Ok(esoflow_wgpu::build(ls, adapter)?)
}

/// Build the solver a scene needs where the flags say ([`sim_core::build::build`] for the CPU
/// and CUDA, the wgpu backend here); a fallback is noted on stderr.
pub fn build_solver(ls: &LoadedScene, choice: &Choice) -> anyhow::Result<Box<dyn Solver>> {
    match choice.backend {
        BackendChoice::Wgpu => {
            if choice.gpus > 1 {
                bail!("--gpus {} runs on the CUDA backend; the wgpu backend runs one GPU (use --gpus 1)", choice.gpus);
            }
            return on_wgpu(ls, choice.keeps, &adapter_choice()).map_err(|e| anyhow!("--backend wgpu: {e:#}"));
        }
        BackendChoice::Auto if choice.gpus == 1 => {
            if let Err(cuda) = sim_core::build::gpu_available() {
                if let Some(a) = auto_adapter() {
                    match on_wgpu(ls, choice.keeps, &esoflow_wgpu::AdapterChoice::Index(a.index)) {
                        Ok(s) => {
                            eprintln!("note: {cuda}; running on the wgpu backend on {} ({:?})", a.name, a.backend);
                            return Ok(s);
                        }
                        Err(e) => eprintln!("note: the wgpu backend on {} does not run this scene ({e:#})", a.name),
                    }
                }
            }
        }
        _ => {}
    }
    let built = sim_core::build::build(ls, &choice.core()).map_err(|e| flag_error(e, choice))?;
    if let Some(n) = built.notice {
        eprintln!("note: {n}");
    }
    Ok(built.solver)
}
