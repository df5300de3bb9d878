//! The voxelised domain: grid size, one flag byte per cell and the small tables that flags
//! refer to (moving-wall velocities, inlets, outlets, obstacle names). Built from a scene.
//!
//! Flag byte: bits 0-2 kind ([`kind`]), bit 3 [`NEAR`] (the cell needs the boundary path),
//! bits 4-7 an id into the table of its kind (obstacle ids start at 1; 0 = domain wall).

use crate::lattice::{Lat, Lattice};
use crate::scene::{self, Boundaries, FaceKind, InitialKind, LoadedScene, Profile, SceneError};
use rayon::prelude::*;

/// Cell kinds (low three bits of a flag).
pub mod kind {
    /// Fluid.
    pub const FLUID: u8 = 0;
    /// Resting solid (bounce-back).
    pub const SOLID: u8 = 1;
    /// Moving solid wall.
    pub const MOVING: u8 = 2;
    /// Velocity inlet (equilibrium boundary).
    pub const INLET: u8 = 3;
    /// Density outlet (equilibrium boundary).
    pub const OUTLET: u8 = 4;
    /// Fluid in the absorbing layer in front of an inlet or outlet; the id says which: bit 3
    /// set for inlet `id & 7`, clear for outlet `id & 7`.
    pub const SPONGE: u8 = 5;
    /// Free-slip wall (solid); the id is the axis of its normal. See [`super::slip_source`].
    pub const SLIP: u8 = 6;
}

/// Strength of an absorbing layer next to its face: the relaxation towards the target state per
/// step. It falls off quadratically over the layer, so that the layer itself reflects little.
pub const SPONGE_STRENGTH: f32 = 0.2;

/// Relaxation strength of an absorbing layer of `width` cells at `d` cells (1..=width) from its
/// face.
#[inline(always)]
#[must_use]
pub fn sponge_strength(d: usize, width: usize) -> f32 {
    if d == 0 || d > width {
        return 0.0;
    }
    let s = (width + 1 - d) as f32 / width as f32;
    SPONGE_STRENGTH * s * s
}

/// Flag bit: the cell is not plain fluid or has a solid neighbour.
pub const NEAR: u8 = 8;
pub use crate::scene::MAX_IDS;

/// Whether a flag marks an obstacle cell (solid with an obstacle id, not a boundary layer).
#[must_use]
pub fn is_obstacle(flag: u8) -> bool {
    kind_of(flag) == kind::SOLID && id_of(flag) > 0
}

/// Kind of a flag.
#[inline(always)]
#[must_use]
pub fn kind_of(flag: u8) -> u8 {
    flag & 7
}
/// Id of a flag.
#[inline(always)]
#[must_use]
pub fn id_of(flag: u8) -> usize {
    usize::from(flag >> 4)
}
/// Whether the cell is skipped by the solver (resting, moving or free-slip wall).
#[inline(always)]
#[must_use]
pub fn is_solid(flag: u8) -> bool {
    let k = flag & 7;
    k == kind::SOLID || k == kind::MOVING || k == kind::SLIP
}

/// A free-slip wall reflects specularly, half-way between the wall cell and the fluid: the DDF
/// that enters cell `n` along `c_i` from the wall cell `n - c_i` (flag `wall`, normal axis
/// `a`) left the cell `x_s = n - c_i^t` (`c_i` without its `a` component) one step earlier
/// along the mirror image `c_m` of `c_i` (its `a` component negated), towards the wall cell
/// `b = x_s + c_m = n - c_i^a e_a` next to `n`. Returns `(x_s, m, b)`, or None where the rule
/// does not apply and the DDF bounces back instead: the wall is no free-slip wall, is struck
/// head-on (`c_i^t = 0`, where reflection and bounce-back agree), `x_s` is solid (a corner: two
/// reflections make a bounce-back) or `b` is not the same wall. `nbr[k]` is the neighbour of
/// `n` along `c_k`.
///
/// Where it applies, the value sits in the slot `x_s` stored its outgoing DDF `m` to, which
/// belongs to the wall cell `b` in the step that reads it, so no fluid cell writes it
/// meanwhile, and the link of `x_s` that would bounce it back reflects too (from `n`): every
/// slot still has one reader, as in-place streaming needs.
#[inline(always)]
#[must_use]
pub fn slip_source<L: Lat>(i: usize, wall: u8, nbr: &[usize; crate::lattice::MAX_Q], flags: &[u8]) -> Option<(usize, usize, usize)> {
    let a = id_of(wall);
    let c = L::C[i];
    if kind_of(wall) != kind::SLIP || a > 2 || c[a] == 0 {
        return None;
    }
    let mut cb = [0i32; 3];
    cb[a] = -c[a];
    let b = nbr[direction::<L>(cb)?];
    if flags[b] & !NEAR != wall & !NEAR {
        return None;
    }
    let mut ct = [-c[0], -c[1], -c[2]];
    ct[a] = 0;
    if ct == [0; 3] {
        return None;
    }
    let xs = nbr[direction::<L>(ct)?];
    if is_solid(flags[xs]) {
        return None;
    }
    let mut cm = c;
    cm[a] = -c[a];
    Some((xs, direction::<L>(cm)?, b))
}

/// Index of the lattice velocity `c` in `L`, if the set has it.
#[inline(always)]
#[must_use]
pub fn direction<L: Lat>(c: [i32; 3]) -> Option<usize> {
    L::C.iter().position(|&k| k == c)
}
/// Make a flag.
#[must_use]
pub fn make_flag(k: u8, id: usize) -> u8 {
    k | ((id as u8) << 4)
}

/// A velocity inlet face.
#[derive(Clone, Debug, PartialEq)]
pub struct Inlet {
    /// Axis of the face normal.
    pub axis: usize,
    /// +1 if the inward normal points to +axis (a min face), else -1.
    pub inward: i32,
    /// Velocity (centre value for a parabolic profile).
    pub velocity: [f32; 3],
    /// Profile.
    pub profile: Profile,
    /// For each axis: first and last open cell of the face (for the parabolic profile).
    pub open: [(usize, usize); 3],
    /// Cells of the absorbing layer in front of the face (0: none).
    pub sponge: usize,
    /// The face's layer on its axis (0 or n - 1).
    pub layer: usize,
}

impl Inlet {
    /// Velocity at a cell of the face.
    #[must_use]
    pub fn velocity_at(&self, p: [usize; 3], dims: usize) -> [f32; 3] {
        match self.profile {
            Profile::Uniform => self.velocity,
            Profile::Parabolic => {
                let mut s = 1.0f32;
                for a in 0..dims {
                    if a == self.axis {
                        continue;
                    }
                    let (lo, hi) = self.open[a];
                    let len = (hi - lo + 1) as f32;
                    let t = (p[a] as f32 - lo as f32 + 0.5) / len;
                    s *= (4.0 * t * (1.0 - t)).max(0.0);
                }
                [self.velocity[0] * s, self.velocity[1] * s, self.velocity[2] * s]
            }
        }
    }
}

/// A density outlet face.
#[derive(Clone, Debug, PartialEq)]
pub struct Outlet {
    /// Axis of the face normal.
    pub axis: usize,
    /// +1 if the inward normal points to +axis, else -1.
    pub inward: i32,
    /// Density.
    pub density: f32,
    /// Cells of the absorbing layer in front of the face (0: none).
    pub sponge: usize,
    /// The face's layer on its axis (0 or n - 1).
    pub layer: usize,
    /// The inlet on the opposite face, whose velocity the absorbing layer relaxes towards
    /// (none: the cell's own velocity).
    pub inflow: Option<usize>,
}

/// The voxelised domain.
#[derive(Clone, Debug)]
pub struct Domain {
    /// Velocity set.
    pub lattice: Lattice,
    /// Cells along x, y, z (z = 1 in 2D).
    pub n: [usize; 3],
    /// One flag per cell, index `x + nx * (y + ny * z)`.
    pub flags: Vec<u8>,
    /// Moving-wall velocities by id.
    pub walls: Vec<[f32; 3]>,
    /// Inlets by id.
    pub inlets: Vec<Inlet>,
    /// Outlets by id.
    pub outlets: Vec<Outlet>,
    /// Obstacle names; obstacle id `k` is `obstacles[k - 1]`.
    pub obstacles: Vec<String>,
    /// Exact shapes of the obstacles with interpolated walls (same order as `obstacles`; None:
    /// a staircase of voxels). Empty where a solver keeps every wall half-way.
    pub surfaces: Vec<Option<crate::scene::surface::Surface>>,
    /// Where this grid's cell (0, 0, 0) lies in the scene's coordinates (the surfaces'): zero,
    /// except for one slab of a multi-GPU run.
    pub surfaces_at: [f64; 3],
    /// Reference density: the scene's `initial.density` (1 for [`Domain::periodic`]), the
    /// centre of the band a sane state's density stays in ([`crate::Stats::sanity`]).
    pub rho0: f32,
}

impl Domain {
    /// Number of cells.
    #[must_use]
    pub fn cells(&self) -> usize {
        self.n[0] * self.n[1] * self.n[2]
    }
    /// Linear index.
    #[inline(always)]
    #[must_use]
    pub fn index(&self, x: usize, y: usize, z: usize) -> usize {
        x + self.n[0] * (y + self.n[1] * z)
    }
    /// Coordinates of a linear index.
    #[inline(always)]
    #[must_use]
    pub fn coords(&self, n: usize) -> [usize; 3] {
        let x = n % self.n[0];
        let r = n / self.n[0];
        [x, r % self.n[1], r / self.n[1]]
    }
    /// Neighbour of cell `p` along `c`, with periodic wrap on every axis.
    #[inline(always)]
    #[must_use]
    pub fn neighbour(&self, p: [usize; 3], c: [i32; 3]) -> usize {
        let w = |v: usize, d: i32, n: usize| -> usize {
            let s = v as i64 + i64::from(d);
            s.rem_euclid(n as i64) as usize
        };
        self.index(w(p[0], c[0], self.n[0]), w(p[1], c[1], self.n[1]), w(p[2], c[2], self.n[2]))
    }
    /// Number of fluid (non-solid) cells.
    #[must_use]
    pub fn fluid_cells(&self) -> usize {
        self.flags.iter().filter(|&&f| !is_solid(f)).count()
    }

    /// An empty box of the given size: every face periodic.
    #[must_use]
    pub fn periodic(lattice: Lattice, n: [usize; 3]) -> Domain {
        let mut d = Domain {
            lattice,
            n,
            flags: vec![0; n[0] * n[1] * n[2]],
            walls: vec![[0.0; 3]],
            inlets: Vec::new(),
            outlets: Vec::new(),
            obstacles: Vec::new(),
            surfaces: Vec::new(),
            surfaces_at: [0.0; 3],
            rho0: 1.0,
        };
        d.mark_near();
        d
    }

    /// Voxelise a loaded scene.
    ///
    /// # Errors
    /// Problems with obstacles (unreadable STL) or too many walls.
    pub fn from_scene(ls: &LoadedScene) -> Result<Domain, SceneError> {
        let s = &ls.scene;
        let n = ls.derived.size;
        let dims = ls.derived.lattice.dims();
        let mut d = Domain::periodic(ls.derived.lattice, n);
        d.rho0 = s.initial.density;
        d.walls.clear();
        d.walls.push([0.0; 3]); // id 0: resting
        let faces = s.boundaries.faces();
        // Open (non-wall) extent of each axis, for parabolic profiles.
        let mut open = [(0usize, 0usize); 3];
        for a in 0..3 {
            let wall = |f: &scene::Face| matches!(f.kind, FaceKind::Wall | FaceKind::MovingWall | FaceKind::SlipWall);
            let lo = usize::from(wall(faces[2 * a]) && a < dims);
            let hi_wall = wall(faces[2 * a + 1]) && a < dims;
            open[a] = (lo, n[a] - 1 - usize::from(hi_wall));
        }
        // Paint order: inlets/outlets, moving walls, free-slip walls, then resting walls (they
        // win at edges).
        for pass in 0..4 {
            for (fi, face) in faces.iter().enumerate() {
                let axis = fi / 2;
                if axis >= dims {
                    continue;
                }
                let at_max = fi % 2 == 1;
                let inward = if at_max { -1 } else { 1 };
                let flag = match (pass, face.kind) {
                    (0, FaceKind::Inlet) => {
                        let (sponge, layer) = (face.sponge as usize, if at_max { n[axis] - 1 } else { 0 });
                        d.inlets.push(Inlet { axis, inward, velocity: face.velocity.0, profile: face.profile, open, sponge, layer });
                        make_flag(kind::INLET, d.inlets.len() - 1)
                    }
                    (0, FaceKind::Outlet) => {
                        let (sponge, layer) = (face.sponge as usize, if at_max { n[axis] - 1 } else { 0 });
                        d.outlets.push(Outlet { axis, inward, density: face.density, sponge, layer, inflow: None });
                        make_flag(kind::OUTLET, d.outlets.len() - 1)
                    }
                    (1, FaceKind::MovingWall) => {
                        d.walls.push(face.velocity.0);
                        make_flag(kind::MOVING, d.walls.len() - 1)
                    }
                    (2, FaceKind::SlipWall) => make_flag(kind::SLIP, axis),
                    (3, FaceKind::Wall) => make_flag(kind::SOLID, 0),
                    _ => continue,
                };
                if d.walls.len() > MAX_IDS + 1 || d.inlets.len() > MAX_IDS || d.outlets.len() > MAX_IDS {
                    return Err(SceneError {
                        file: ls.origin.clone(),
                        line: None,
                        key: format!("boundaries.{}", Boundaries::NAMES[fi]),
                        message: "too many faces of one kind".into(),
                    });
                }
                let layer = if at_max { n[axis] - 1 } else { 0 };
                // The face's layer only: the two other axes, in order.
                let (a1, a2) = ((axis + 1) % 3, (axis + 2) % 3);
                for v in 0..n[a2] {
                    for u in 0..n[a1] {
                        let mut p = [0usize; 3];
                        p[axis] = layer;
                        p[a1] = u;
                        p[a2] = v;
                        let i = d.index(p[0], p[1], p[2]);
                        d.flags[i] = flag;
                    }
                }
            }
        }
        for (k, o) in s.obstacles.iter().enumerate() {
            let mask = scene::voxel::voxelise(o, n, dims, &ls.base_dir).map_err(|message| SceneError {
                file: ls.origin.clone(),
                line: None,
                key: format!("obstacles.{k}"),
                message,
            })?;
            let flag = make_flag(kind::SOLID, k + 1);
            d.flags.par_iter_mut().zip(mask.par_iter()).for_each(|(f, &m)| {
                if m {
                    *f = flag;
                }
            });
            d.obstacles.push(o.display_name(k));
            // Compressed subgrids and LBM-Ghost keep walls half-way; adaptive blocks
            // interpolate them on their finest level (amr/lbm/walls.rs), except a box's: the
            // blocks scale a box so that it keeps its voxels on every level (min to max + 1
            // cells), which its half-way walls bound exactly.
            let dense = !s.compression.enabled && s.solver.scheme != crate::schemes::Scheme::Ghost;
            let voxel_box = s.amr.enabled && matches!(o, crate::scene::Obstacle::Box { .. });
            d.surfaces.push(match s.solver.walls {
                crate::scene::WallMode::Interpolated if dense && !voxel_box => {
                    Some(crate::scene::surface::Surface::of(o, dims, &ls.base_dir).map_err(|message| SceneError {
                        file: ls.origin.clone(),
                        line: None,
                        key: format!("obstacles.{k}"),
                        message,
                    })?)
                }
                _ => None,
            });
        }
        for o in &mut d.outlets {
            o.inflow = d.inlets.iter().position(|b| b.axis == o.axis && b.inward == -o.inward);
        }
        d.paint_sponges();
        if !d.flags.par_iter().any(|&f| !is_solid(f)) {
            return Err(SceneError {
                file: ls.origin.clone(),
                line: None,
                key: if s.obstacles.is_empty() { "domain.size".into() } else { "obstacles".into() },
                message:
                    "the walls and obstacles fill the whole domain: no fluid cell is left; make the obstacles smaller or the domain larger"
                        .into(),
            });
        }
        d.mark_near();
        Ok(d)
    }

    /// Mark the fluid cells of the absorbing layers in front of inlets and outlets
    /// ([`kind::SPONGE`]).
    fn paint_sponges(&mut self) {
        let layers: Vec<(usize, usize, usize, u8)> = self
            .outlets
            .iter()
            .enumerate()
            .map(|(k, o)| (o.axis, o.layer, o.sponge, make_flag(kind::SPONGE, k)))
            .chain(self.inlets.iter().enumerate().map(|(k, b)| (b.axis, b.layer, b.sponge, make_flag(kind::SPONGE, 8 + k))))
            .filter(|l| l.2 > 0)
            .collect();
        if layers.is_empty() {
            return;
        }
        let n = self.n;
        let plane = n[0] * n[1];
        self.flags.par_chunks_mut(plane).enumerate().for_each(|(z, fl)| {
            for y in 0..n[1] {
                for x in 0..n[0] {
                    let f = &mut fl[x + n[0] * y];
                    if kind_of(*f) != kind::FLUID {
                        continue;
                    }
                    let p = [x, y, z];
                    for &(axis, layer, width, flag) in &layers {
                        if (1..=width).contains(&p[axis].abs_diff(layer)) {
                            *f = flag;
                        }
                    }
                }
            }
        });
    }

    /// Recompute the [`NEAR`] bits after flags changed.
    pub fn mark_near(&mut self) {
        // Plane by plane in parallel; cells off the domain's faces reach their neighbours by
        // fixed index offsets, the others through the periodic wrap of `near_of`.
        let n = self.n;
        let plane = n[0] * n[1];
        let offsets: Vec<isize> = self
            .lattice
            .velocities()
            .iter()
            .skip(1)
            .map(|c| c[0] as isize + n[0] as isize * (c[1] as isize + n[1] as isize * c[2] as isize))
            .collect();
        let mut out = vec![0u8; self.flags.len()];
        let this = &*self;
        let inner = |v: usize, a: usize| v > 0 && v + 1 < n[a];
        out.par_chunks_mut(plane).enumerate().for_each(|(z, o)| {
            for y in 0..n[1] {
                for x in 0..n[0] {
                    let i = x + n[0] * (y + n[1] * z);
                    let f = this.flags[i];
                    let near = if inner(x, 0) && inner(y, 1) && (this.lattice.dims() == 2 || inner(z, 2)) {
                        kind_of(f) != kind::FLUID || offsets.iter().any(|&d| is_solid(this.flags[i.wrapping_add_signed(d)]))
                    } else {
                        this.near_of(i)
                    };
                    o[x + n[0] * y] = (f & !NEAR) | if near { NEAR } else { 0 };
                }
            }
        });
        self.flags = out;
    }

    /// Recompute the [`NEAR`] bits of some cells (after the flags around them changed).
    pub fn mark_near_cells(&mut self, cells: &[usize]) {
        let near: Vec<bool> = cells.iter().map(|&i| self.near_of(i)).collect();
        for (&i, nb) in cells.iter().zip(near) {
            self.flags[i] = (self.flags[i] & !NEAR) | if nb { NEAR } else { 0 };
        }
    }

    /// The rule of the [`NEAR`] bit: every cell that is not plain fluid, and fluid cells with a
    /// solid neighbour along a lattice velocity.
    fn near_of(&self, i: usize) -> bool {
        if kind_of(self.flags[i]) != kind::FLUID {
            return true;
        }
        let p = self.coords(i);
        self.lattice.velocities().iter().skip(1).any(|&ci| is_solid(self.flags[self.neighbour(p, ci)]))
    }
}

/// Initial density and velocity at a cell of a scene.
#[must_use]
pub fn initial_state(ls: &LoadedScene, p: [usize; 3]) -> (f32, [f32; 3]) {
    let init = &ls.scene.initial;
    let n = ls.derived.size;
    match init.kind {
        InitialKind::Uniform => (init.density, init.velocity.0),
        InitialKind::TaylorGreen => {
            // u = U sin(kx x) cos(ky y), v = -U (kx/ky) cos(kx x) sin(ky y); pressure from the
            // analytic solution: p = rho0 U^2/4 (cos 2kx x + (kx/ky)^2 cos 2ky y).
            let u0 = init.velocity.0[0];
            let kx = 2.0 * std::f32::consts::PI / n[0] as f32;
            let ky = 2.0 * std::f32::consts::PI / n[1] as f32;
            let (x, y) = (p[0] as f32, p[1] as f32);
            let ux = u0 * (kx * x).sin() * (ky * y).cos();
            let uy = -u0 * (kx / ky) * (kx * x).cos() * (ky * y).sin();
            let pr = init.density * u0 * u0 / 4.0 * ((2.0 * kx * x).cos() + (kx / ky) * (kx / ky) * (2.0 * ky * y).cos());
            (init.density + 3.0 * pr, [ux, uy, 0.0])
        }
        InitialKind::TaylorGreen3d => {
            // u = U sin(kx x) cos(ky y) cos(kz z), v = -U (kx/ky) cos(kx x) sin(ky y) cos(kz z),
            // w = 0 (divergence free). The pressure solves the Poisson equation
            // lap p = -rho0 div(u . grad u):
            // p = rho0 U^2 kx^2 / 8 [cos 2kx x / kx^2 + cos 2ky y / ky^2
            //     + cos 2kx x cos 2kz z / (kx^2 + kz^2) + cos 2ky y cos 2kz z / (ky^2 + kz^2)],
            // which for a cube is the classic rho0 U^2/16 (cos 2x + cos 2y)(cos 2z + 2).
            let u0 = init.velocity.0[0];
            let tau = 2.0 * std::f32::consts::PI;
            let (kx, ky, kz) = (tau / n[0] as f32, tau / n[1] as f32, tau / n[2] as f32);
            let (x, y, z) = (p[0] as f32, p[1] as f32, p[2] as f32);
            let (sx, cx) = (kx * x).sin_cos();
            let (sy, cy) = (ky * y).sin_cos();
            let cz = (kz * z).cos();
            let ux = u0 * sx * cy * cz;
            let uy = -u0 * (kx / ky) * cx * sy * cz;
            let (c2x, c2y, c2z) = ((2.0 * kx * x).cos(), (2.0 * ky * y).cos(), (2.0 * kz * z).cos());
            let (kx2, ky2, kz2) = (kx * kx, ky * ky, kz * kz);
            let pr = init.density * u0 * u0 * kx2 / 8.0 * (c2x / kx2 + c2y / ky2 + c2x * c2z / (kx2 + kz2) + c2y * c2z / (ky2 + kz2));
            (init.density + 3.0 * pr, [ux, uy, 0.0])
        }
    }
}
