//! Checks of a loaded scene: obstacle fields before deserialisation, referenced files, and the validation that derives its parameters.

use super::{
    explain, type_error, Axis, Boundaries, Derived, FaceKind, InitialKind, Obstacle, Profile, Scene, Vec3, AMR_MAX_LEVEL, MAX_IDS,
};
use crate::collision::Collision;
use crate::lattice::Lattice;
use crate::precision::Precision;
use crate::schemes::Scheme;
use std::path::{Path, PathBuf};

/// Fields of each obstacle shape: (shape, required, optional).
const SHAPE_FIELDS: [(&str, &[&str], &[&str]); 4] = [
    ("box", &["min", "max"], &["name"]),
    ("sphere", &["center", "radius"], &["name"]),
    ("cylinder", &["center", "radius"], &["name", "axis", "length"]),
    ("stl", &["file", "center", "size"], &["name"]),
];

/// Check the fields of every `[[obstacles]]` entry. Errors are (key, message).
pub(super) fn check_obstacles(table: &toml::Table) -> Result<(), (String, String)> {
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
pub(super) fn check_files(s: &Scene, base_dir: &Path) -> Result<(), (String, String)> {
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
    let mut fastest: (f32, String) = (0.0, String::from("fluid"));
    let faster = |f: &mut (f32, String), v: f32, key: String| {
        if v > f.0 {
            *f = (v, key);
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
                faster(&mut fastest, speed, format!("boundaries.{name}.velocity"));
            }
            FaceKind::Inlet => faster(&mut fastest, speed, format!("boundaries.{name}.velocity")),
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
        if face.sponge > 0 {
            let key = format!("boundaries.{name}.sponge");
            if !matches!(face.kind, FaceKind::Inlet | FaceKind::Outlet) {
                return e(&key, format!("absorbing layers lie in front of inlet and outlet faces, but this face is {kind}: remove sponge or make the face an inlet or outlet"));
            }
            if axis < size.len() && 2 * face.sponge as usize + 2 > size[axis] {
                return e(
                    &key,
                    format!(
                        "{} cells is more than half the domain along this face's axis ({} cells): give at most {}",
                        face.sponge,
                        size[axis],
                        size[axis].saturating_sub(2) / 2
                    ),
                );
            }
            if s.amr.enabled || s.compression.enabled {
                return e(
                    &key,
                    "absorbing layers run on dense grids: set sponge = 0, or amr.enabled and compression.enabled to false".into(),
                );
            }
        }
    }
    if let Some(f) = faces.iter().position(|f| f.kind == FaceKind::SlipWall) {
        let key = format!("boundaries.{}", Boundaries::NAMES[f]);
        if s.amr.enabled || s.compression.enabled {
            return e(&key, "free-slip walls run on dense grids: use \"wall\", or set amr.enabled and compression.enabled to false".into());
        }
        if matches!(s.solver.scheme, crate::schemes::Scheme::Swap | crate::schemes::Scheme::Ghost) {
            return e(
                &key,
                format!(
                    "free-slip walls need a scheme that reads its wall values explicitly; solver.scheme = \"{}\" does not: use esoteric_pull, esoteric_push, aa or one_step_pull",
                    s.solver.scheme
                ),
            );
        }
    }
    if s.initial.kind == InitialKind::TaylorGreen3d && size.len() != 3 {
        return e("initial.kind", "taylor_green_3d needs a 3D domain (three sizes); use \"taylor_green\" in 2D".into());
    }
    let iv = s.initial.velocity.0;
    if !iv.iter().all(|v| v.is_finite()) {
        return e("initial.velocity", format!("must be finite numbers, got {iv:?}"));
    }
    faster(&mut fastest, (iv[0] * iv[0] + iv[1] * iv[1] + iv[2] * iv[2]).sqrt(), "initial.velocity".into());

    let fl = &s.fluid;
    let given = [fl.tau.is_some(), fl.viscosity.is_some(), fl.reynolds.is_some()].iter().filter(|&&b| b).count();
    if given > 1 {
        return e("fluid", "give only one of tau, viscosity or reynolds".into());
    }
    // [units] before tau: its physical viscosity gives tau where [fluid] gives none.
    let units = match &s.units {
        Some(spec) => Some(super::units::resolve(s, spec, fastest.0, &fastest.1, size.len())?),
        None => None,
    };
    let units_viscosity = units.as_ref().zip(s.units.as_ref().and_then(|u| u.viscosity));
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
        faster(&mut fastest, u, "fluid.velocity".into());
        3.0 * (u * l / re) + 0.5
    } else if let Some(((u, key), nu)) = units_viscosity {
        super::units::derived_tau(s, u, nu, key).map_err(|m| ("units.viscosity".to_string(), m))?
    } else {
        0.6
    };
    let tau_key = if fl.tau.is_some() {
        "fluid.tau"
    } else if fl.viscosity.is_some() {
        "fluid.viscosity"
    } else if fl.reynolds.is_none() && units_viscosity.is_some() {
        "units.viscosity"
    } else {
        "fluid.reynolds"
    };
    let gives = if fl.tau.is_some() {
        format!("tau = {tau}")
    } else if fl.viscosity.is_some() {
        format!("gives tau = 3 viscosity + 0.5 = {tau}")
    } else if tau_key == "units.viscosity" {
        format!("gives tau = {tau}")
    } else {
        format!("gives viscosity = velocity * length / reynolds = {} and tau = 3 viscosity + 0.5 = {tau}", (tau - 0.5) / 3.0)
    };
    if !(tau > 0.5) {
        return e(tau_key, format!("{gives}, but tau must be > 0.5 (viscosity = (tau - 0.5) / 3 > 0): raise tau or the viscosity, or lower the Reynolds number"));
    }
    if !(tau < 50.0) {
        return e(tau_key, format!("{gives}; keep tau below 50 (viscosity below 16.5)"));
    }
    // A scene may state the viscosity twice, in [fluid] and in [units], if the two agree.
    if let (Some(((u, _), nu)), 1) = (units_viscosity, given) {
        super::units::check_agreement(u, nu, tau, tau_key).map_err(|m| ("units.viscosity".to_string(), m))?;
    }
    let maxv = fastest.0;
    let fastest = fastest.1;
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
        warnings
            .push(format!("tau = {tau:.4} is close to 0.5: BGK may blow up; try collision = \"regularized\", \"trt\" or \"smagorinsky\""));
    }
    // Interpolated walls need the exact shape on a dense grid (see `Domain::from_scene`): where
    // the grid is not one, the obstacles get half-way (staircase) walls, and the user is told.
    if s.solver.walls == super::WallMode::Interpolated && !s.obstacles.is_empty() {
        let on = if s.solver.scheme == crate::schemes::Scheme::Ghost {
            Some("solver.scheme = \"ghost\" (LBM-Ghost blocks)")
        } else if s.compression.enabled {
            Some("compressed subgrids")
        } else {
            None
        };
        if let Some(on) = on {
            warnings.push(format!(
                "solver.walls = \"interpolated\": {on} keep obstacle walls half-way, so the obstacles run with staircase walls; \
                 set solver.walls = \"staircase\" to say so, or use a dense scheme for curved walls"
            ));
        }
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
    super::forces::resolve(s)?;
    let probes = super::probes::resolve(&s.probes, dims, size.len())?;
    let units = units.map(|(u, _)| u);
    Ok(Derived { lattice, size: dims, tau, max_velocity: maxv, warnings, probes, units })
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
