//! `[units]`: what the scene's cells, steps and lattice velocities stand for in SI units (see
//! [`crate::units`]). A physical length spanning a number of cells fixes the cell size, a
//! physical velocity standing for the scene's reference lattice velocity fixes the step, and a
//! physical viscosity, where given, fixes tau or is checked against it. Without `[units]` a
//! scene stays in lattice units.

use super::Scene;
use crate::collision::Collision;
use crate::units::{si, Reference, Units};
use serde::{Deserialize, Serialize};

/// `[units]` as written in the scene.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitsSpec {
    /// Metres spanned by `cells` cells (e.g. the obstacle's diameter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<f64>,
    /// Cells that `length` spans; default `fluid.length`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cells: Option<f64>,
    /// m/s that the reference lattice velocity stands for (`fluid.velocity`, else the fastest
    /// velocity the scene prescribes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub velocity: Option<f64>,
    /// Kinematic viscosity (m^2/s): gives tau where `[fluid]` gives none, else must agree with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub viscosity: Option<f64>,
    /// Density of the fluid at rest (kg/m^3); default [`DEFAULT_DENSITY`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub density: Option<f64>,
}

/// The density of `[units]` unless given: water's, 1000 kg/m^3.
pub const DEFAULT_DENSITY: f64 = 1000.0;

/// Largest lattice velocity a fix may suggest: Mach 0.3, `0.3 c_s` cells/step.
const MACH_LIMIT_VELOCITY: f64 = 0.3 / 1.732_050_807_568_877_2;

/// Largest tau a viscosity of `[units]` may give (as for a tau given directly).
pub const MAX_TAU: f64 = 50.0;

/// Smallest tau a viscosity of `[units]` may give with `collision`: BGK becomes unstable below
/// about 0.51 (a scene that sets tau there directly gets a warning); TRT, regularized and
/// Smagorinsky collisions hold down to about 0.501.
#[must_use]
pub fn min_tau(collision: Collision) -> f64 {
    if collision == Collision::Bgk {
        0.51
    } else {
        0.501
    }
}

/// A number the scene holds as an f32, as the f64 of the decimal it was written as (0.025, not
/// 0.02500000037), so that the factors of the conversion come out as round as the scene's values.
fn widen(v: f32) -> f64 {
    v.to_string().parse().unwrap_or(f64::from(v))
}

/// A number shortened for messages (the SI form, see [`si`]).
fn n(v: f64) -> String {
    si(v)
}

/// The scale of `[units]`: every key checked, the reference lattice velocity `fluid.velocity`
/// or else the fastest velocity the scene prescribes (`fastest`, at key `fastest_key`), in a
/// `dims`-dimensional scene. Returns the scale and the key of its lattice velocity. Errors are
/// (key, message).
pub(super) fn resolve(
    s: &Scene,
    spec: &UnitsSpec,
    fastest: f32,
    fastest_key: &str,
    dims: usize,
) -> Result<(Units, String), (String, String)> {
    let err = |k: &str, m: String| Err((k.to_string(), m));
    let check = |k: &str, what: &str, v: f64| -> Result<f64, (String, String)> {
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err((k.to_string(), format!("must be a finite number > 0 ({what}), got {v}")))
        }
    };
    let Some(length) = spec.length else {
        return err("units.length", "missing: give the length in metres that units.cells cells span (e.g. the obstacle's diameter)".into());
    };
    let length = check("units.length", "metres", length)?;
    let cells = match (spec.cells, s.fluid.length) {
        (Some(c), _) => check("units.cells", "the cells that units.length spans", c)?,
        (None, Some(l)) => check("fluid.length", "the cells that units.length spans, as units.cells is not given", widen(l))?,
        (None, None) => {
            return err(
                "units.cells",
                "missing: give the number of cells that units.length spans (or fluid.length, which it defaults to)".into(),
            )
        }
    };
    let Some(velocity) = spec.velocity else {
        return err(
            "units.velocity",
            "missing: give the velocity in m/s that the scene's reference lattice velocity (fluid.velocity, else its fastest inlet, moving wall or initial velocity) stands for".into(),
        );
    };
    let velocity = check("units.velocity", "m/s", velocity)?;
    if let Some(nu) = spec.viscosity {
        check("units.viscosity", "m^2/s, e.g. 1.0e-6 for water, 1.5e-5 for air", nu)?;
    }
    let density = match spec.density {
        Some(d) => check("units.density", "kg/m^3, e.g. 1000 for water, 1.2 for air", d)?,
        None => DEFAULT_DENSITY,
    };
    let (lattice_velocity, key) = match s.fluid.velocity {
        Some(u) => (check("fluid.velocity", "the lattice velocity that units.velocity stands for", widen(u))?, "fluid.velocity".to_string()),
        None if fastest > 0.0 => (widen(fastest), fastest_key.to_string()),
        None => {
            return err(
                "units.velocity",
                "the scene prescribes no velocity for units.velocity to stand for (no inlet, moving wall or initial velocity): give fluid.velocity, the lattice velocity (cells/step) that units.velocity is".into(),
            )
        }
    };
    let reference = Reference { length, cells, velocity, lattice_velocity, density, lattice_density: widen(s.initial.density) };
    let units = Units::new(reference, dims).map_err(|m| ("units.length".to_string(), m))?;
    Ok((units, key))
}

/// Where the cell count of `[units]` comes from, for messages.
fn cells_key(s: &Scene) -> &'static str {
    match s.units.as_ref().and_then(|u| u.cells) {
        Some(_) => "units.cells",
        None => "units.cells (now fluid.length)",
    }
}

/// The relaxation time that the viscosity `nu` (m^2/s) of `[units]` gives on the scale `u`,
/// where `[fluid]` gives none. Refused outside the range where the scene's collision is stable
/// ([`min_tau`] to [`MAX_TAU`]), with the cell count or lattice velocity (at key
/// `velocity_key`) that would bring it inside: the lattice viscosity `nu dt / dx^2 = nu u_lattice
/// cells / (U L)` grows in proportion to both.
pub(super) fn derived_tau(s: &Scene, u: &Units, nu: f64, velocity_key: &str) -> Result<f32, String> {
    let nu_lattice = u.lattice_viscosity(nu);
    let tau = u.tau_of(nu);
    let collision = s.solver.collision;
    let (lo, hi) = (min_tau(collision), MAX_TAU);
    let r = u.reference;
    let said = format!(
        "{} m²/s is nu = {} cells²/step on this lattice (dx = {} m, dt = {} s), tau = {tau:.5}",
        n(nu),
        n(nu_lattice),
        n(u.dx),
        n(u.dt)
    );
    let cells_key = cells_key(s);
    if tau < lo {
        let k = (lo - 0.5) / 3.0 / nu_lattice;
        let cells = (r.cells * k).ceil();
        let speed = r.lattice_velocity * k;
        let faster = if speed <= MACH_LIMIT_VELOCITY {
            format!("; or raise the lattice velocity {velocity_key} from {} to {} cells/step", n(r.lattice_velocity), n(speed))
        } else {
            format!(" (a faster lattice velocity would need {} cells/step, past the Mach limit of {:.2})", n(speed), MACH_LIMIT_VELOCITY)
        };
        let other = if collision == Collision::Bgk && tau >= min_tau(Collision::Regularized) {
            "; or set solver.collision = \"regularized\", \"trt\" or \"smagorinsky\", stable down to tau 0.501"
        } else {
            ""
        };
        return Err(format!(
            "{said}, below {lo}, where the {} collision becomes unstable: resolve units.length with at least {} cells instead of {} ({cells_key}, with domain.size and the obstacles scaled alike){faster}{other}",
            collision.name(),
            cells,
            n(r.cells)
        ));
    }
    if tau >= hi {
        let k = (hi - 0.5) / 3.0 / nu_lattice;
        let cells = (r.cells * k).floor();
        let speed = r.lattice_velocity * k;
        let coarser = if cells >= 1.0 {
            format!("resolve units.length with at most {cells} cells instead of {} ({cells_key}, with domain.size and the obstacles scaled alike), or ", n(r.cells))
        } else {
            String::new()
        };
        return Err(format!(
            "{said}, above {hi}, where the method loses its accuracy: {coarser}lower the lattice velocity {velocity_key} from {} to below {} cells/step",
            n(r.lattice_velocity),
            n(speed)
        ));
    }
    Ok(tau as f32)
}

/// Check that the viscosity `nu` (m^2/s) of `[units]` agrees, to 1 %, with the relaxation time
/// `tau` that `[fluid]` gives at `tau_key` (a scene may state both, but not two viscosities).
pub(super) fn check_agreement(u: &Units, nu: f64, tau: f32, tau_key: &str) -> Result<(), String> {
    let ours = u.lattice_viscosity(nu);
    let theirs = (f64::from(tau) - 0.5) / 3.0;
    if (theirs - ours).abs() <= 0.01 * ours {
        return Ok(());
    }
    Err(format!(
        "{} m²/s is nu = {} cells²/step on this lattice (tau {:.5}), but {tau_key} gives tau = {tau} (nu = {theirs_si} m²/s), {:.0} % apart: \
         remove units.viscosity to keep {tau_key}, remove {tau_key} to derive tau from units.viscosity, or make them agree \
         (units.viscosity = {theirs_si})",
        n(nu),
        n(ours),
        u.tau_of(nu),
        100.0 * (theirs - ours).abs() / ours,
        theirs_si = n(u.viscosity(theirs)),
    ))
}
