//! Physical (SI) units: what a cell, a step and a unit of lattice density stand for.
//!
//! The solver works in lattice units: lengths in cells, time in steps, velocities in cells per
//! step, densities around 1. A scene's `[units]` ties them to metres, seconds and kilograms the
//! way Krüger et al. ("The Lattice Boltzmann Method: Principles and Practice", Springer 2017,
//! chapter 7) describe, and as FluidX3D's `units` and Palabos's unit converters do:
//!
//! - a physical length `L` (m) spanning `N` cells gives the cell size `dx = L / N`;
//! - a physical velocity `U` (m/s) standing for the lattice velocity `u` gives the step
//!   `dt = dx u / U`;
//! - the fluid's density `rho` (kg/m^3) standing for the lattice density at rest gives the mass
//!   scale `rho_si / rho_lattice` per cell volume.
//!
//! Every other quantity follows from these three factors: velocity `dx/dt`, kinematic viscosity
//! `dx^2/dt` (so `nu_lattice = nu_si dt / dx^2`, and `tau = 3 nu_lattice + 1/2`), pressure
//! `rho dx^2/dt^2` (the lattice pressure is `c_s^2 (rho - rho0)` with `c_s^2 = 1/3`), and force
//! `rho dx^4/dt^2` in 3D. A 2D run is a slab one cell deep, so its forces are per unit depth:
//! `rho dx^3/dt^2`, in N/m. Dimensionless numbers (Reynolds, Mach, drag and lift
//! coefficients, Strouhal) are the same in both systems.

/// The lattice speed of sound squared, `c_s^2 = 1/3`, of every velocity set Esoflow runs.
pub const CS2: f64 = 1.0 / 3.0;

/// The physical values a scale is made from (see [`Units::new`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reference {
    /// A physical length (m), e.g. an obstacle's diameter.
    pub length: f64,
    /// The cells that length spans.
    pub cells: f64,
    /// A physical velocity (m/s).
    pub velocity: f64,
    /// The lattice velocity (cells/step) that stands for `velocity`.
    pub lattice_velocity: f64,
    /// The fluid's density at rest (kg/m^3).
    pub density: f64,
    /// The lattice density at rest that stands for `density`.
    pub lattice_density: f64,
}

/// The conversion between lattice units and SI units of one scene.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Units {
    /// Metres per cell.
    pub dx: f64,
    /// Seconds per step.
    pub dt: f64,
    /// kg/m^3 per unit of lattice density.
    pub rho: f64,
    /// 2 or 3: a 2D run's forces are per unit depth.
    pub dims: usize,
    /// What the scale was made from.
    pub reference: Reference,
}

/// The largest SI factor (and the inverse of the smallest) a scale may have: a factor beyond it
/// leaves too little of f64's range (1e308) for the lattice values it multiplies.
const SANE_FACTOR: f64 = 1e150;

/// Whether `v` is a finite number above 0.
fn positive(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

impl Units {
    /// The scale of a `dims`-dimensional run (2 or 3) from its reference values.
    ///
    /// # Errors
    /// A reference value that is not a finite number above 0, or one so extreme that a cell or
    /// a step is no longer a finite number above 0; the message says which.
    pub fn new(reference: Reference, dims: usize) -> Result<Units, String> {
        let r = reference;
        for (what, v) in [
            ("the length", r.length),
            ("the cell count", r.cells),
            ("the velocity", r.velocity),
            ("the lattice velocity", r.lattice_velocity),
            ("the density", r.density),
            ("the lattice density", r.lattice_density),
        ] {
            if !positive(v) {
                return Err(format!("{what} must be a finite number > 0, got {v}"));
            }
        }
        let dx = r.length / r.cells;
        let dt = dx * r.lattice_velocity / r.velocity;
        let rho = r.density / r.lattice_density;
        if !(positive(dx) && positive(dt) && positive(rho)) {
            return Err(format!("these values give a cell of {dx:e} m and a step of {dt:e} s, out of the range of numbers"));
        }
        let u = Units { dx, dt, rho, dims: dims.clamp(2, 3), reference };
        // Every factor a lattice value is multiplied by on its way to a file or a message: each
        // must leave room for lattice values of any size a run reports (forces of thousands,
        // rates near 1e-9) before the product stops being a number.
        for (what, unit, v) in u.factors() {
            if !(v.is_finite() && (SANE_FACTOR.recip()..=SANE_FACTOR).contains(&v)) {
                return Err(format!(
                    "these values make {what} {v:e} {unit} (a cell of {dx:e} m, a step of {dt:e} s), outside the {:e} to {SANE_FACTOR:e} \
                     that keeps every SI value a number: give a length, velocity and density of the flow's own scale",
                    SANE_FACTOR.recip()
                ));
            }
        }
        Ok(u)
    }

    /// The factors that turn lattice values into SI values: (what, unit, value).
    fn factors(&self) -> [(&'static str, &'static str, f64); 7] {
        [
            ("1 cell", "m", self.dx),
            ("1 step", "s", self.dt),
            ("a velocity of 1 cell/step", "m/s", self.velocity(1.0)),
            ("a density of 1", "kg/m^3", self.rho),
            ("a pressure of 1", "Pa", self.pressure(1.0)),
            ("a force of 1", self.force_unit(), self.force_scale()),
            ("a viscosity of 1 cell^2/step", "m^2/s", self.viscosity(1.0)),
        ]
    }

    /// A length in cells, in metres.
    #[must_use]
    pub fn length(&self, cells: f64) -> f64 {
        cells * self.dx
    }

    /// A length in metres, in cells.
    #[must_use]
    pub fn lattice_length(&self, metres: f64) -> f64 {
        metres / self.dx
    }

    /// A time in steps, in seconds.
    #[must_use]
    pub fn time(&self, steps: f64) -> f64 {
        steps * self.dt
    }

    /// A time in seconds, in steps.
    #[must_use]
    pub fn lattice_time(&self, seconds: f64) -> f64 {
        seconds / self.dt
    }

    /// A rate in 1/step (a frequency, a vorticity), in 1/s.
    #[must_use]
    pub fn rate(&self, per_step: f64) -> f64 {
        per_step / self.dt
    }

    /// A velocity in cells/step, in m/s.
    #[must_use]
    pub fn velocity(&self, u: f64) -> f64 {
        u * self.dx / self.dt
    }

    /// A velocity in m/s, in cells/step.
    #[must_use]
    pub fn lattice_velocity(&self, u: f64) -> f64 {
        u * self.dt / self.dx
    }

    /// A lattice density, in kg/m^3.
    #[must_use]
    pub fn density(&self, rho: f64) -> f64 {
        rho * self.rho
    }

    /// A lattice pressure (`c_s^2` times a density difference), in Pa.
    #[must_use]
    pub fn pressure(&self, p: f64) -> f64 {
        p * self.rho * (self.dx / self.dt).powi(2)
    }

    /// A pressure in Pa, in lattice units.
    #[must_use]
    pub fn lattice_pressure(&self, pa: f64) -> f64 {
        pa / (self.rho * (self.dx / self.dt).powi(2))
    }

    /// The pressure in Pa of lattice density `rho` against the density at rest `rho0`:
    /// `c_s^2 (rho - rho0)` in lattice units, the equation of state of the method.
    #[must_use]
    pub fn pressure_of_density(&self, rho: f64, rho0: f64) -> f64 {
        self.pressure(CS2 * (rho - rho0))
    }

    /// What one lattice unit of force is in SI: `rho dx^4/dt^2` newtons in 3D, and in 2D
    /// (a slab one cell deep) `rho dx^3/dt^2` newtons per metre of depth.
    #[must_use]
    pub fn force_scale(&self) -> f64 {
        let dx_power = if self.dims == 2 { 3 } else { 4 };
        self.rho * self.dx.powi(dx_power) / (self.dt * self.dt)
    }

    /// A lattice force (momentum exchange), in N (3D) or N/m (2D): see [`Units::force_scale`].
    #[must_use]
    pub fn force(&self, f: f64) -> f64 {
        f * self.force_scale()
    }

    /// A force in N (3D) or N/m (2D), in lattice units.
    #[must_use]
    pub fn lattice_force(&self, f: f64) -> f64 {
        f / self.force_scale()
    }

    /// The unit of [`Units::force`]: "N" in 3D, "N/m" (per unit depth) in 2D.
    #[must_use]
    pub fn force_unit(&self) -> &'static str {
        if self.dims == 2 {
            "N/m"
        } else {
            "N"
        }
    }

    /// A kinematic viscosity in cells^2/step, in m^2/s.
    #[must_use]
    pub fn viscosity(&self, nu: f64) -> f64 {
        nu * self.dx * self.dx / self.dt
    }

    /// A kinematic viscosity in m^2/s, in cells^2/step: `nu dt / dx^2`.
    #[must_use]
    pub fn lattice_viscosity(&self, nu: f64) -> f64 {
        nu * self.dt / (self.dx * self.dx)
    }

    /// The relaxation time of a kinematic viscosity in m^2/s: `3 nu_lattice + 1/2`.
    #[must_use]
    pub fn tau_of(&self, nu: f64) -> f64 {
        self.lattice_viscosity(nu) / CS2 + 0.5
    }

    /// The Reynolds number `U L / nu` of the reference length and velocity at a lattice
    /// viscosity `nu` (cells^2/step); the same in lattice and SI units.
    #[must_use]
    pub fn reynolds(&self, nu: f64) -> f64 {
        self.reference.lattice_velocity * self.reference.cells / nu
    }

    /// The speed of sound the lattice models, `c_s dx/dt` (m/s): far below a real fluid's,
    /// since the method holds its Mach number, not its speed of sound.
    #[must_use]
    pub fn sound_speed(&self) -> f64 {
        self.velocity(CS2.sqrt())
    }

    /// The conversion as rows of (lattice quantity, SI value), for tables and summaries.
    #[must_use]
    pub fn rows(&self) -> Vec<(&'static str, String)> {
        let force = if self.dims == 2 { " (per metre of depth)" } else { "" };
        vec![
            ("1 cell", format!("{} m", si(self.dx))),
            ("1 step", format!("{} s", si(self.dt))),
            ("velocity 1 cell/step", format!("{} m/s", si(self.velocity(1.0)))),
            ("density 1", format!("{} kg/m³", si(self.rho))),
            ("pressure 1", format!("{} Pa", si(self.pressure(1.0)))),
            ("force 1", format!("{} {}{force}", si(self.force_scale()), self.force_unit())),
            ("viscosity 1 cell²/step", format!("{} m²/s", si(self.viscosity(1.0)))),
        ]
    }
}

/// A number in SI units for people: four significant digits, in exponent form when it is very
/// small or very large, trailing zeros dropped ("0.417", "1.5e-5", "2.5e4").
#[must_use]
pub fn si(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 || !a.is_finite() {
        return format!("{v}");
    }
    if (1e-3..1e5).contains(&a) {
        let decimals = (3 - a.log10().floor() as i32).clamp(0, 6) as usize;
        let s = format!("{v:.decimals$}");
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    } else {
        let s = format!("{v:.3e}");
        match s.split_once('e') {
            Some((m, e)) if m.contains('.') => format!("{}e{e}", m.trim_end_matches('0').trim_end_matches('.')),
            _ => s,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
    }

    fn units(length: f64, cells: f64, velocity: f64, lattice_velocity: f64, density: f64, dims: usize) -> Units {
        Units::new(Reference { length, cells, velocity, lattice_velocity, density, lattice_density: 1.0 }, dims).unwrap()
    }

    #[test]
    fn every_conversion_goes_there_and_back() {
        let u = units(0.1, 20.0, 0.5, 0.1, 1.2, 3);
        for v in [1e-9, 0.3, 1.0, 42.0, 7e6] {
            assert!(close(u.lattice_length(u.length(v)), v));
            assert!(close(u.lattice_time(u.time(v)), v));
            assert!(close(u.lattice_velocity(u.velocity(v)), v));
            assert!(close(u.lattice_pressure(u.pressure(v)), v));
            assert!(close(u.lattice_force(u.force(v)), v));
            assert!(close(u.lattice_viscosity(u.viscosity(v)), v));
        }
        // The reference comes back: its length is its cells, its velocity its lattice velocity.
        assert!(close(u.length(20.0), 0.1));
        assert!(close(u.velocity(0.1), 0.5));
        assert!(close(u.density(1.0), 1.2));
        // dx = 5 mm, dt = dx u / U = 1 ms.
        assert!(close(u.dx, 5e-3) && close(u.dt, 1e-3));
        assert!(close(u.rate(1.0), 1000.0));
    }

    /// Water (nu = 1.0e-6 m^2/s, 998 kg/m^3) at 0.2 m/s in a pipe of 5 cm diameter, the
    /// diameter resolved by 50 cells, the mean velocity 0.05 cells/step, worked by hand:
    /// Re = 0.2 * 0.05 / 1e-6 = 10,000; dx = 1 mm; dt = 1e-3 * 0.05 / 0.2 = 2.5e-4 s;
    /// nu_lattice = 1e-6 * 2.5e-4 / 1e-6 = 2.5e-4 (= 0.05 * 50 / 10,000); tau = 0.50075;
    /// a lattice pressure of 1 is 998 * (1e-3 / 2.5e-4)^2 = 15,968 Pa.
    #[test]
    fn water_in_a_pipe_by_hand() {
        let u = units(0.05, 50.0, 0.2, 0.05, 998.0, 3);
        assert!(close(u.dx, 1e-3));
        assert!(close(u.dt, 2.5e-4));
        assert!(close(u.lattice_viscosity(1.0e-6), 2.5e-4));
        assert!(close(u.tau_of(1.0e-6), 0.50075));
        assert!((u.reynolds(2.5e-4) - 10_000.0).abs() < 1e-8);
        assert!(close(u.pressure(1.0), 15_968.0));
        // A density 1 % above rest: c_s^2 0.01 = 1/300 in lattice units, 53.23 Pa.
        assert!(close(u.pressure_of_density(1.01, 1.0), 15_968.0 * 0.01 / 3.0));
        // Simulating one second takes 4,000 steps.
        assert!(close(u.lattice_time(1.0), 4000.0));
        // The modelled speed of sound is c_s dx/dt = 4 / sqrt(3) m/s.
        assert!(close(u.sound_speed(), 4.0 / 3f64.sqrt()));
    }

    #[test]
    fn forces_are_newtons_in_3d_and_newtons_per_metre_in_2d() {
        let u3 = units(0.1, 20.0, 0.5, 0.1, 1000.0, 3);
        let u2 = units(0.1, 20.0, 0.5, 0.1, 1000.0, 2);
        // rho dx^4 / dt^2 = 1000 * 6.25e-10 / 1e-6 = 0.625 N; rho dx^3 / dt^2 = 125 N/m.
        assert!(close(u3.force(1.0), 0.625));
        assert!(close(u2.force(1.0), 125.0));
        assert_eq!((u3.force_unit(), u2.force_unit()), ("N", "N/m"));
        // A 2D force per cell of depth over the depth of one cell is the 3D force of that slab.
        assert!(close(u2.force(3.0) * u2.dx, u3.force(3.0)));
        // A drag coefficient is the same in both systems: 2 F / (rho U^2 D) in 2D.
        let f = 0.02;
        let cd_lattice = 2.0 * f / (1.0 * 0.1 * 0.1 * 20.0);
        let cd_si = 2.0 * u2.force(f) / (1000.0 * 0.5 * 0.5 * 0.1);
        assert!(close(cd_lattice, cd_si));
        assert!(u2.rows().iter().any(|(k, v)| *k == "force 1" && v == "125 N/m (per metre of depth)"), "{:?}", u2.rows());
    }

    #[test]
    fn bad_references_are_refused() {
        let ok = Reference { length: 0.1, cells: 20.0, velocity: 0.5, lattice_velocity: 0.1, density: 1.2, lattice_density: 1.0 };
        for bad in [
            Reference { length: 0.0, ..ok },
            Reference { cells: -1.0, ..ok },
            Reference { velocity: f64::NAN, ..ok },
            Reference { lattice_velocity: f64::INFINITY, ..ok },
            Reference { density: 0.0, ..ok },
        ] {
            assert!(Units::new(bad, 3).is_err(), "{bad:?}");
        }
        let e = Units::new(Reference { length: 1e-300, cells: 1e300, ..ok }, 3).unwrap_err();
        assert!(e.contains("out of the range"), "{e}");
        // Each value fine alone, the force factor (rho dx^4/dt^2) beyond any number.
        let e = Units::new(Reference { length: 1e300, velocity: 1e300, ..ok }, 3).unwrap_err();
        assert!(e.contains("1 cell 5e298 m") && e.contains("outside the 1e-150 to 1e150") && e.contains("give a length"), "{e}");
        // The force factor rho dx^4 / dt^2 alone out of reach (every other factor fine).
        let e = Units::new(Reference { length: 1e40, cells: 1.0, velocity: 1e40, lattice_velocity: 1.0, ..ok }, 3).unwrap_err();
        assert!(e.contains("a force of 1"), "{e}");
        // Every factor of a usable scale is a finite number, from microfluidics to weather.
        for (length, velocity) in [(1e-6, 1e-4), (0.1, 0.5), (1e5, 30.0)] {
            let u = Units::new(Reference { length, velocity, ..ok }, 3).unwrap();
            assert!(u.factors().iter().all(|f| f.2.is_finite() && f.2 > 0.0), "{u:?}");
        }
    }

    #[test]
    fn numbers_for_people() {
        assert_eq!(si(0.417), "0.417");
        assert_eq!(si(5.0), "5");
        assert_eq!(si(1.5e-5), "1.5e-5");
        assert_eq!(si(25_000.0), "25000");
        assert_eq!(si(2.5e5), "2.5e5");
        assert_eq!(si(-0.0012346), "-0.001235");
        assert_eq!(si(0.0), "0");
    }
}
