//! Collision operators on *shifted* DDFs (`fs_i = f_i - w_i`), all in FP32 registers.
//! Every streaming scheme calls these same functions, so schemes differ only in where DDFs
//! are loaded from and stored to.

use crate::lattice::{Lat, MAX_Q};
use serde::{Deserialize, Serialize};

/// Collision operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Collision {
    /// Single relaxation time (BGK).
    Bgk,
    /// Two relaxation times with magic parameter 1/4.
    Trt,
    /// BGK with a Smagorinsky eddy viscosity (large-eddy simulation).
    Smagorinsky,
}

impl Collision {
    /// All operators.
    pub const ALL: [Collision; 3] = [Collision::Bgk, Collision::Trt, Collision::Smagorinsky];
    /// Name as written in scene files.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Collision::Bgk => "bgk",
            Collision::Trt => "trt",
            Collision::Smagorinsky => "smagorinsky",
        }
    }
}

impl std::fmt::Display for Collision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The TRT "magic" parameter Lambda = (tau+ - 1/2)(tau- - 1/2).
pub const TRT_MAGIC: f32 = 0.25;

/// Parameters of one collision, fixed during a step, changeable between steps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CollideParams {
    /// Operator.
    pub kind: Collision,
    /// Relaxation time tau (lattice units).
    pub tau: f32,
    /// Smagorinsky constant.
    pub cs: f32,
    /// Body force density (Guo forcing), lattice units.
    pub force: [f32; 3],
}

impl CollideParams {
    /// Whether a body force is applied.
    #[inline(always)]
    #[must_use]
    pub fn has_force(&self) -> bool {
        self.force != [0.0; 3]
    }
}

/// Density minus one and velocity of shifted DDFs, with the Guo half-force shift of velocity.
#[inline(always)]
#[must_use]
pub fn moments<L: Lat>(f: &[f32; MAX_Q], force: [f32; 3]) -> (f32, [f32; 3]) {
    let mut rho_m1 = 0.0f32;
    let mut j = [0.0f32; 3];
    for i in 0..L::Q {
        rho_m1 += f[i];
        let c = L::C[i];
        for a in 0..L::D {
            if c[a] != 0 {
                j[a] += c[a] as f32 * f[i];
            }
        }
    }
    let rho = rho_m1 + 1.0;
    let inv = 1.0 / rho;
    let u = [
        (j[0] + 0.5 * force[0]) * inv,
        (j[1] + 0.5 * force[1]) * inv,
        (j[2] + 0.5 * force[2]) * inv,
    ];
    (rho_m1, u)
}

/// Shifted equilibrium `feq_i - w_i` for all directions.
#[inline(always)]
pub fn equilibrium<L: Lat>(rho_m1: f32, u: [f32; 3], feq: &mut [f32; MAX_Q]) {
    let rho = rho_m1 + 1.0;
    let usq = 1.5 * (u[0] * u[0] + u[1] * u[1] + u[2] * u[2]);
    for i in 0..L::Q {
        let c = L::C[i];
        let cu = 3.0 * (c[0] as f32 * u[0] + c[1] as f32 * u[1] + c[2] as f32 * u[2]);
        feq[i] = L::W[i] * (rho_m1 + rho * (cu + 0.5 * cu * cu - usq));
    }
}

/// Guo forcing source term S_i (without the relaxation prefactor).
#[inline(always)]
fn guo_source<L: Lat>(i: usize, u: [f32; 3], force: [f32; 3]) -> f32 {
    let c = L::C[i];
    let cf = [c[0] as f32, c[1] as f32, c[2] as f32];
    let cu = cf[0] * u[0] + cf[1] * u[1] + cf[2] * u[2];
    let mut s = 0.0;
    for a in 0..3 {
        s += (3.0 * (cf[a] - u[a]) + 9.0 * cu * cf[a]) * force[a];
    }
    L::W[i] * s
}

/// Collide in place. Returns (rho - 1, u) of the incoming DDFs.
#[inline(always)]
pub fn collide<L: Lat>(f: &mut [f32; MAX_Q], p: &CollideParams) -> (f32, [f32; 3]) {
    let (rho_m1, u) = moments::<L>(f, p.force);
    let mut feq = [0.0f32; MAX_Q];
    equilibrium::<L>(rho_m1, u, &mut feq);
    let forced = p.has_force();
    match p.kind {
        Collision::Bgk | Collision::Smagorinsky => {
            let tau = if p.kind == Collision::Smagorinsky {
                smagorinsky_tau::<L>(f, &feq, rho_m1 + 1.0, p.tau, p.cs)
            } else {
                p.tau
            };
            let omega = 1.0 / tau;
            for i in 0..L::Q {
                f[i] += omega * (feq[i] - f[i]);
            }
            if forced {
                let pre = 1.0 - 0.5 * omega;
                for i in 0..L::Q {
                    f[i] += pre * guo_source::<L>(i, u, p.force);
                }
            }
        }
        Collision::Trt => {
            let wp = 1.0 / p.tau;
            let wm = 1.0 / (TRT_MAGIC / (p.tau - 0.5) + 0.5);
            f[0] += wp * (feq[0] - f[0]);
            if forced {
                f[0] += (1.0 - 0.5 * wp) * guo_source::<L>(0, u, p.force);
            }
            let mut i = 1;
            while i < L::Q {
                let (a, b) = (f[i], f[i + 1]);
                let sp = 0.5 * (a + b) - 0.5 * (feq[i] + feq[i + 1]);
                let sm = 0.5 * (a - b) - 0.5 * (feq[i] - feq[i + 1]);
                f[i] = a - wp * sp - wm * sm;
                f[i + 1] = b - wp * sp + wm * sm;
                if forced {
                    let (si, sj) = (
                        guo_source::<L>(i, u, p.force),
                        guo_source::<L>(i + 1, u, p.force),
                    );
                    let (gp, gm) = (0.5 * (si + sj), 0.5 * (si - sj));
                    f[i] += (1.0 - 0.5 * wp) * gp + (1.0 - 0.5 * wm) * gm;
                    f[i + 1] += (1.0 - 0.5 * wp) * gp - (1.0 - 0.5 * wm) * gm;
                }
                i += 2;
            }
        }
    }
    (rho_m1, u)
}

/// Local relaxation time of the Smagorinsky model from the non-equilibrium stress.
#[inline(always)]
fn smagorinsky_tau<L: Lat>(
    f: &[f32; MAX_Q],
    feq: &[f32; MAX_Q],
    rho: f32,
    tau0: f32,
    cs: f32,
) -> f32 {
    let mut pi = [0.0f32; 6]; // xx yy zz xy xz yz
    for i in 0..L::Q {
        let c = L::C[i];
        let d = f[i] - feq[i];
        let (cx, cy, cz) = (c[0] as f32, c[1] as f32, c[2] as f32);
        pi[0] += cx * cx * d;
        pi[1] += cy * cy * d;
        pi[2] += cz * cz * d;
        pi[3] += cx * cy * d;
        pi[4] += cx * cz * d;
        pi[5] += cy * cz * d;
    }
    let q = (pi[0] * pi[0]
        + pi[1] * pi[1]
        + pi[2] * pi[2]
        + 2.0 * (pi[3] * pi[3] + pi[4] * pi[4] + pi[5] * pi[5]))
        .sqrt();
    0.5 * (tau0 + (tau0 * tau0 + 18.0 * std::f32::consts::SQRT_2 * cs * cs * q / rho).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lattice::{D2Q9, D3Q19, D3Q27};

    fn conserves<L: Lat>(kind: Collision) {
        let mut f = [0.0f32; MAX_Q];
        for i in 0..L::Q {
            f[i] = 0.01 * ((i * 7 % 5) as f32 - 2.0) * L::W[i];
        }
        let (r0, _) = moments::<L>(&f, [0.0; 3]);
        let j0: Vec<f32> = (0..3)
            .map(|a| (0..L::Q).map(|i| L::C[i][a] as f32 * f[i]).sum())
            .collect();
        let p = CollideParams {
            kind,
            tau: 0.7,
            cs: 0.1,
            force: [0.0; 3],
        };
        collide::<L>(&mut f, &p);
        let (r1, _) = moments::<L>(&f, [0.0; 3]);
        assert!((r0 - r1).abs() < 1e-7, "{kind}: mass");
        for a in 0..3 {
            let j1: f32 = (0..L::Q).map(|i| L::C[i][a] as f32 * f[i]).sum();
            assert!((j0[a] - j1).abs() < 1e-7, "{kind}: momentum {a}");
        }
    }

    #[test]
    fn collisions_conserve_mass_and_momentum() {
        for k in Collision::ALL {
            conserves::<D2Q9>(k);
            conserves::<D3Q19>(k);
            conserves::<D3Q27>(k);
        }
    }

    #[test]
    fn equilibrium_has_the_right_moments() {
        let mut feq = [0.0f32; MAX_Q];
        equilibrium::<D3Q19>(0.02, [0.05, -0.03, 0.01], &mut feq);
        let (r, u) = moments::<D3Q19>(&feq, [0.0; 3]);
        assert!((r - 0.02).abs() < 1e-6);
        assert!((u[0] - 0.05).abs() < 1e-6 && (u[1] + 0.03).abs() < 1e-6);
    }
}
