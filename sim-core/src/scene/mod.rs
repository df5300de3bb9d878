//! Scene files: a documented TOML format (see `scenes/README.md`), parsed into a typed [`Scene`],
//! with `--set KEY=VALUE` overrides and errors that name file, line, key and what is valid.

mod keys;
pub mod voxel;

pub use keys::{KeyDoc, KEYS};

use crate::collision::Collision;
use crate::lattice::Lattice;
use crate::precision::Precision;
use crate::schemes::Scheme;
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
}

fn one() -> f32 {
    1.0
}

impl Default for Face {
    /// A periodic face; the other fields take their documented defaults (density 1).
    fn default() -> Self {
        Face { kind: FaceKind::default(), velocity: Vec3::default(), density: one(), profile: Profile::default() }
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

/// Bytes for people: "1.50 GB", "12.0 MB", "512 B" (powers of 1000).
#[must_use]
pub fn human_bytes(b: u64) -> String {
    let v = b as f64;
    if v >= 1e9 {
        format!("{:.2} GB", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2} MB", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} KB", v / 1e3)
    } else {
        format!("{b} B")
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
    let text = std::fs::read_to_string(path).map_err(|e| SceneError {
        file: origin.clone(),
        line: None,
        key: "(file)".into(),
        message: format!("cannot read the scene file: {e}"),
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

/// Fields of each obstacle shape: (shape, required, optional).
const SHAPE_FIELDS: [(&str, &[&str], &[&str]); 4] = [
    ("box", &["min", "max"], &["name"]),
    ("sphere", &["center", "radius"], &["name"]),
    ("cylinder", &["center", "radius"], &["name", "axis", "length"]),
    ("stl", &["file", "center", "size"], &["name"]),
];

/// Check the fields of every `[[obstacles]]` entry. Errors are (key, message).
fn check_obstacles(table: &toml::Table) -> Result<(), (String, String)> {
    let Some(obs) = table.get("obstacles") else {
        return Ok(());
    };
    let toml::Value::Array(arr) = obs else {
        return Err(("obstacles".into(), "must be an array of tables: start each obstacle with a [[obstacles]] line".into()));
    };
    let shapes: Vec<String> = SHAPE_FIELDS.iter().map(|(s, _, _)| format!("\"{s}\"")).collect();
    let shapes = shapes.join(", ");
    for (i, o) in arr.iter().enumerate() {
        let key = |f: &str| format!("obstacles.{i}.{f}");
        let toml::Value::Table(t) = o else {
            return Err((format!("obstacles.{i}"), "each obstacle is a table: start it with a [[obstacles]] line".into()));
        };
        let shape = match t.get("shape") {
            None => return Err((key("shape"), format!("missing: every obstacle needs shape = one of {shapes}"))),
            Some(toml::Value::String(s)) => s.as_str(),
            Some(v) => return Err((key("shape"), format!("expected one of {shapes}, got {v}"))),
        };
        let Some((_, required, optional)) = SHAPE_FIELDS.iter().find(|(s, _, _)| *s == shape) else {
            return Err((key("shape"), format!("unknown shape \"{shape}\", expected one of {shapes}")));
        };
        for (k, v) in t {
            if k == "shape" {
                continue;
            }
            if !required.contains(&k.as_str()) && !optional.contains(&k.as_str()) {
                let mut valid = vec!["shape"];
                valid.extend_from_slice(required);
                valid.extend_from_slice(optional);
                let mut msg = format!("unknown field \"{k}\" for a {shape}; a {shape} has: {}", valid.join(", "));
                let owners: Vec<&str> = SHAPE_FIELDS
                    .iter()
                    .filter(|(_, r, o)| r.contains(&k.as_str()) || o.contains(&k.as_str()))
                    .map(|(s, _, _)| *s)
                    .collect();
                if !owners.is_empty() {
                    msg.push_str(&format!(" (\"{k}\" belongs to: {})", owners.join(", ")));
                }
                return Err((key(k), msg));
            }
            let v = v.clone();
            let checked = match k.as_str() {
                "name" => v.try_into::<String>().map(|_| ()),
                "file" => v.try_into::<PathBuf>().map(|_| ()),
                "center" | "min" | "max" => v.try_into::<Vec3>().map(|_| ()),
                "axis" => v.try_into::<Axis>().map(|_| ()),
                _ => v.try_into::<f32>().map(|_| ()),
            };
            checked.map_err(|e| (key(k), type_error(&key(k), explain(&e.to_string()), t.get(k))))?;
        }
        for r in *required {
            if !t.contains_key(*r) {
                return Err((key(r), format!("missing: a {shape} needs {}", required.join(", "))));
            }
        }
    }
    Ok(())
}

/// Files the scene refers to must exist. Errors are (key, message).
fn check_files(s: &Scene, base_dir: &Path) -> Result<(), (String, String)> {
    for (i, o) in s.obstacles.iter().enumerate() {
        if let Obstacle::Stl { file, .. } = o {
            let path = base_dir.join(file);
            if let Err(e) = std::fs::metadata(&path) {
                return Err((
                    format!("obstacles.{i}.file"),
                    format!("cannot open STL file {} ({e}); a relative path is taken from the scene file's folder", path.display()),
                ));
            }
        }
    }
    Ok(())
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

/// Apply one `--set KEY=VALUE`.
///
/// # Errors
/// Unknown keys list the valid ones; out-of-range array indices say how many there are.
pub fn apply_override(table: &mut toml::Table, key: &str, value: &str) -> Result<(), SceneError> {
    let err = |message: String| SceneError { file: "--set".into(), line: None, key: key.into(), message };
    let parts: Vec<&str> = key.split('.').collect();
    let pattern: Vec<String> = parts.iter().map(|p| if p.parse::<usize>().is_ok() { "N".to_string() } else { (*p).to_string() }).collect();
    let pattern = pattern.join(".");
    if !KEYS.iter().any(|k| k.key == pattern) {
        let valid: Vec<&str> = KEYS.iter().map(|k| k.key).collect();
        let hint = KEYS
            .iter()
            .map(|k| (edit_distance(k.key, &pattern), k.key))
            .min()
            .filter(|(d, _)| *d <= 3)
            .map(|(_, k)| format!("did you mean {k}? "))
            .unwrap_or_default();
        return Err(err(format!("unknown key; {hint}valid keys are: {} (N = obstacle index from 0)", valid.join(", "))));
    }
    let parsed: toml::Value = match toml::from_str::<toml::Table>(&format!("v = {value}")) {
        Ok(mut t) => t.remove("v").unwrap_or(toml::Value::String(value.into())),
        Err(_) => toml::Value::String(value.to_string()),
    };
    let mut cur = table;
    for (depth, p) in parts.iter().enumerate() {
        let last = depth + 1 == parts.len();
        if let Ok(idx) = p.parse::<usize>() {
            // Only obstacles are arrays of tables: walk into element idx.
            return Err(err(format!("internal: unexpected index {idx}")));
        }
        if last {
            cur.insert((*p).to_string(), parsed);
            return Ok(());
        }
        // Next part an index? Then this is the obstacles array.
        if let Some(next) = parts.get(depth + 1) {
            if let Ok(idx) = next.parse::<usize>() {
                let Some(toml::Value::Array(arr)) = cur.get_mut(*p) else {
                    return Err(err(format!("the scene has no \"{p}\" entries to index")));
                };
                let len = arr.len();
                let Some(toml::Value::Table(elem)) = arr.get_mut(idx) else {
                    let one = p.strip_suffix('s').unwrap_or(p);
                    return Err(err(match len {
                        0 => format!("index {idx} is out of range: the scene has no {p}"),
                        1 => format!("index {idx} is out of range: the scene has one {one} (index 0)"),
                        _ => format!("index {idx} is out of range: the scene has {len} {p} (indices 0 to {})", len - 1),
                    }));
                };
                let rest = parts[depth + 2..].join(".");
                if rest.is_empty() {
                    return Err(err("give a field of the element, e.g. obstacles.0.radius".into()));
                }
                return set_in(elem, &rest, parsed).map_err(err);
            }
        }
        let entry = cur.entry((*p).to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::String(s) = entry {
            // A face written as a bare string gets its fields.
            let mut t = toml::Table::new();
            t.insert("type".into(), toml::Value::String(s.clone()));
            *entry = toml::Value::Table(t);
        }
        let toml::Value::Table(t) = entry else {
            return Err(err(format!("\"{p}\" is not a table")));
        };
        cur = t;
    }
    Ok(())
}

/// Levenshtein distance, for "did you mean" hints.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

fn set_in(t: &mut toml::Table, dotted: &str, v: toml::Value) -> Result<(), String> {
    let mut cur = t;
    let parts: Vec<&str> = dotted.split('.').collect();
    for (i, p) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            cur.insert((*p).to_string(), v);
            return Ok(());
        }
        let e = cur.entry((*p).to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(n) = e else {
            return Err(format!("\"{p}\" is not a table"));
        };
        cur = n;
    }
    Ok(())
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

/// Check a deserialised scene and derive its parameters. Errors are (key, message).
///
/// # Errors
/// The first problem found.
pub fn validate(s: &Scene) -> Result<Derived, (String, String)> {
    let e = |k: &str, m: String| Err((k.to_string(), m));
    let size = &s.domain.size;
    if size.len() != 2 && size.len() != 3 {
        return e("domain.size", format!("give 2 (2D) or 3 (3D) cell counts, got {}", size.len()));
    }
    let lattice = s.domain.lattice.unwrap_or(if size.len() == 2 { Lattice::D2Q9 } else { Lattice::D3Q19 });
    if lattice.dims() != size.len() {
        return e(
            "domain.lattice",
            format!(
                "{lattice} is {}D but domain.size has {} entries; use {}",
                lattice.dims(),
                size.len(),
                if size.len() == 2 { "D2Q9" } else { "D3Q19 or D3Q27" }
            ),
        );
    }
    for (a, &n) in size.iter().enumerate() {
        if n < 3 {
            return e("domain.size", format!("axis {a} has {n} cells; each axis needs at least 3"));
        }
    }
    // Checked: a product that wraps would pass any later test.
    let cells = size.iter().try_fold(1usize, |p, &n| p.checked_mul(n)).filter(|&c| c <= MAX_CELLS);
    if cells.is_none() {
        let shown: Vec<String> = size.iter().map(ToString::to_string).collect();
        return e("domain.size", format!("[{}] is more cells than Esoflow addresses (at most 2^33 = {MAX_CELLS})", shown.join(", ")));
    }
    let mut dims = [1usize; 3];
    dims[..size.len()].copy_from_slice(size);

    if !(s.initial.density > 0.0 && s.initial.density <= 1e6) {
        return e("initial.density", format!("must be a number > 0 (lattice units; 1 is usual), got {}", s.initial.density));
    }
    let faces = s.boundaries.faces();
    let mut warnings = Vec::new();
    // Largest prescribed speed and the key that prescribes it.
    let mut maxv: f32 = 0.0;
    let mut fastest = String::from("fluid");
    let mut faster = |v: f32, key: String| {
        if v > maxv {
            maxv = v;
            fastest = key;
        }
    };
    for (f, face) in faces.iter().enumerate() {
        let name = Boundaries::NAMES[f];
        let axis = f / 2;
        if !face.velocity.0.iter().all(|v| v.is_finite()) {
            return e(&format!("boundaries.{name}.velocity"), format!("must be finite numbers, got {:?}", face.velocity.0));
        }
        if axis >= size.len() && face.kind != FaceKind::Periodic {
            return e(&format!("boundaries.{name}"), "a 2D scene has no z faces; remove this key".into());
        }
        let other = faces[f ^ 1];
        if (face.kind == FaceKind::Periodic) != (other.kind == FaceKind::Periodic) {
            return e(
                &format!("boundaries.{name}"),
                format!("periodic faces come in pairs: {} is {:?} but {} is {:?}", name, face.kind, Boundaries::NAMES[f ^ 1], other.kind),
            );
        }
        let v = face.velocity.0;
        let speed = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
        match face.kind {
            FaceKind::MovingWall => {
                if v[axis] != 0.0 {
                    return e(
                        &format!("boundaries.{name}.velocity"),
                        "a moving wall moves along itself: the velocity component normal to the face must be 0".into(),
                    );
                }
                faster(speed, format!("boundaries.{name}.velocity"));
            }
            FaceKind::Inlet => faster(speed, format!("boundaries.{name}.velocity")),
            FaceKind::Outlet if !(face.density >= 0.5 * s.initial.density && face.density <= 2.0 * s.initial.density) => {
                return e(
                    &format!("boundaries.{name}.density"),
                    format!(
                        "{} is outside what a lattice Boltzmann outlet holds: give a density within a factor 2 of initial.density ({}), i.e. from {} to {}",
                        face.density,
                        s.initial.density,
                        0.5 * s.initial.density,
                        2.0 * s.initial.density
                    ),
                );
            }
            _ => {}
        }
        let kind = format!("{:?}", face.kind);
        if speed != 0.0 && !matches!(face.kind, FaceKind::MovingWall | FaceKind::Inlet) {
            warnings.push(format!(
                "boundaries.{name}.velocity is ignored: only moving_wall and inlet faces use a velocity (this face is {kind})"
            ));
        }
        if face.density != 1.0 && face.kind != FaceKind::Outlet {
            warnings.push(format!("boundaries.{name}.density is ignored: only outlet faces use a density (this face is {kind})"));
        }
        if face.profile != Profile::Uniform && face.kind != FaceKind::Inlet {
            warnings.push(format!("boundaries.{name}.profile is ignored: only inlet faces use a profile (this face is {kind})"));
        }
    }
    if s.initial.kind == InitialKind::TaylorGreen3d && size.len() != 3 {
        return e("initial.kind", "taylor_green_3d needs a 3D domain (three sizes); use \"taylor_green\" in 2D".into());
    }
    let iv = s.initial.velocity.0;
    if !iv.iter().all(|v| v.is_finite()) {
        return e("initial.velocity", format!("must be finite numbers, got {iv:?}"));
    }
    faster((iv[0] * iv[0] + iv[1] * iv[1] + iv[2] * iv[2]).sqrt(), "initial.velocity".into());

    let fl = &s.fluid;
    let given = [fl.tau.is_some(), fl.viscosity.is_some(), fl.reynolds.is_some()].iter().filter(|&&b| b).count();
    if given > 1 {
        return e("fluid", "give only one of tau, viscosity or reynolds".into());
    }
    let tau = if let Some(t) = fl.tau {
        t
    } else if let Some(nu) = fl.viscosity {
        if !(nu > 0.0) {
            return e("fluid.viscosity", format!("must be > 0, got {nu}"));
        }
        3.0 * nu + 0.5
    } else if let Some(re) = fl.reynolds {
        if !(re > 0.0) {
            return e("fluid.reynolds", format!("must be > 0, got {re}"));
        }
        let Some(l) = fl.length else {
            return e("fluid.length", "reynolds needs a reference length (cells)".into());
        };
        let Some(u) = fl.velocity else {
            return e("fluid.velocity", "reynolds needs a reference velocity (lattice units)".into());
        };
        if !(l > 0.0 && u > 0.0) {
            return e("fluid.length", "reference length and velocity must be > 0".into());
        }
        faster(u, "fluid.velocity".into());
        3.0 * (u * l / re) + 0.5
    } else {
        0.6
    };
    let tau_key = if fl.tau.is_some() {
        "fluid.tau"
    } else if fl.viscosity.is_some() {
        "fluid.viscosity"
    } else {
        "fluid.reynolds"
    };
    let gives = if fl.tau.is_some() {
        format!("tau = {tau}")
    } else if fl.viscosity.is_some() {
        format!("gives tau = 3 viscosity + 0.5 = {tau}")
    } else {
        format!("gives viscosity = velocity * length / reynolds = {} and tau = 3 viscosity + 0.5 = {tau}", (tau - 0.5) / 3.0)
    };
    if !(tau > 0.5) {
        return e(tau_key, format!("{gives}, but tau must be > 0.5 (viscosity = (tau - 0.5) / 3 > 0): raise tau or the viscosity, or lower the Reynolds number"));
    }
    if !(tau < 50.0) {
        return e(tau_key, format!("{gives}; keep tau below 50 (viscosity below 16.5)"));
    }
    let mach = maxv * 3.0f32.sqrt();
    if mach > 0.6 {
        return e(&fastest, format!("speed {maxv} is Mach {mach:.2} (Mach = speed * sqrt(3)); LBM needs Mach < 0.3 (speed < 0.17 cells/step) and refuses Mach > 0.6: lower the velocity"));
    }
    if mach > 0.3 {
        warnings.push(format!(
            "{fastest}: Mach number {mach:.2} > 0.3 (speed {maxv}): compressibility errors are large and the run may blow up"
        ));
    }
    if tau < 0.51 && s.solver.collision == Collision::Bgk {
        warnings.push(format!("tau = {tau:.4} is close to 0.5: BGK may blow up; try collision = \"trt\" or \"smagorinsky\""));
    }
    if !(2..=256).contains(&s.solver.ghost_block) {
        return e("solver.ghost_block", format!("must be 2 to 256 cells, got {}", s.solver.ghost_block));
    }
    if !(1..=MAX_STEPS).contains(&s.solver.stats_every) {
        return e("solver.stats_every", format!("must be 1 to 10^12 steps, got {}", s.solver.stats_every));
    }
    if s.solver.steps > MAX_STEPS {
        return e("solver.steps", format!("must be 0 to 10^12 steps, got {}", s.solver.steps));
    }
    if !(s.solver.smagorinsky_cs >= 0.0 && s.solver.smagorinsky_cs <= 1.0) {
        return e("solver.smagorinsky_cs", format!("must be a number from 0 to 1 (0.1 to 0.2 is usual), got {}", s.solver.smagorinsky_cs));
    }
    for (i, o) in s.obstacles.iter().enumerate() {
        validate_obstacle(o, dims, size.len()).map_err(|(f, m)| (format!("obstacles.{i}.{f}"), m))?;
    }
    if s.obstacles.len() > MAX_IDS {
        return e("obstacles", format!("at most {} obstacles, got {}", MAX_IDS, s.obstacles.len()));
    }
    let f = fl.force.0;
    if f.iter().any(|x| !x.is_finite()) {
        return e("fluid.force", "must be finite numbers".into());
    }
    validate_compression(s, lattice).map_err(|(k, m)| (k.to_string(), m))?;
    validate_amr(s, lattice, dims).map_err(|(k, m)| (k.to_string(), m))?;
    Ok(Derived { lattice, size: dims, tau, max_velocity: maxv, warnings })
}

/// Most steps a run or a statistics interval may have.
pub const MAX_STEPS: u64 = 1_000_000_000_000;

/// Most cells a grid may have (indices and memory plans stay far from overflow).
pub const MAX_CELLS: usize = 1 << 33;

/// Check one obstacle's numbers against the grid (`n`: cells per axis, z = 1 in 2D): finite,
/// sizes > 0, a box's min not above its max, and the shape reaching into the domain (cell
/// centres span 0 to n - 1 on each axis). Errors are (field, message).
fn validate_obstacle(o: &Obstacle, n: [usize; 3], dims: usize) -> Result<(), (&'static str, String)> {
    let finite = |k: &'static str, v: &Vec3| -> Result<[f32; 3], (&'static str, String)> {
        if v.0.iter().all(|x| x.is_finite()) {
            Ok(v.0)
        } else {
            Err((k, format!("must be finite numbers, got {:?}", v.0)))
        }
    };
    let positive = |k: &'static str, x: f32| -> Result<f32, (&'static str, String)> {
        if x > 0.0 && x.is_finite() {
            Ok(x)
        } else {
            Err((k, format!("must be a finite number > 0, got {x}")))
        }
    };
    // The shape's bounding box (cells), and the field that places it.
    let (lo, hi, key): ([f32; 3], [f32; 3], &'static str) = match o {
        Obstacle::Box { min, max, .. } => {
            let (a, b) = (finite("min", min)?, finite("max", max)?);
            if let Some(ax) = (0..dims).find(|&ax| a[ax] > b[ax]) {
                return Err((
                    "min",
                    format!("min {a:?} is above max {b:?} on axis {}: min is the lower corner, max the upper", ["x", "y", "z"][ax]),
                ));
            }
            (a, b, "min")
        }
        Obstacle::Sphere { center, radius, .. } => {
            let (c, r) = (finite("center", center)?, positive("radius", *radius)?);
            (c.map(|x| x - r), c.map(|x| x + r), "center")
        }
        Obstacle::Cylinder { center, radius, axis, length, .. } => {
            let (c, r) = (finite("center", center)?, positive("radius", *radius)?);
            let half = match length {
                Some(l) => positive("length", *l)? / 2.0,
                None => f32::INFINITY,
            };
            // In 2D a cylinder is a disc in the x-y plane, whatever its axis.
            let along = if dims == 2 { 2 } else { axis.index() };
            let lo = std::array::from_fn(|a| if a == along { c[a] - half } else { c[a] - r });
            let hi = std::array::from_fn(|a| if a == along { c[a] + half } else { c[a] + r });
            (lo, hi, "center")
        }
        Obstacle::Stl { center, size, .. } => {
            let (c, h) = (finite("center", center)?, positive("size", *size)? / 2.0);
            (c.map(|x| x - h), c.map(|x| x + h), "center")
        }
    };
    if let Some(ax) = (0..dims).find(|&ax| hi[ax] < -0.5 || lo[ax] > n[ax] as f32 - 0.5) {
        return Err((
            key,
            format!(
                "the shape spans {:.1} to {:.1} on axis {}, outside the domain (cell centres 0 to {}): move it inside",
                lo[ax],
                hi[ax],
                ["x", "y", "z"][ax],
                n[ax] - 1
            ),
        ));
    }
    Ok(())
}

/// Check `[amr]`: the settings, and what adaptive blocks run (a grid of whole blocks, FP32,
/// BGK; walls, moving walls, uniform inlets and outlets on the faces).
fn validate_amr(s: &Scene, lattice: Lattice, size: [usize; 3]) -> Result<(), (&'static str, String)> {
    let a = &s.amr;
    if a.max_level > AMR_MAX_LEVEL {
        return Err(("amr.max_level", format!("must be 0 to {AMR_MAX_LEVEL}, got {}", a.max_level)));
    }
    if !(a.threshold > 0.0) || !a.threshold.is_finite() {
        return Err(("amr.threshold", format!("must be a finite number > 0, got {}", a.threshold)));
    }
    if !(a.coarsen > 0.0 && a.coarsen <= 1.0) {
        return Err(("amr.coarsen", format!("must be a number above 0 and at most 1 (1: no hysteresis), got {}", a.coarsen)));
    }
    if !(a.wall_margin >= 0.0) || !a.wall_margin.is_finite() {
        return Err(("amr.wall_margin", format!("must be a finite number >= 0, got {}", a.wall_margin)));
    }
    if let Some(l) = a.near_wall.filter(|&l| l > a.max_level) {
        return Err(("amr.near_wall", format!("level {l} is above amr.max_level = {}", a.max_level)));
    }
    if let Some(l) = a.freeze.iter().find(|&&l| l > a.max_level) {
        return Err(("amr.freeze", format!("level {l} is above amr.max_level = {}", a.max_level)));
    }
    if !a.enabled {
        return Ok(());
    }
    let dims = lattice.dims();
    if s.compression.enabled {
        return Err((
            "amr.enabled",
            "adaptive blocks and compressed subgrids do not run together yet: set one of amr.enabled, compression.enabled to false".into(),
        ));
    }
    if let Some(ax) = (0..dims).find(|&ax| size[ax] % 4 != 0) {
        let fix: Vec<String> = (0..dims).map(|ax| (size[ax].div_ceil(4) * 4).to_string()).collect();
        return Err((
            "domain.size",
            format!(
                "adaptive blocks are 4 cells wide: axis {ax} has {} cells; make every axis a multiple of 4 (e.g. [{}]) or set amr.enabled = false",
                size[ax],
                fix.join(", ")
            ),
        ));
    }
    if s.solver.collision != Collision::Bgk {
        return Err(("solver.collision", format!("adaptive blocks collide with \"bgk\" (tau per level), but solver.collision is \"{}\": set solver.collision = \"bgk\" or amr.enabled = false", s.solver.collision.name())));
    }
    if s.solver.scheme != Scheme::EsotericPull {
        return Err((
            "solver.scheme",
            format!(
                "adaptive blocks stream inside their blocks; solver.scheme must stay \"esoteric_pull\" (the default), not \"{}\"",
                s.solver.scheme.name()
            ),
        ));
    }
    for (fi, f) in s.boundaries.faces().iter().enumerate() {
        if f.kind == FaceKind::Inlet && f.profile == Profile::Parabolic && fi / 2 < dims {
            const KEYS: [&str; 6] = [
                "boundaries.x_min.profile",
                "boundaries.x_max.profile",
                "boundaries.y_min.profile",
                "boundaries.y_max.profile",
                "boundaries.z_min.profile",
                "boundaries.z_max.profile",
            ];
            return Err((KEYS[fi], "adaptive blocks impose uniform inlets only: set profile = \"uniform\" or amr.enabled = false".into()));
        }
    }
    let roots: usize = (0..dims).map(|ax| size[ax] / 4).product();
    if let Some(c) = a.capacity.filter(|&c| c < roots) {
        return Err(("amr.capacity", format!("{c} blocks cannot hold the {roots} root blocks of domain.size; give at least {roots}")));
    }
    Ok(())
}

/// Check `[compression]`; compressed subgrids run only 3D lattices, Esoteric Pull and FP32.
fn validate_compression(s: &Scene, lattice: Lattice) -> Result<(), (&'static str, String)> {
    let c = &s.compression;
    if !(c.tau >= 0.0) || !c.tau.is_finite() {
        return Err(("compression.tau", format!("must be a finite number >= 0, got {}", c.tau)));
    }
    if c.subgrid.len() != 3 {
        return Err(("compression.subgrid", format!("give three cell counts [x, y, z], got {}", c.subgrid.len())));
    }
    if let Some(a) = c.subgrid.iter().position(|&g| g < 3) {
        return Err(("compression.subgrid", format!("axis {a} has {} cells; each axis needs at least 3", c.subgrid[a])));
    }
    if !c.enabled {
        return Ok(());
    }
    if lattice.dims() != 3 {
        return Err(("compression.enabled", format!("compressed subgrids need a 3D lattice (D3Q19 or D3Q27), but this scene is {lattice}: set compression.enabled = false or make the domain 3D")));
    }
    if s.solver.scheme != Scheme::EsotericPull {
        return Err((
            "compression.enabled",
            format!("compressed subgrids run the \"esoteric_pull\" scheme, but solver.scheme is \"{}\": set solver.scheme = \"esoteric_pull\" or compression.enabled = false", s.solver.scheme.name()),
        ));
    }
    if s.solver.precision != Precision::Fp32 {
        return Err((
            "compression.enabled",
            format!("compressed subgrids store \"fp32\", but solver.precision is \"{}\": set solver.precision = \"fp32\" or compression.enabled = false", s.solver.precision),
        ));
    }
    Ok(())
}
