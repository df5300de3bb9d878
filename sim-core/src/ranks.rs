//! Which rank of a parallel launch this process is, from the environment the usual launchers
//! set: `torchrun`-style `RANK` / `WORLD_SIZE` / `LOCAL_RANK`, Open MPI's `mpirun`
//! (`OMPI_COMM_WORLD_*`), Slurm's `srun` (`SLURM_PROCID` / `SLURM_STEP_NUM_TASKS` /
//! `SLURM_LOCALID`: a job step's tasks; a batch script's own shell has `SLURM_NTASKS` of the
//! whole job but is one process)
//! and MPICH / Intel MPI (`PMI_RANK` / `PMI_SIZE`, `MPI_LOCALRANKID`). No MPI library is
//! linked: the variables are all a rank needs to find its place.
//!
//! `esoflow run` under a launcher splits its grid into one slab per process: the processes
//! meet ([`rendezvous`]), rank 0 runs the simulation's loop and writes every file, the others
//! hold their slabs and answer rank 0's commands (see `backend::cuda::multi`). The viewer and
//! the bench run in one process (several GPUs there with `--gpus N`), and refuse a launch of
//! several processes with one clear message instead of each doing the whole work.

pub mod rendezvous;
pub mod wire;

/// One process's place in a launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rank {
    /// This process, 0 to `world - 1`.
    pub rank: usize,
    /// Processes in the launch.
    pub world: usize,
    /// This process among those of its node (its GPU there), where the launcher says.
    pub local: Option<usize>,
    /// The launcher's variables the numbers came from (for messages).
    pub source: &'static str,
}

/// The variable names of one launcher: rank, size, local rank.
struct Names {
    rank: &'static str,
    world: &'static str,
    local: &'static str,
    source: &'static str,
}

const LAUNCHERS: [Names; 4] = [
    Names { rank: "RANK", world: "WORLD_SIZE", local: "LOCAL_RANK", source: "RANK/WORLD_SIZE" },
    Names { rank: "OMPI_COMM_WORLD_RANK", world: "OMPI_COMM_WORLD_SIZE", local: "OMPI_COMM_WORLD_LOCAL_RANK", source: "mpirun (Open MPI)" },
    Names { rank: "SLURM_PROCID", world: "SLURM_STEP_NUM_TASKS", local: "SLURM_LOCALID", source: "srun (Slurm)" },
    Names { rank: "PMI_RANK", world: "PMI_SIZE", local: "MPI_LOCALRANKID", source: "mpirun (MPICH / Intel MPI)" },
];

/// This process's rank from `var` (the environment: `|k| std::env::var(k).ok()`): the first
/// launcher whose rank and size are both set; `None` where none is.
///
/// # Errors
/// A launcher's variable that is not a whole number, or a rank outside its launch, named with
/// what would be valid.
pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<Rank>, String> {
    for n in &LAUNCHERS {
        let (Some(r), Some(w)) = (var(n.rank), var(n.world)) else { continue };
        let num = |name: &str, v: &str| -> Result<usize, String> {
            v.trim().parse::<usize>().map_err(|_| format!("{name}={v}: expected a whole number (set by {})", n.source))
        };
        let (rank, world) = (num(n.rank, &r)?, num(n.world, &w)?);
        if world == 0 || rank >= world {
            return Err(format!("{}={r} with {}={w}: the rank must be 0 to the size minus 1", n.rank, n.world));
        }
        let local = var(n.local).map(|v| num(n.local, &v)).transpose()?;
        return Ok(Some(Rank { rank, world, local, source: n.source }));
    }
    Ok(None)
}

/// Refuse a launch of several processes for a command that runs in one (`what`: "the viewer",
/// "the bench"): one sentence naming the launcher, the rank and what runs instead. A single
/// process, or none launched, passes.
///
/// # Errors
/// That sentence, or a bad launcher variable ([`from_env`]).
pub fn refuse_several(var: impl Fn(&str) -> Option<String>, what: &str) -> Result<(), String> {
    match from_env(var)? {
        Some(r) if r.world > 1 => Err(format!(
            "this process is rank {} of {} launched by {}: {what} runs in one process, which splits the grid over the GPUs of its machine; start it once with --gpus {} (or --gpus auto); `esoflow run` runs one process per GPU under a launcher",
            r.rank, r.world, r.source, r.world
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn each_launcher_is_read_and_none_means_no_launch() {
        assert_eq!(from_env(env(&[])), Ok(None));
        let r = from_env(env(&[("RANK", "1"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "1")])).unwrap().unwrap();
        assert_eq!((r.rank, r.world, r.local), (1, 4, Some(1)));
        let r = from_env(env(&[("OMPI_COMM_WORLD_RANK", "3"), ("OMPI_COMM_WORLD_SIZE", "8"), ("OMPI_COMM_WORLD_LOCAL_RANK", "3")]))
            .unwrap()
            .unwrap();
        assert_eq!((r.rank, r.world, r.local, r.source), (3, 8, Some(3), "mpirun (Open MPI)"));
        let r = from_env(env(&[("SLURM_PROCID", "0"), ("SLURM_STEP_NUM_TASKS", "1")])).unwrap().unwrap();
        assert_eq!((r.rank, r.world, r.local), (0, 1, None));
        // A batch script's shell: the job's task count, but no step of tasks: one process.
        assert_eq!(from_env(env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4")])), Ok(None));
        let r = from_env(env(&[("PMI_RANK", "2"), ("PMI_SIZE", "3"), ("MPI_LOCALRANKID", "0")])).unwrap().unwrap();
        assert_eq!((r.rank, r.world, r.local), (2, 3, Some(0)));
        // A rank without a size is no launch of this kind.
        assert_eq!(from_env(env(&[("RANK", "0")])), Ok(None));
    }

    #[test]
    fn bad_numbers_are_named_and_several_processes_are_refused() {
        let e = from_env(env(&[("RANK", "x"), ("WORLD_SIZE", "2")])).unwrap_err();
        assert_eq!(e, "RANK=x: expected a whole number (set by RANK/WORLD_SIZE)");
        let e = from_env(env(&[("SLURM_PROCID", "2"), ("SLURM_STEP_NUM_TASKS", "2")])).unwrap_err();
        assert_eq!(e, "SLURM_PROCID=2 with SLURM_STEP_NUM_TASKS=2: the rank must be 0 to the size minus 1");
        assert!(refuse_several(env(&[]), "the viewer").is_ok());
        assert!(refuse_several(env(&[("SLURM_PROCID", "0"), ("SLURM_STEP_NUM_TASKS", "1")]), "the viewer").is_ok(), "a single task runs");
        let e = refuse_several(env(&[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2")]), "the viewer").unwrap_err();
        assert!(
            e.starts_with("this process is rank 1 of 2 launched by mpirun (Open MPI): the viewer runs in one process")
                && e.contains("--gpus 2"),
            "{e}"
        );
    }
}
