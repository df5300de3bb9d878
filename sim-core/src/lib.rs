//! Esoflow's solver library: lattices, scenes, streaming schemes, collision, boundaries and
//! backends. Knows nothing of windows or rendering.
#![warn(missing_docs)]

pub mod amr;
pub mod atomic_file;
pub mod backend;
pub mod bricks;
pub mod build;
pub mod checkpoint;
pub mod collision;
pub mod compress;
pub mod domain;
pub mod edit;
pub mod error;
pub mod export;
pub mod fields;
pub mod forces;
pub mod frame;
pub mod input;
pub mod lattice;
pub mod memory;
pub mod params;
pub mod precision;
pub mod probes;
pub mod ranks;
pub mod scene;
pub mod schemes;
pub mod solver;
pub mod stats;
pub mod units;
pub mod walls;

pub use bricks::{BrickClass, BrickMap};
pub use edit::{CellEdit, EditReport, EditTo};
pub use solver::{Adaptive, Compressed, CompressionInfo, Fields, Params, Solver, SolverError, SolverInfo, Stats, SubgridStat};
