//! The parameters of a run that may change between steps (collision, walls, inlets, outlets),
//! with the values a scene starts with.

use crate::collision::CollideParams;
use crate::domain::Domain;
use crate::scene::LoadedScene;

/// Parameters that may change between steps.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// Collision operator, tau, Smagorinsky constant, body force.
    pub collide: CollideParams,
    /// Moving-wall velocities by wall id (id 0 is resting).
    pub walls: Vec<[f32; 3]>,
    /// Inlet velocities by inlet id (centre value for parabolic profiles).
    pub inlets: Vec<[f32; 3]>,
    /// Outlet densities by outlet id.
    pub outlets: Vec<f32>,
}

impl Params {
    /// The parameters a loaded scene starts with, on its domain (the walls', inlets' and
    /// outlets' values by id).
    #[must_use]
    pub fn from_scene(ls: &LoadedScene, dom: &Domain) -> Params {
        let s = &ls.scene;
        Params {
            collide: CollideParams { kind: s.solver.collision, tau: ls.derived.tau, cs: s.solver.smagorinsky_cs, force: s.fluid.force.0 },
            walls: dom.walls.clone(),
            inlets: dom.inlets.iter().map(|b| b.velocity).collect(),
            outlets: dom.outlets.iter().map(|b| b.density).collect(),
        }
    }

    /// The parameters of a timing box: collision `kind` at tau 0.6, no walls, inlets or outlets
    /// (the bench's boxes and `--gpus auto`'s).
    #[must_use]
    pub fn timing_box(kind: crate::collision::Collision) -> Params {
        Params {
            collide: CollideParams { kind, tau: 0.6, cs: 0.1, force: [0.0; 3] },
            walls: vec![[0.0; 3]],
            inlets: vec![],
            outlets: vec![],
        }
    }

    /// Check a parameter set; the message says what is valid.
    ///
    /// # Errors
    /// tau <= 0.5, non-finite values or supersonic velocities.
    pub fn validate(&self) -> Result<(), String> {
        let c = &self.collide;
        if !(c.tau > 0.5) || !c.tau.is_finite() {
            return Err(format!("tau = {} must be > 0.5", c.tau));
        }
        if !c.force.iter().all(|x| x.is_finite()) {
            return Err("force must be finite".into());
        }
        if !(c.cs >= 0.0) {
            return Err("Smagorinsky constant must be >= 0".into());
        }
        for v in self.walls.iter().chain(self.inlets.iter()) {
            let s = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
            if !(s < 0.35) {
                return Err(format!("velocity {s} is too large: keep boundary velocities below 0.35 (Mach 0.6)"));
            }
        }
        if self.outlets.iter().any(|&d| !(d > 0.0)) {
            return Err("outlet density must be > 0".into());
        }
        Ok(())
    }
}
