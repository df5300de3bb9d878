//! `[forces]`: the reference values that turn the force on each obstacle into drag and lift
//! coefficients and its lift's period into a Strouhal number. Every key has a default from the
//! rest of the scene, so most scenes need no `[forces]` table at all.

use super::{FaceKind, Scene};
use serde::{Deserialize, Serialize};

/// An axis with a direction: drag is the force along the flow, lift across it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SignedAxis {
    /// +x.
    #[serde(rename = "x")]
    X,
    /// -x.
    #[serde(rename = "-x")]
    NegX,
    /// +y.
    #[serde(rename = "y")]
    Y,
    /// -y.
    #[serde(rename = "-y")]
    NegY,
    /// +z.
    #[serde(rename = "z")]
    Z,
    /// -z.
    #[serde(rename = "-z")]
    NegZ,
}

impl SignedAxis {
    /// The axis index (0, 1, 2).
    #[must_use]
    pub fn index(self) -> usize {
        match self {
            SignedAxis::X | SignedAxis::NegX => 0,
            SignedAxis::Y | SignedAxis::NegY => 1,
            SignedAxis::Z | SignedAxis::NegZ => 2,
        }
    }
    /// +1 or -1.
    #[must_use]
    pub fn sign(self) -> f64 {
        match self {
            SignedAxis::X | SignedAxis::Y | SignedAxis::Z => 1.0,
            _ => -1.0,
        }
    }
    /// The positive axis of index `a` (0, 1, 2), and its negative with `negative`.
    #[must_use]
    pub fn of(a: usize, negative: bool) -> SignedAxis {
        const POS: [SignedAxis; 3] = [SignedAxis::X, SignedAxis::Y, SignedAxis::Z];
        const NEG: [SignedAxis; 3] = [SignedAxis::NegX, SignedAxis::NegY, SignedAxis::NegZ];
        if negative {
            NEG[a % 3]
        } else {
            POS[a % 3]
        }
    }
    /// The component of `v` along this axis.
    #[must_use]
    pub fn component(self, v: [f64; 3]) -> f64 {
        self.sign() * v[self.index()]
    }
    /// The name as scenes write it ("x", "-y", ...).
    #[must_use]
    pub fn name(self) -> &'static str {
        ["x", "-x", "y", "-y", "z", "-z"][2 * self.index() + usize::from(self.sign() < 0.0)]
    }
}

/// `[forces]` as written in the scene; [`Scene::force_reference`] fills in the defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForcesSpec {
    /// Reference length (cells); default `fluid.length`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<f64>,
    /// Reference velocity (cells/step); default `fluid.velocity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub velocity: Option<f64>,
    /// Reference area of 3D scenes (cells^2); default pi/4 length^2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub area: Option<f64>,
    /// Reference density; default `initial.density`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub density: Option<f64>,
    /// Direction of drag; default the direction of the inflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drag_axis: Option<SignedAxis>,
    /// Direction of lift; default the next axis after the drag's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lift_axis: Option<SignedAxis>,
}

/// How forces become coefficients: the drag and lift directions, and the reference values
/// where the scene gives a length and a velocity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ForceReference {
    /// Direction of drag.
    pub drag: SignedAxis,
    /// Direction of lift.
    pub lift: SignedAxis,
    /// Reference values (`None`: the scene gives no reference length or velocity, so forces
    /// stay forces).
    pub values: Option<ReferenceValues>,
}

/// Reference length, velocity, area and density of the force coefficients (lattice units).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReferenceValues {
    /// Length L (cells): C = 2 F / (rho U^2 L) in 2D, and St = f L / U.
    pub length: f64,
    /// Velocity U (cells/step).
    pub velocity: f64,
    /// Area A (cells^2) of a 3D scene: C = 2 F / (rho U^2 A); `None` in 2D.
    pub area: Option<f64>,
    /// Density rho.
    pub density: f64,
}

impl ReferenceValues {
    /// What a force is divided by to make a coefficient: 1/2 rho U^2 L (2D, force per unit
    /// depth) or 1/2 rho U^2 A (3D).
    #[must_use]
    pub fn force_scale(&self) -> f64 {
        0.5 * self.density * self.velocity * self.velocity * self.area.unwrap_or(self.length)
    }
    /// The Strouhal number f L / U of a period of `period` steps.
    #[must_use]
    pub fn strouhal(&self, period: f64) -> f64 {
        self.length / (self.velocity * period)
    }
}

impl ForceReference {
    /// Drag and lift components of a force.
    #[must_use]
    pub fn drag_lift(&self, f: [f64; 3]) -> [f64; 2] {
        [self.drag.component(f), self.lift.component(f)]
    }
    /// Drag and lift coefficients [C_D, C_L] of a force, where the scene gives reference values.
    #[must_use]
    pub fn coefficients(&self, f: [f64; 3]) -> Option<[f64; 2]> {
        let s = self.values?.force_scale();
        let [d, l] = self.drag_lift(f);
        Some([d / s, l / s])
    }
}

impl Scene {
    /// The drag and lift directions and reference values of this (validated) scene, with the
    /// defaults of `[forces]` filled in.
    #[must_use]
    pub fn force_reference(&self) -> ForceReference {
        resolve(self).unwrap_or(ForceReference { drag: SignedAxis::X, lift: SignedAxis::Y, values: None })
    }
}

/// The direction the scene's flow goes: the largest component of the summed inlet velocities,
/// else of the initial velocity, else of the body force; +x for a scene without any.
fn flow_direction(s: &Scene, dims: usize) -> SignedAxis {
    let mut inflow = [0.0f64; 3];
    for f in s.boundaries.faces().iter().filter(|f| f.kind == FaceKind::Inlet) {
        for a in 0..3 {
            inflow[a] += f64::from(f.velocity.0[a]);
        }
    }
    let widen = |v: [f32; 3]| v.map(f64::from);
    for v in [inflow, widen(s.initial.velocity.0), widen(s.fluid.force.0)] {
        let a = (0..dims).max_by(|&i, &j| v[i].abs().total_cmp(&v[j].abs())).unwrap_or(0);
        if v[a] != 0.0 {
            return SignedAxis::of(a, v[a] < 0.0);
        }
    }
    SignedAxis::X
}

/// `[forces]` with its defaults filled in, every number checked (finite and > 0, including
/// the `fluid.length` and `fluid.velocity` it defaults to). Errors are (key, message).
pub(super) fn resolve(s: &Scene) -> Result<ForceReference, (String, String)> {
    let f = &s.forces;
    let dims = s.domain.size.len().clamp(2, 3);
    let err = |k: &str, m: String| Err((k.to_string(), m));
    let check = |k: &str, what: &str, v: f64| -> Result<f64, (String, String)> {
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err((k.to_string(), format!("must be a finite number > 0 ({what} of the force coefficients), got {v}")))
        }
    };
    let pick = |own: Option<f64>, own_key: &'static str, fluid: Option<f32>, fluid_key: &'static str| match (own, fluid) {
        (Some(v), _) => Some((v, own_key)),
        (None, Some(v)) => Some((f64::from(v), fluid_key)),
        (None, None) => None,
    };
    let length = pick(f.length, "forces.length", s.fluid.length, "fluid.length");
    let velocity = pick(f.velocity, "forces.velocity", s.fluid.velocity, "fluid.velocity");
    if dims == 2 && f.area.is_some() {
        return err(
            "forces.area",
            "a 2D scene's coefficients are per unit depth, 2 F / (rho U^2 L) with forces.length: remove forces.area".into(),
        );
    }
    let asked = f.length.is_some() || f.velocity.is_some() || f.area.is_some() || f.density.is_some();
    let values = match (length, velocity) {
        (Some((l, lk)), Some((u, uk))) => {
            let length = check(lk, "the reference length", l)?;
            let velocity = check(uk, "the reference velocity", u)?;
            let area = if dims == 3 {
                Some(match f.area {
                    Some(a) => check("forces.area", "the reference area", a)?,
                    None => std::f64::consts::FRAC_PI_4 * length * length,
                })
            } else {
                None
            };
            let density = match f.density {
                Some(d) => check("forces.density", "the reference density", d)?,
                None => f64::from(s.initial.density),
            };
            Some(ReferenceValues { length, velocity, area, density })
        }
        // A scene that asks for coefficients (a number in [forces]) must give both.
        (None, _) if asked => {
            return err(
                "forces.length",
                "missing: the force coefficients need a reference length; give forces.length or fluid.length (cells)".into(),
            )
        }
        (_, None) if asked => {
            return err(
                "forces.velocity",
                "missing: the force coefficients need a reference velocity; give forces.velocity or fluid.velocity (cells/step)".into(),
            )
        }
        _ => None,
    };
    for (k, a) in [("forces.drag_axis", f.drag_axis), ("forces.lift_axis", f.lift_axis)] {
        if let Some(a) = a.filter(|a| a.index() >= dims) {
            return err(k, format!("\"{}\" is not an axis of a 2D scene: use \"x\", \"-x\", \"y\" or \"-y\"", a.name()));
        }
    }
    let drag = f.drag_axis.unwrap_or_else(|| flow_direction(s, dims));
    // Lift: across the flow in the plane of a 2D scene; the next axis (x -> y -> z -> x) in 3D.
    let lift = f.lift_axis.unwrap_or_else(|| {
        if dims == 2 {
            SignedAxis::of(1 - drag.index().min(1), false)
        } else {
            SignedAxis::of(drag.index() + 1, false)
        }
    });
    if lift.index() == drag.index() {
        let key = if f.lift_axis.is_some() { "forces.lift_axis" } else { "forces.drag_axis" };
        return err(key, format!("drag (\"{}\") and lift (\"{}\") need different axes", drag.name(), lift.name()));
    }
    Ok(ForceReference { drag, lift, values })
}
