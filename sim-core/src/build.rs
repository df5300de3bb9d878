//! One place builds solvers. A scene says which solver it needs (the dense grid, compressed
//! subgrids or adaptive blocks); a [`Choice`] says where it runs (the CPU reference, one GPU or
//! several) and what the caller keeps besides it. [`build`] checks the memory plan first, falls
//! back to the CPU where the choice allows it and there is no usable GPU, and returns the
//! notice that says so for the caller to show.

use crate::backend::cuda;
use crate::backend::{cpu, subgrid};
use crate::domain::Domain;
use crate::memory::{Free, Place, Spec};
use crate::scene::{LoadedScene, SceneError};
use crate::solver::{Params, Solver};

/// Where a solver runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// CUDA where an NVIDIA GPU is usable, else the CPU (with a notice).
    #[default]
    Auto,
    /// The CPU reference backend.
    Cpu,
    /// The CUDA backend (an error where it is not available).
    Cuda,
}

pub use crate::memory::Keeps;

/// Where a solver runs and what its caller keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The backend.
    pub backend: Backend,
    /// GPUs the grid is split over (1: one GPU; more needs the CUDA backend).
    pub gpus: usize,
    /// What the caller keeps besides the solver.
    pub keeps: Keeps,
}

impl Default for Choice {
    fn default() -> Self {
        Choice { backend: Backend::Auto, gpus: 1, keeps: Keeps::VIEWER }
    }
}

/// A solver and, where the choice was not met as asked (no GPU: the CPU runs it), why.
pub struct Built {
    /// The solver, ready to step.
    pub solver: Box<dyn Solver>,
    /// A note for the user about a fallback, if one was taken.
    pub notice: Option<String>,
}

/// Why a solver was not built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The scene cannot be built (voxelisation, a memory budget the state does not fit).
    #[error(transparent)]
    Scene(#[from] SceneError),
    /// The memory plan does not fit what is free.
    #[error("{origin}: {why}")]
    Memory {
        /// The scene's origin (file or built-in name).
        origin: String,
        /// Both numbers and the largest size that fits.
        why: String,
    },
    /// Adaptive blocks were asked for on several GPUs.
    #[error("adaptive blocks (amr.enabled = true) run on one GPU; set amr.enabled = false to split the grid")]
    AdaptiveOnOneGpu,
    /// Compressed subgrids were asked for in a launch of several processes.
    #[error(
        "compressed subgrids run in one process (on one GPU, or shared over several with --gpus N); a launch of several \
         processes splits dense grids only: run one process with --gpus N, or set compression.enabled = false"
    )]
    CompressedInOneProcess,
    /// Several GPUs were asked for on the CPU backend.
    #[error("several GPUs run on the CUDA backend, not the CPU")]
    GpusNeedCuda,
    /// The GPU solver could not be built (no device, a kernel, the device's memory).
    #[error("{0}")]
    Gpu(String),
}

/// Free memory where a run would go: the host's, and on the GPU path the least free over the
/// devices (a device that holds several slabs counts once per slab).
///
/// # Errors
/// No CUDA driver or device where GPUs are asked for.
pub fn free_memory(place: Place) -> Result<Free, String> {
    let host = crate::memory::host_available();
    let device = match place {
        Place::Cpu => None,
        Place::Gpus(g) => {
            let ordinals = if g > 1 { cuda::multi::devices_for(g).map_err(|e| e.to_string())? } else { vec![0] };
            let mut least: Option<u64> = None;
            for &o in &ordinals {
                let share = ordinals.iter().filter(|&&x| x == o).count() as u64;
                let free = cuda::free_memory(o)? / share;
                least = Some(least.map_or(free, |l| l.min(free)));
            }
            least
        }
    };
    Ok(Free { host, device })
}

/// The memory plan of a scene's run on `place`, checked before anything large is allocated.
///
/// # Errors
/// [`BuildError::Memory`] with both numbers and the largest `domain.size` that fits;
/// [`BuildError::Gpu`] where the free device memory cannot be read.
pub fn plan(ls: &LoadedScene, place: Place, keeps: Keeps) -> Result<(), BuildError> {
    let spec = Spec::of_scene(ls, place, keeps);
    let free = free_memory(place).map_err(BuildError::Gpu)?;
    crate::memory::check(&spec, &free).map_err(|why| BuildError::Memory { origin: ls.origin.clone(), why })
}

/// The CPU reference solver of a scene (dense, compressed subgrids or adaptive blocks), without
/// a memory plan: for tests and callers that checked it.
///
/// # Errors
/// Voxelisation errors (e.g. an unreadable STL file); with compression, a memory budget the
/// state does not fit.
pub fn cpu(ls: &LoadedScene) -> Result<Box<dyn Solver>, SceneError> {
    if ls.scene.compression.enabled {
        return subgrid::from_scene(ls);
    }
    if ls.scene.amr.enabled {
        return crate::backend::amr::from_scene(ls);
    }
    let dom = Domain::from_scene(ls)?;
    let params = Params::from_scene(ls, &dom);
    let s = &ls.scene.solver;
    Ok(cpu::build(dom, s.scheme, s.precision, params, s.ghost_block, |p| crate::domain::initial_state(ls, p)))
}

/// The CUDA solver of a scene on one GPU (adaptive blocks, compressed subgrids or the dense
/// grid), without a memory plan.
///
/// # Errors
/// No usable GPU, a kernel that does not compile, the device's memory.
pub fn gpu(ls: &LoadedScene) -> Result<Box<dyn Solver>, BuildError> {
    let gpu_err = |e: crate::solver::SolverError| BuildError::Gpu(e.to_string());
    Ok(if ls.scene.amr.enabled {
        crate::backend::amr::from_scene_cuda(ls).map_err(gpu_err)?
    } else if ls.scene.compression.enabled {
        Box::new(cuda::subgrid::from_scene(ls).map_err(gpu_err)?)
    } else {
        Box::new(cuda::CudaSolver::from_scene(ls).map_err(gpu_err)?)
    })
}

fn on_cpu(ls: &LoadedScene, keeps: Keeps, notice: Option<String>) -> Result<Built, BuildError> {
    plan(ls, Place::Cpu, keeps)?;
    Ok(Built { solver: cpu(ls)?, notice })
}

/// Build the solver a scene needs where `choice` says, once its memory plan fits: what the run
/// needs on the host and on each GPU, with what the caller keeps, against what is free.
///
/// # Errors
/// See [`BuildError`]: a plan over what is free, a scene that cannot be built, a choice that
/// cannot be met (adaptive blocks on several GPUs), a GPU solver that
/// does not start where the CUDA backend was asked for.
pub fn build(ls: &LoadedScene, choice: &Choice) -> Result<Built, BuildError> {
    let gpus = choice.gpus.max(1);
    if gpus > 1 {
        if ls.scene.amr.enabled {
            return Err(BuildError::AdaptiveOnOneGpu);
        }
        if choice.backend == Backend::Cpu {
            return Err(BuildError::GpusNeedCuda);
        }
        if choice.backend == Backend::Auto {
            if let Err(why) = cuda::probe() {
                return on_cpu(ls, choice.keeps, Some(format!("{why}; running on the CPU backend (one grid, {gpus} GPUs not used)")));
            }
        }
        plan(ls, Place::Gpus(gpus), choice.keeps)?;
        let gpu_err = |e: crate::solver::SolverError| BuildError::Gpu(e.to_string());
        if ls.scene.compression.enabled {
            // The subgrids shared out in slabs, one per GPU, each GPU its own ring.
            let devices = cuda::multi::devices_for(gpus).map_err(gpu_err)?;
            let solver = cuda::subgrid::from_scene_on(ls, &devices).map_err(gpu_err)?;
            return Ok(Built { solver: Box::new(solver), notice: None });
        }
        let solver = cuda::multi::MultiCudaSolver::from_scene(ls, gpus).map_err(gpu_err)?;
        return Ok(Built { solver: Box::new(solver), notice: None });
    }
    let on_gpu = || -> Result<Built, BuildError> {
        plan(ls, Place::Gpus(1), choice.keeps)?;
        Ok(Built { solver: gpu(ls)?, notice: None })
    };
    match choice.backend {
        Backend::Cpu => on_cpu(ls, choice.keeps, None),
        Backend::Cuda => on_gpu(),
        Backend::Auto => match cuda::probe() {
            Err(why) => on_cpu(ls, choice.keeps, Some(format!("{why}; running on the CPU backend"))),
            Ok(_) => match on_gpu() {
                Ok(built) => Ok(built),
                Err(e) => on_cpu(ls, choice.keeps, Some(format!("the CUDA backend could not start ({e}); running on the CPU backend"))),
            },
        },
    }
}

/// Rank 0 of a launch of several processes (`mpirun`, `srun`, `torchrun`): the scene's grid cut
/// into one slab per process, this process holding the first and steering the others (which
/// run [`follow`]). Its memory plan is one slab's on this rank's GPU and the whole grid's
/// files and saved states in this host's memory.
///
/// # Errors
/// Compressed subgrids (one process) or adaptive blocks (one GPU), a plan over what is free (the other
/// ranks are stopped with the reason), any rank's failure to build its slab or join NCCL.
pub fn lead(ls: &LoadedScene, keeps: Keeps, cluster: crate::ranks::rendezvous::Cluster) -> Result<Built, BuildError> {
    let refuse = |e: BuildError| {
        cuda::multi::remote::abort(&cluster, &e.to_string());
        Err(e)
    };
    if ls.scene.amr.enabled {
        return refuse(BuildError::AdaptiveOnOneGpu);
    }
    if ls.scene.compression.enabled {
        return refuse(BuildError::CompressedInOneProcess);
    }
    let world = cluster.rank.world;
    let spec = Spec::of_scene(ls, Place::Gpus(world), keeps);
    let device =
        cuda::multi::remote::rank_device(&cluster.rank).and_then(|o| cuda::free_memory(o).map_err(crate::solver::SolverError::Backend));
    let free = match device {
        Ok(d) => Free { host: crate::memory::host_available(), device: Some(d) },
        Err(e) => return refuse(BuildError::Gpu(e.to_string())),
    };
    if let Err(why) = crate::memory::check(&spec, &free) {
        return refuse(BuildError::Memory { origin: ls.origin.clone(), why });
    }
    let solver = cuda::multi::MultiCudaSolver::lead(ls, cluster).map_err(|e| BuildError::Gpu(e.to_string()))?;
    Ok(Built { solver: Box::new(solver), notice: None })
}

/// A rank other than 0 of a launch: build this process's slab and serve rank 0 until the run
/// ends (see [`lead`]).
///
/// # Errors
/// This rank's slab could not be built (rank 0 reports it too), rank 0 stopped the start.
pub fn follow(ls: &LoadedScene, cluster: crate::ranks::rendezvous::Cluster) -> Result<(), BuildError> {
    cuda::multi::remote::follow(ls, cluster).map_err(|e| BuildError::Gpu(e.to_string()))
}

/// How many GPUs of this machine a scene should be split over (`--gpus auto`), and why: one
/// where only one can run it (the CPU backend, adaptive blocks, compressed subgrids, a single
/// GPU), else the count [`cuda::split`] predicts fastest from boxes timed here, where it is
/// worth it. Never an error: a measurement that fails keeps one GPU and says why.
#[must_use]
pub fn auto_gpus(ls: &LoadedScene, backend: Backend) -> cuda::split::GpuChoice {
    let one = |why: String| cuda::split::GpuChoice { gpus: 1, why: format!("1 GPU: {why}") };
    if backend == Backend::Cpu {
        return one("the CPU backend runs one grid".into());
    }
    if ls.scene.amr.enabled {
        return one("adaptive blocks run on one GPU".into());
    }
    if ls.scene.compression.enabled {
        return one("compressed subgrids stay on one GPU unless --gpus N shares them out".into());
    }
    if let Err(why) = cuda::probe() {
        return one(why);
    }
    let count = match std::env::var("ESOFLOW_GPUS") {
        Ok(v) => v.split(',').count(),
        Err(_) => cudarc::driver::CudaContext::device_count().map_or(1, |c| c.max(1) as usize),
    };
    let devices = match cuda::multi::devices_for(count) {
        Ok(d) => d,
        Err(e) => return one(e.to_string()),
    };
    if count < 2 {
        return one("this machine has one GPU".into());
    }
    let s = &ls.scene.solver;
    if s.scheme != crate::schemes::Scheme::EsotericPull {
        return one(format!("several GPUs run the Esoteric Pull scheme; this scene sets {}", s.scheme.name()));
    }
    let n = ls.derived.size;
    let z = if n[2] > 1 { n[2] } else { n[1] };
    match cuda::split::measure(ls.derived.lattice, s.precision, n, &devices) {
        Ok(t) => cuda::split::choose(z, &t),
        Err(e) => one(format!("timing the split failed ({e})")),
    }
}

/// Whether a usable NVIDIA GPU is here, and if not why (for callers that choose what to
/// measure or show).
///
/// # Errors
/// Why there is no usable GPU.
pub fn gpu_available() -> Result<cuda::DeviceInfo, String> {
    cuda::probe()
}
