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

/// DDFs of `W` cells side by side: `f[i][lane]`. The scalar code is the `W = 1` case of the same
/// functions, so a cell gives bit-identical results whichever path (scalar or SIMD rows) ran it.
pub type Lanes<const W: usize> = [[f32; W]; MAX_Q];

/// Density minus one and velocity (with the Guo half-force shift) of `W` cells.
#[inline(always)]
#[must_use]
pub fn moments_w<L: Lat, const W: usize>(f: &Lanes<W>, force: [f32; 3]) -> ([f32; W], [[f32; W]; 3]) {
    let mut rho_m1 = [0.0f32; W];
    let mut j = [[0.0f32; W]; 3];
    for i in 0..L::Q {
        for l in 0..W {
            rho_m1[l] += f[i][l];
        }
        let c = L::C[i];
        for a in 0..L::D {
            if c[a] > 0 {
                for l in 0..W {
                    j[a][l] += f[i][l];
                }
            } else if c[a] < 0 {
                for l in 0..W {
                    j[a][l] -= f[i][l];
                }
            }
        }
    }
    let mut u = [[0.0f32; W]; 3];
    for l in 0..W {
        let inv = 1.0 / (rho_m1[l] + 1.0);
        for a in 0..3 {
            u[a][l] = (j[a][l] + 0.5 * force[a]) * inv;
        }
    }
    (rho_m1, u)
}

/// Shifted equilibrium `feq_i - w_i` of `W` cells.
#[inline(always)]
pub fn equilibrium_w<L: Lat, const W: usize>(rho_m1: &[f32; W], u: &[[f32; W]; 3], feq: &mut Lanes<W>) {
    let mut usq = [0.0f32; W];
    for l in 0..W {
        usq[l] = 1.5 * (u[0][l] * u[0][l] + u[1][l] * u[1][l] + u[2][l] * u[2][l]);
    }
    for i in 0..L::Q {
        let c = L::C[i];
        let (cx, cy, cz) = (c[0] as f32, c[1] as f32, c[2] as f32);
        for l in 0..W {
            let cu = 3.0 * (cx * u[0][l] + cy * u[1][l] + cz * u[2][l]);
            let rho = rho_m1[l] + 1.0;
            feq[i][l] = L::W[i] * (rho_m1[l] + rho * (cu + 0.5 * cu * cu - usq[l]));
        }
    }
}

/// Guo forcing source term S_i (without the relaxation prefactor) for `W` cells.
#[inline(always)]
fn guo_source_w<L: Lat, const W: usize>(i: usize, u: &[[f32; W]; 3], force: [f32; 3]) -> [f32; W] {
    let c = L::C[i];
    let cf = [c[0] as f32, c[1] as f32, c[2] as f32];
    let mut out = [0.0f32; W];
    for l in 0..W {
        let cu = cf[0] * u[0][l] + cf[1] * u[1][l] + cf[2] * u[2][l];
        let mut s = 0.0;
        for a in 0..3 {
            s += (3.0 * (cf[a] - u[a][l]) + 9.0 * cu * cf[a]) * force[a];
        }
        out[l] = L::W[i] * s;
    }
    out
}

/// Collide `W` cells in place.
#[inline(always)]
pub fn collide_w<L: Lat, const W: usize>(f: &mut Lanes<W>, p: &CollideParams) {
    let (rho_m1, u) = moments_w::<L, W>(f, p.force);
    let mut feq = [[0.0f32; W]; MAX_Q];
    equilibrium_w::<L, W>(&rho_m1, &u, &mut feq);
    let forced = p.has_force();
    match p.kind {
        Collision::Bgk | Collision::Smagorinsky => {
            let mut omega = [1.0 / p.tau; W];
            if p.kind == Collision::Smagorinsky {
                omega = smagorinsky_omega_w::<L, W>(f, &feq, &rho_m1, p.tau, p.cs);
            }
            for i in 0..L::Q {
                for l in 0..W {
                    f[i][l] += omega[l] * (feq[i][l] - f[i][l]);
                }
            }
            if forced {
                for i in 0..L::Q {
                    let s = guo_source_w::<L, W>(i, &u, p.force);
                    for l in 0..W {
                        f[i][l] += (1.0 - 0.5 * omega[l]) * s[l];
                    }
                }
            }
        }
        Collision::Trt => {
            let wp = 1.0 / p.tau;
            let wm = 1.0 / (TRT_MAGIC / (p.tau - 0.5) + 0.5);
            for l in 0..W {
                f[0][l] += wp * (feq[0][l] - f[0][l]);
            }
            if forced {
                let s = guo_source_w::<L, W>(0, &u, p.force);
                for l in 0..W {
                    f[0][l] += (1.0 - 0.5 * wp) * s[l];
                }
            }
            let mut i = 1;
            while i < L::Q {
                for l in 0..W {
                    let (a, b) = (f[i][l], f[i + 1][l]);
                    let sp = 0.5 * (a + b) - 0.5 * (feq[i][l] + feq[i + 1][l]);
                    let sm = 0.5 * (a - b) - 0.5 * (feq[i][l] - feq[i + 1][l]);
                    f[i][l] = a - wp * sp - wm * sm;
                    f[i + 1][l] = b - wp * sp + wm * sm;
                }
                if forced {
                    let (si, sj) = (guo_source_w::<L, W>(i, &u, p.force), guo_source_w::<L, W>(i + 1, &u, p.force));
                    for l in 0..W {
                        let (gp, gm) = (0.5 * (si[l] + sj[l]), 0.5 * (si[l] - sj[l]));
                        f[i][l] += (1.0 - 0.5 * wp) * gp + (1.0 - 0.5 * wm) * gm;
                        f[i + 1][l] += (1.0 - 0.5 * wp) * gp - (1.0 - 0.5 * wm) * gm;
                    }
                }
                i += 2;
            }
        }
    }
}

/// Local relaxation rate of the Smagorinsky model from the non-equilibrium stress.
#[inline(always)]
fn smagorinsky_omega_w<L: Lat, const W: usize>(f: &Lanes<W>, feq: &Lanes<W>, rho_m1: &[f32; W], tau0: f32, cs: f32) -> [f32; W] {
    let mut pi = [[0.0f32; W]; 6]; // xx yy zz xy xz yz
    for i in 0..L::Q {
        let c = L::C[i];
        let (cx, cy, cz) = (c[0] as f32, c[1] as f32, c[2] as f32);
        for l in 0..W {
            let d = f[i][l] - feq[i][l];
            pi[0][l] += cx * cx * d;
            pi[1][l] += cy * cy * d;
            pi[2][l] += cz * cz * d;
            pi[3][l] += cx * cy * d;
            pi[4][l] += cx * cz * d;
            pi[5][l] += cy * cz * d;
        }
    }
    let mut out = [0.0f32; W];
    for l in 0..W {
        let q = (pi[0][l] * pi[0][l]
            + pi[1][l] * pi[1][l]
            + pi[2][l] * pi[2][l]
            + 2.0 * (pi[3][l] * pi[3][l] + pi[4][l] * pi[4][l] + pi[5][l] * pi[5][l]))
            .sqrt();
        let rho = rho_m1[l] + 1.0;
        let tau = 0.5 * (tau0 + (tau0 * tau0 + 18.0 * std::f32::consts::SQRT_2 * cs * cs * q / rho).sqrt());
        out[l] = 1.0 / tau;
    }
    out
}

#[inline(always)]
fn as_lanes(f: &[f32; MAX_Q]) -> Lanes<1> {
    let mut o = [[0.0f32; 1]; MAX_Q];
    for i in 0..MAX_Q {
        o[i][0] = f[i];
    }
    o
}

/// Density minus one and velocity of one cell's shifted DDFs (Guo half-force shift included).
#[inline(always)]
#[must_use]
pub fn moments<L: Lat>(f: &[f32; MAX_Q], force: [f32; 3]) -> (f32, [f32; 3]) {
    let (r, u) = moments_w::<L, 1>(&as_lanes(f), force);
    (r[0], [u[0][0], u[1][0], u[2][0]])
}

/// Shifted equilibrium `feq_i - w_i` of one cell.
#[inline(always)]
pub fn equilibrium<L: Lat>(rho_m1: f32, u: [f32; 3], feq: &mut [f32; MAX_Q]) {
    let mut o = [[0.0f32; 1]; MAX_Q];
    equilibrium_w::<L, 1>(&[rho_m1], &[[u[0]], [u[1]], [u[2]]], &mut o);
    for i in 0..L::Q {
        feq[i] = o[i][0];
    }
}

/// Collide one cell in place.
#[inline(always)]
pub fn collide<L: Lat>(f: &mut [f32; MAX_Q], p: &CollideParams) {
    let mut lf = as_lanes(f);
    collide_w::<L, 1>(&mut lf, p);
    for i in 0..L::Q {
        f[i] = lf[i][0];
    }
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
        let j0: Vec<f32> = (0..3).map(|a| (0..L::Q).map(|i| L::C[i][a] as f32 * f[i]).sum()).collect();
        let p = CollideParams { kind, tau: 0.7, cs: 0.1, force: [0.0; 3] };
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
