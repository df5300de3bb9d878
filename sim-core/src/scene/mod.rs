//! Scene files: a documented TOML format (see `scenes/README.md`), parsed into a typed [`Scene`],
//! with `--set KEY=VALUE` overrides and errors that name file, line, key and what is valid.

mod forces;
mod keys;
mod overrides;
mod probes;
pub mod surface;
mod units;
mod validate;
pub mod voxel;

pub use forces::{ForceReference, ForcesSpec, ReferenceValues, SignedAxis};
pub use keys::{KeyDoc, KEYS};
pub use overrides::apply_override;
pub use probes::{cell_of, column_name, name_probes, Probe, ProbeSpec};
pub use units::{min_tau, UnitsSpec, DEFAULT_DENSITY};
pub use validate::{validate, MAX_CELLS, MAX_STEPS};

use validate::{check_files, check_obstacles};

use crate::collision::Collision;
use crate::lattice::Lattice;
use crate::precision::Precision;
use crate::schemes::Scheme;
use crate::units::human_bytes;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Largest id of each table (4 bits, obstacle ids 1..=15).
pub const MAX_IDS: usize = 15;

/// A point or vector given as two or three numbers in a scene (z = 0 when two are given).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Vec3(pub [f32; 3]);

impl<'de> Deserialize<'de> for Vec3 {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<f64>::deserialize(d)?;
        match v.len() {
            2 => Ok(Vec3([v[0] as f32, v[1] as f32, 0.0])),
            3 => Ok(Vec3([v[0] as f32, v[1] as f32, v[2] as f32])),
            n => Err(serde::de::Error::custom(format!("expected 2 or 3 numbers, got {n}"))),
        }
    }
}

/// A whole scene.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scene {
    /// Display name.
    #[serde(default)]
    pub name: String,
    /// One or two sentences about the scene.
    #[serde(default)]
    pub description: String,
    /// What to try with the scene in the viewer (one sentence; the presets window shows it).
    #[serde(default, rename = "try", skip_serializing_if = "String::is_empty")]
    pub try_this: String,
    /// Grid size and lattice.
    pub domain: DomainSpec,
    /// Boundary type of each face.
    #[serde(default)]
    pub boundaries: Boundaries,
    /// Fluid parameters.
    #[serde(default)]
    pub fluid: Fluid,
    /// Initial state.
    #[serde(default)]
    pub initial: Initial,
    /// Numerical method.
    #[serde(default)]
    pub solver: SolverSpec,
    /// Solid obstacles.
    #[serde(default)]
    pub obstacles: Vec<Obstacle>,
    /// Compressed subgrids (off by default).
    #[serde(default)]
    pub compression: Compression,
    /// Adaptive octree blocks (off by default).
    #[serde(default)]
    pub amr: Amr,
    /// Reference values of the force coefficients (defaults from `fluid` and the inflow).
    #[serde(default)]
    pub forces: ForcesSpec,
    /// Cells where a run samples the flow over time (see [`crate::probes`]);
    /// [`Derived::probes`] has them checked and named.
    #[serde(default)]
    pub probes: Vec<ProbeSpec>,
    /// What cells, steps and lattice velocities stand for in SI units (none: lattice units
    /// only); [`Derived::units`] has the conversion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub units: Option<UnitsSpec>,
}

/// `[domain]`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainSpec {
    /// Cells along x, y (and z), boundary layers included.
    pub size: Vec<usize>,
    /// Velocity set; D2Q9 for two sizes, D3Q19 for three unless given.
    #[serde(default)]
    pub lattice: Option<Lattice>,
}

/// Boundary kind of one face.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FaceKind {
    /// Wraps around to the opposite face.
    #[default]
    Periodic,
    /// Resting wall (bounce-back).
    Wall,
    /// Free-slip (symmetry) wall: the fluid slides along it without friction, as at a mirror
    /// plane of a symmetric flow or a far field.
    #[serde(alias = "symmetry")]
    SlipWall,
    /// Wall moving tangentially (lid).
    MovingWall,
    /// Prescribed velocity.
    Inlet,
    /// Prescribed density (pressure).
    Outlet,
}

/// Inlet velocity profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// The same velocity everywhere on the face.
    #[default]
    Uniform,
    /// Parabolic across the open part of the face, `velocity` at its centre.
    Parabolic,
}

/// One face: `"wall"` or a table `{ type = "moving_wall", velocity = [0.1, 0, 0] }`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Face {
    /// Boundary kind.
    #[serde(rename = "type", default)]
    pub kind: FaceKind,
    /// Wall or inlet velocity (lattice units).
    #[serde(default)]
    pub velocity: Vec3,
    /// Outlet density (lattice units).
    #[serde(default = "one")]
    pub density: f32,
    /// Inlet profile.
    #[serde(default)]
    pub profile: Profile,
    /// Cells of the absorbing layer in front of an inlet or outlet (0: none): pressure waves
    /// that reach the face are damped there instead of reflected.
    #[serde(default)]
    pub sponge: u32,
}

fn one() -> f32 {
    1.0
}

impl Default for Face {
    /// A periodic face; the other fields take their documented defaults (density 1).
    fn default() -> Self {
        Face { kind: FaceKind::default(), velocity: Vec3::default(), density: one(), profile: Profile::default(), sponge: 0 }
    }
}

/// `[boundaries]`: faces in the order x_min, x_max, y_min, y_max, z_min, z_max.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Boundaries {
    /// Face at x = 0.
    #[serde(default)]
    pub x_min: Face,
    /// Face at x = nx - 1.
    #[serde(default)]
    pub x_max: Face,
    /// Face at y = 0.
    #[serde(default)]
    pub y_min: Face,
    /// Face at y = ny - 1.
    #[serde(default)]
    pub y_max: Face,
    /// Face at z = 0.
    #[serde(default)]
    pub z_min: Face,
    /// Face at z = nz - 1.
    #[serde(default)]
    pub z_max: Face,
}

impl Boundaries {
    /// Faces as an array indexed by `2 * axis + (max as usize)`.
    #[must_use]
    pub fn faces(&self) -> [&Face; 6] {
        [&self.x_min, &self.x_max, &self.y_min, &self.y_max, &self.z_min, &self.z_max]
    }
    /// Names of the faces, in the order of [`Boundaries::faces`].
    pub const NAMES: [&'static str; 6] = ["x_min", "x_max", "y_min", "y_max", "z_min", "z_max"];
}

/// `[fluid]`: give one of `tau`, `viscosity` or `reynolds` (with `length` and `velocity`).
#[derive(Default, Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fluid {
    /// Relaxation time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tau: Option<f32>,
    /// Kinematic viscosity (lattice units).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub viscosity: Option<f32>,
    /// Reynolds number `velocity * length / viscosity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reynolds: Option<f32>,
    /// Reference length for `reynolds` (cells).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<f32>,
    /// Reference velocity for `reynolds` (lattice units).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub velocity: Option<f32>,
    /// Body force density (Guo forcing), lattice units.
    #[serde(default)]
    pub force: Vec3,
}

/// Initial flow field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum InitialKind {
    /// Uniform density and velocity.
    #[default]
    Uniform,
    /// Taylor-Green vortex array with one vortex pair per period of the domain (2D field, the
    /// same in every z plane).
    TaylorGreen,
    /// The 3D Taylor-Green vortex (Brachet et al. 1983), one period per domain length:
    /// `u = U sin(x) cos(y) cos(z)`, `v = -U cos(x) sin(y) cos(z)`, `w = 0`; needs a 3D domain.
    #[serde(rename = "taylor_green_3d")]
    TaylorGreen3d,
}

/// `[initial]`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Initial {
    /// Kind of initial field.
    #[serde(default)]
    pub kind: InitialKind,
    /// Uniform velocity, or the amplitude (x component) of the Taylor-Green vortex.
    #[serde(default)]
    pub velocity: Vec3,
    /// Density.
    #[serde(default = "one")]
    pub density: f32,
}

impl Default for Initial {
    fn default() -> Self {
        Initial { kind: InitialKind::Uniform, velocity: Vec3::default(), density: 1.0 }
    }
}

/// How obstacles meet the fluid (`solver.walls`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WallMode {
    /// Interpolated bounce-back with the wall distance from the exact shape.
    #[default]
    Interpolated,
    /// Halfway bounce-back on the voxels (the wall half-way between a fluid and a solid cell).
    Staircase,
}

impl WallMode {
    /// Name as written in scene files.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            WallMode::Interpolated => "interpolated",
            WallMode::Staircase => "staircase",
        }
    }
}

/// `[solver]`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SolverSpec {
    /// Streaming scheme.
    #[serde(default)]
    pub scheme: Scheme,
    /// DDF storage precision.
    #[serde(default = "default_precision")]
    pub precision: Precision,
    /// Collision operator.
    #[serde(default = "default_collision")]
    pub collision: Collision,
    /// Smagorinsky constant.
    #[serde(default = "default_cs")]
    pub smagorinsky_cs: f32,
    /// Edge of the LBM-Ghost blocks (cells).
    #[serde(default = "default_ghost_block")]
    pub ghost_block: usize,
    /// Steps that `esoflow run` makes unless `--steps` is given.
    #[serde(default = "default_steps")]
    pub steps: u64,
    /// Interval of rows in stats.csv (steps).
    #[serde(default = "default_stats_every")]
    pub stats_every: u64,
    /// How obstacles meet the fluid: interpolated bounce-back on their exact shape, or a
    /// staircase of voxels.
    #[serde(default)]
    pub walls: WallMode,
}

fn default_precision() -> Precision {
    Precision::Fp32
}
fn default_collision() -> Collision {
    Collision::Bgk
}
fn default_cs() -> f32 {
    0.1
}
fn default_ghost_block() -> usize {
    16
}
fn default_steps() -> u64 {
    1000
}
fn default_stats_every() -> u64 {
    100
}

impl Default for SolverSpec {
    fn default() -> Self {
        SolverSpec {
            scheme: Scheme::default(),
            precision: default_precision(),
            collision: default_collision(),
            smagorinsky_cs: default_cs(),
            ghost_block: default_ghost_block(),
            steps: default_steps(),
            stats_every: default_stats_every(),
            walls: WallMode::default(),
        }
    }
}

/// `[compression]`: run on compressed subgrids (the CPU reference of Flint et al. 2024): the grid is cut
/// into subgrids whose cores are kept wavelet-compressed between steps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compression {
    /// Whether the run uses compressed subgrids.
    #[serde(default)]
    pub enabled: bool,
    /// Wavelet threshold (details below `tau * 2^level` are dropped).
    #[serde(default = "default_compression_tau")]
    pub tau: f32,
    /// Subgrid size in cells along x, y, z.
    #[serde(default = "default_subgrid")]
    pub subgrid: Vec<usize>,
    /// Most bytes the compressed state may take (none: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_budget: Option<ByteSize>,
}

fn default_compression_tau() -> f32 {
    1e-5
}
fn default_subgrid() -> Vec<usize> {
    vec![64, 64, 64]
}

impl Default for Compression {
    fn default() -> Self {
        Compression { enabled: false, tau: default_compression_tau(), subgrid: default_subgrid(), memory_budget: None }
    }
}

impl Compression {
    /// The subgrid size as three counts (validated scenes have exactly three).
    #[must_use]
    pub fn subgrid_size(&self) -> [usize; 3] {
        let g = |a: usize| self.subgrid.get(a).copied().unwrap_or(64);
        [g(0), g(1), g(2)]
    }
}

/// The field of the refinement criterion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AmrCriterion {
    /// Block maximum of |vorticity|.
    #[default]
    Vorticity,
    /// Block maximum of the Q criterion.
    Q,
}

/// `[amr]`: adaptive octree blocks (Jaber, Essel & Sullivan 2025): a forest of blocks of 4^D cells over the grid
/// of `domain.size`, each refinable by 2 up to `max_level`, the level of each block picked by
/// the criterion every `interval` coarse steps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Amr {
    /// Whether the run uses adaptive blocks.
    #[serde(default)]
    pub enabled: bool,
    /// Finest level.
    #[serde(default = "default_amr_max_level")]
    pub max_level: u8,
    /// Criterion field.
    #[serde(default)]
    pub criterion: AmrCriterion,
    /// Value asking for level 1 (each doubling one level more).
    #[serde(default = "default_amr_threshold")]
    pub threshold: f32,
    /// Hysteresis in (0, 1]: a block keeps its level while its value stays above this times
    /// the value that asks for it (1: none).
    #[serde(default = "default_amr_coarsen")]
    pub coarsen: f32,
    /// Adapt every this many coarse steps (0: never).
    #[serde(default = "default_amr_interval")]
    pub interval: u64,
    /// Level of blocks near obstacles (default: `max_level`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near_wall: Option<u8>,
    /// Distance that counts as near, in cells of the near-wall level.
    #[serde(default = "default_amr_margin")]
    pub wall_margin: f64,
    /// Frozen levels.
    #[serde(default)]
    pub freeze: Vec<u8>,
    /// Most blocks at once (default: see [`Amr::capacity_for`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<usize>,
    /// CUDA backend: keep the blocks' DDFs in one buffer, streamed in place (Esoteric Pull with
    /// halo slots), instead of two (the CPU reference always keeps two).
    #[serde(default)]
    pub in_place: bool,
}

fn default_amr_max_level() -> u8 {
    2
}
fn default_amr_threshold() -> f32 {
    0.01
}
fn default_amr_coarsen() -> f32 {
    1.0
}
fn default_amr_interval() -> u64 {
    50
}
/// 24 cells of the near-wall level: on the square cylinder (near-wall level 1) a level jump 4
/// fine cells from the square raised the drag by 25 % and the Strouhal number by 13 %, 12 by
/// 3.5 % (C_D 1.79); at 24 both match the uniform fine grid.
fn default_amr_margin() -> f64 {
    24.0
}

impl Default for Amr {
    fn default() -> Self {
        Amr {
            enabled: false,
            max_level: default_amr_max_level(),
            criterion: AmrCriterion::default(),
            threshold: default_amr_threshold(),
            coarsen: default_amr_coarsen(),
            interval: default_amr_interval(),
            near_wall: None,
            wall_margin: default_amr_margin(),
            freeze: Vec::new(),
            capacity: None,
            in_place: false,
        }
    }
}

/// Largest `amr.max_level` a scene may ask for (the finest grid is `domain.size * 2^max_level`).
pub const AMR_MAX_LEVEL: u8 = 6;

impl Amr {
    /// The block capacity: the scene's, else every block of every level up to `max_level`
    /// (parents included) where its DDFs (two FP32 copies of `q` per cell) fit in 1 GiB, else
    /// as many as fit.
    #[must_use]
    pub fn capacity_for(&self, size: [usize; 3], dims: usize, q: usize) -> usize {
        if let Some(c) = self.capacity {
            return c;
        }
        let roots: usize = (0..dims).map(|a| size[a] / 4).product();
        let k = 1usize << dims;
        let mut full = 0usize;
        let mut level = roots;
        for _ in 0..=self.max_level {
            full = full.saturating_add(level);
            level = level.saturating_mul(k);
        }
        let per_block = 2 * q * 4 * (1 << (2 * dims));
        full.min(((1usize << 30) / per_block).max(roots + k))
    }
}

/// A number of bytes, written in a scene as a number (`8000000000`) or a string with a unit
/// (`"8 GB"`, `"512MiB"`; units B, KB, MB, GB, TB (powers of 1000) and KiB, MiB, GiB, TiB
/// (powers of 1024), case-insensitive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub u64);

/// What a [`ByteSize`] accepts, for error messages.
const BYTE_SIZE_TY: &str = "a number of bytes or a size such as \"8 GB\" (units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)";

impl ByteSize {
    /// Parse `"8 GB"`, `"512MiB"`, `"1e9"` or `"4096"`.
    ///
    /// # Errors
    /// A message saying what is accepted.
    pub fn parse(text: &str) -> Result<ByteSize, String> {
        let t = text.trim();
        let split = t.find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E').unwrap_or(t.len());
        // "1e9" is a number, but "5 EB"-style units are not supported anyway.
        let (num, unit) = t.split_at(split);
        let unit = unit.trim().to_ascii_lowercase();
        let scale: f64 = match unit.as_str() {
            "" | "b" => 1.0,
            "kb" => 1e3,
            "mb" => 1e6,
            "gb" => 1e9,
            "tb" => 1e12,
            "kib" => 1024.0,
            "mib" => 1024.0 * 1024.0,
            "gib" => 1024.0 * 1024.0 * 1024.0,
            "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
            _ => return Err(format!("unknown unit \"{}\" in \"{text}\"; expected {BYTE_SIZE_TY}", unit)),
        };
        let v: f64 = num.trim().parse().map_err(|_| format!("expected {BYTE_SIZE_TY}, got \"{text}\""))?;
        ByteSize::from_f64(v * scale).ok_or_else(|| format!("expected a size > 0, got \"{text}\""))
    }

    fn from_f64(v: f64) -> Option<ByteSize> {
        (1.0..1.8e19).contains(&v).then(|| ByteSize(v.round() as u64))
    }
}

impl std::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", human_bytes(self.0))
    }
}

impl Serialize for ByteSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(BYTE_SIZE_TY)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ByteSize, E> {
                ByteSize::from_f64(v as f64).ok_or_else(|| E::custom(format!("expected a size > 0, got {v}")))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ByteSize, E> {
                ByteSize::from_f64(v as f64).ok_or_else(|| E::custom(format!("expected a size > 0, got {v}")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<ByteSize, E> {
                ByteSize::from_f64(v).ok_or_else(|| E::custom(format!("expected a size > 0, got {v}")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// Axis name in scenes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Axis {
    /// x.
    X,
    /// y.
    Y,
    /// z.
    #[default]
    Z,
}

impl Axis {
    /// Axis index.
    #[must_use]
    pub fn index(self) -> usize {
        match self {
            Axis::X => 0,
            Axis::Y => 1,
            Axis::Z => 2,
        }
    }
}

/// `[[obstacles]]`: a solid shape. Cell (x, y, z) has its centre at (x, y, z).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "shape", rename_all = "snake_case", deny_unknown_fields)]
pub enum Obstacle {
    /// Axis-aligned box with corners `min` and `max` (inclusive, cells).
    Box {
        /// Name in force reports.
        #[serde(default)]
        name: Option<String>,
        /// Lower corner.
        min: Vec3,
        /// Upper corner.
        max: Vec3,
    },
    /// Sphere (a disc in 2D).
    Sphere {
        /// Name in force reports.
        #[serde(default)]
        name: Option<String>,
        /// Centre.
        center: Vec3,
        /// Radius (cells).
        radius: f32,
    },
    /// Cylinder along `axis` through `center`, infinite unless `length` is given.
    Cylinder {
        /// Name in force reports.
        #[serde(default)]
        name: Option<String>,
        /// A point on the axis.
        center: Vec3,
        /// Radius (cells).
        radius: f32,
        /// Axis direction.
        #[serde(default)]
        axis: Axis,
        /// Length along the axis (cells), centred on `center`.
        #[serde(default)]
        length: Option<f32>,
    },
    /// Triangle mesh from an STL file (binary or ASCII), voxelised.
    Stl {
        /// Name in force reports.
        #[serde(default)]
        name: Option<String>,
        /// Path, relative to the scene file.
        file: PathBuf,
        /// Where the centre of the mesh's bounding box goes.
        center: Vec3,
        /// Longest edge of the mesh's bounding box after scaling (cells).
        size: f32,
    },
}

impl Obstacle {
    /// The name used in force reports.
    #[must_use]
    pub fn display_name(&self, index: usize) -> String {
        let (n, s) = match self {
            Obstacle::Box { name, .. } => (name, "box"),
            Obstacle::Sphere { name, .. } => (name, "sphere"),
            Obstacle::Cylinder { name, .. } => (name, "cylinder"),
            Obstacle::Stl { name, .. } => (name, "stl"),
        };
        n.clone().unwrap_or_else(|| format!("{s}{index}"))
    }
}

/// A scene error: file, line (where known), key and what is valid.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{}: {key}: {message}", .file, .line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct SceneError {
    /// File name, or `--set` for a command-line override.
    pub file: String,
    /// 1-based line.
    pub line: Option<usize>,
    /// Dotted key, e.g. `fluid.tau`.
    pub key: String,
    /// What is wrong and what would be valid.
    pub message: String,
}

/// Parameters derived from a validated scene.
#[derive(Clone, Debug, PartialEq)]
pub struct Derived {
    /// Velocity set.
    pub lattice: Lattice,
    /// Cells along x, y, z (z = 1 in 2D).
    pub size: [usize; 3],
    /// Relaxation time.
    pub tau: f32,
    /// Largest velocity the scene prescribes (lattice units).
    pub max_velocity: f32,
    /// Warnings a user should read (e.g. high Mach number).
    pub warnings: Vec<String>,
    /// The scene's probes (`[[probes]]`), each cell inside the domain and each named: the
    /// given name as a CSV-safe one, else `probeK` (see [`name_probes`]).
    pub probes: Vec<Probe>,
    /// The conversion to SI units where the scene has a `[units]` table.
    pub units: Option<crate::units::Units>,
}

impl Derived {
    /// Kinematic viscosity.
    #[must_use]
    pub fn viscosity(&self) -> f32 {
        (self.tau - 0.5) / 3.0
    }
}

/// A scene loaded from disk, with where it came from.
#[derive(Clone, Debug)]
pub struct LoadedScene {
    /// The scene after overrides.
    pub scene: Scene,
    /// Derived parameters.
    pub derived: Derived,
    /// Directory that relative paths in the scene are resolved against.
    pub base_dir: PathBuf,
    /// File name used in messages.
    pub origin: String,
}

/// Read, override, parse and validate a scene file.
///
/// # Errors
/// A [`SceneError`] naming the file, line and key.
pub fn load(path: &Path, overrides: &[(String, String)]) -> Result<LoadedScene, SceneError> {
    let origin = path.display().to_string();
    let err = |message: String| SceneError { file: origin.clone(), line: None, key: "(file)".into(), message };
    let bytes = crate::input::read_capped(path, crate::input::SCENE_CAP, "a scene file").map_err(err)?;
    let text = String::from_utf8(bytes).map_err(|e| {
        err(format!("not a scene file: byte {} is not UTF-8 text (scene files are TOML text)", e.utf8_error().valid_up_to()))
    })?;
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    from_str(&text, &origin, base_dir, overrides)
}

/// Parse a scene from text. `origin` names it in errors.
///
/// # Errors
/// A [`SceneError`] naming the origin, line and key.
pub fn from_str(text: &str, origin: &str, base_dir: PathBuf, overrides: &[(String, String)]) -> Result<LoadedScene, SceneError> {
    let mut table: toml::Table = toml::from_str(text).map_err(|e| SceneError {
        file: origin.to_string(),
        line: e.span().map(|s| line_of_offset(text, s.start)),
        key: "(syntax)".into(),
        message: e.message().trim().to_string(),
    })?;
    normalise_faces(&mut table);
    let mut overridden = Vec::new();
    for (k, v) in overrides {
        apply_override(&mut table, k, v)?;
        overridden.push(k.clone());
    }
    normalise_faces(&mut table);
    let locate = |key: &str| -> (String, Option<usize>) {
        if overridden.iter().any(|o| key == o || key.starts_with(&format!("{o}."))) {
            ("--set".to_string(), None)
        } else {
            (origin.to_string(), line_of_key(text, key))
        }
    };
    let fail = |(key, message): (String, String)| {
        let (file, line) = locate(&key);
        SceneError { file, line, key, message }
    };
    // Obstacles are an internally tagged enum, through which serde cannot say which field is
    // wrong: check their fields first so that errors name e.g. obstacles.0.radius.
    check_obstacles(&table).map_err(fail)?;
    let de = toml::Value::Table(table.clone());
    let scene: Scene =
        serde_path_to_error::deserialize(de).map_err(|e| fail(serde_error(&table, &e.path().to_string(), &e.inner().to_string())))?;
    let derived = validate(&scene).map_err(fail)?;
    check_files(&scene, &base_dir).map_err(fail)?;
    Ok(LoadedScene { scene, derived, base_dir, origin: origin.to_string() })
}

/// Key and message of a serde error at `path` (serde_path_to_error's `a.b[0].c` form), in the
/// scene `table` that was deserialised.
fn serde_error(table: &toml::Table, path: &str, msg: &str) -> (String, String) {
    let mut key = if path == "." { String::new() } else { path.replace('[', ".").replace(']', "") };
    let message = explain(msg);
    // "missing field "x"": name the missing key itself.
    if let Some(rest) = message.strip_prefix("missing field \"") {
        if let Some(field) = rest.split('"').next() {
            if !key.is_empty() {
                key.push('.');
            }
            key.push_str(field);
            let message = match key_doc(&key) {
                Some(d) if d.ty == "table" => format!("missing: add a [{key}] table"),
                Some(d) => format!("missing: give {} ({})", d.ty, d.doc),
                None => "missing: this key is required".into(),
            };
            return (key, message);
        }
    }
    let message = type_error(&key, message, value_at(table, &key));
    (key, message)
}

/// The documentation of a dotted key (array indices match `N`).
#[must_use]
pub fn key_doc(key: &str) -> Option<&'static KeyDoc> {
    let pattern: Vec<&str> = key.split('.').map(|p| if p.parse::<usize>().is_ok() { "N" } else { p }).collect();
    let pattern = pattern.join(".");
    KEYS.iter().find(|k| k.key == pattern)
}

/// The value at a dotted key of a scene table, if present.
fn value_at<'a>(table: &'a toml::Table, key: &str) -> Option<&'a toml::Value> {
    let mut parts = key.split('.');
    let mut cur = table.get(parts.next()?)?;
    for p in parts {
        cur = match cur {
            toml::Value::Table(t) => t.get(p)?,
            toml::Value::Array(a) => a.get(p.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// Restate serde's "invalid type/value" messages in scene terms: what the key takes (from
/// [`KEYS`]) and what was given.
fn type_error(key: &str, message: String, value: Option<&toml::Value>) -> String {
    if !(message.starts_with("invalid type") || message.starts_with("invalid value")) {
        return message;
    }
    let Some(doc) = key_doc(key) else {
        return message;
    };
    let ty = doc.ty;
    match value {
        Some(v) => format!("expected {ty}, got {v}"),
        None => format!("{message}; expected {ty}"),
    }
}

/// Make serde's messages say what is valid in scene terms: one line, no Rust type names.
fn explain(msg: &str) -> String {
    // toml appends the path ("\nin `fluid.tau`"); the error names the key already.
    let first: Vec<&str> = msg.trim().lines().take_while(|l| !l.starts_with("in `") && !l.starts_with("in \"")).collect();
    let mut m = first.join(" ").replace('`', "\"");
    for (rust, scene) in [
        ("expected f32", "expected a number"),
        ("expected f64", "expected a number"),
        ("expected u64", "expected a whole number >= 0"),
        ("expected usize", "expected a whole number >= 0"),
        ("expected a sequence", "expected an array such as [1, 2]"),
        ("expected struct ", "expected a table "),
    ] {
        m = m.replace(rust, scene);
    }
    m
}

/// Faces may be written as a bare string: `x_min = "wall"`. Turn those into tables.
fn normalise_faces(table: &mut toml::Table) {
    if let Some(toml::Value::Table(b)) = table.get_mut("boundaries") {
        for (_, v) in b.iter_mut() {
            if let toml::Value::String(s) = v {
                let mut t = toml::Table::new();
                t.insert("type".into(), toml::Value::String(s.clone()));
                *v = toml::Value::Table(t);
            }
        }
    }
}

fn line_of_offset(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

/// 1-based line of a dotted key in a TOML text (array elements by index), if present.
/// Falls back to the deepest part of the key that exists.
fn line_of_key(text: &str, key: &str) -> Option<usize> {
    use toml_edit::{Item, Value};
    let doc = toml_edit::Document::parse(text).ok()?;
    let mut table: &dyn toml_edit::TableLike = doc.as_table();
    let mut best = None;
    let parts: Vec<&str> = key.split('.').filter(|p| !p.is_empty()).collect();
    let mut i = 0;
    while i < parts.len() {
        let Some((k, v)) = table.get_key_value(parts[i]) else {
            break;
        };
        best = k.span().or_else(|| v.span()).or(best);
        i += 1;
        match v {
            Item::Table(t) => table = t,
            Item::Value(Value::InlineTable(t)) => table = t,
            Item::ArrayOfTables(a) => {
                let Some(idx) = parts.get(i).and_then(|p| p.parse::<usize>().ok()) else {
                    break;
                };
                let Some(t) = a.get(idx) else { break };
                best = t.span().or(best);
                table = t;
                i += 1;
            }
            _ => break,
        }
    }
    best.map(|s| line_of_offset(text, s.start))
}
