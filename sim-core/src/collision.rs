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
    /// Recursive regularized BGK: the non-equilibrium part is rebuilt from its stress before
    /// relaxation (stable at tau close to 1/2, for high Reynolds numbers).
    Regularized,
}

impl Collision {
    /// All operators.
    pub const ALL: [Collision; 4] = [Collision::Bgk, Collision::Trt, Collision::Smagorinsky, Collision::Regularized];
    /// Name as written in scene files.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Collision::Bgk => "bgk",
            Collision::Trt => "trt",
            Collision::Smagorinsky => "smagorinsky",
            Collision::Regularized => "regularized",
        }
    }
}

impl std::fmt::Display for Collision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The TRT "magic" parameter Lambda = (tau+ - 1/2)(tau- - 1/2) where [`trt_tau_minus`] keeps
/// it: 1/4, the value of best stability in the bulk (Ginzburg, Verhaeghe and d'Humieres 2008,
/// "Two-relaxation-time lattice Boltzmann scheme: about parametrization, velocity, pressure
/// and mixed boundary conditions").
pub const TRT_MAGIC: f32 = 0.25;

/// The most the odd relaxation time's excess over 1/2 may be, as a multiple of the even one's:
/// `tau- - 1/2 <= TRT_MAX_ODD_RATIO (tau+ - 1/2)`.
///
/// With Lambda fixed, `tau- = 1/2 + Lambda / (tau+ - 1/2)` grows without bound as tau+ nears
/// 1/2 (9.8 at tau+ = 0.527): the odd non-equilibrium moments then keep almost all of their
/// value from step to step. Where a boundary sets a cell's populations to an equilibrium (an
/// inlet or outlet face) it puts a jump into those moments in the fluid beside it, and a jump
/// that hardly decays grows: the default cylinder scene with TRT blew up beside its inlet by
/// step 700 while BGK, whose odd moments relax at tau+, ran on. Bounding tau- by a multiple of
/// tau+ - 1/2 keeps the odd moments decaying at a rate tied to the viscous one, so TRT tends to
/// BGK near tau+ = 1/2 (where BGK is stable, TRT is too) and keeps Lambda = 1/4 from
/// tau+ = 1/2 + 1/16 = 0.5625 up (tau- = 4.5 there). At the default scene's tau+ = 0.527 the
/// bound gives tau- = 2.23 (Lambda = 0.047).
pub const TRT_MAX_ODD_RATIO: f32 = 64.0;

/// The odd (antisymmetric) relaxation time of TRT at the even one `tau` (which sets the
/// viscosity): `1/2 + min(Lambda / (tau - 1/2), TRT_MAX_ODD_RATIO (tau - 1/2))`, see
/// [`TRT_MAGIC`] and [`TRT_MAX_ODD_RATIO`]. `kernels/common.cuh` computes the same from the
/// generated `DEF_TRT_MAGIC` and `DEF_TRT_MAX_ODD_RATIO`.
#[inline(always)]
#[must_use]
pub fn trt_tau_minus(tau: f32) -> f32 {
    let e = tau - 0.5;
    0.5 + (TRT_MAGIC / e).min(TRT_MAX_ODD_RATIO * e)
}

/// The magic parameter Lambda = (tau+ - 1/2)(tau- - 1/2) TRT runs with at `tau` (1/4 from
/// tau = 0.5625 up, less below: see [`trt_tau_minus`]).
#[must_use]
pub fn trt_lambda(tau: f32) -> f32 {
    (tau - 0.5) * (trt_tau_minus(tau) - 0.5)
}

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
        Collision::Regularized => regularized_w::<L, W>(f, &feq, &rho_m1, &u, p),
        Collision::Trt => {
            let wp = 1.0 / p.tau;
            let wm = 1.0 / trt_tau_minus(p.tau);
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

/// Non-equilibrium stress `sum_i c_i c_i (f_i - feq_i)` of `W` cells, as xx yy zz xy xz yz.
#[inline(always)]
fn neq_stress_w<L: Lat, const W: usize>(f: &Lanes<W>, feq: &Lanes<W>) -> [[f32; W]; 6] {
    let mut pi = [[0.0f32; W]; 6];
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
    pi
}

/// Local relaxation rate of the Smagorinsky model from the non-equilibrium stress.
#[inline(always)]
fn smagorinsky_omega_w<L: Lat, const W: usize>(f: &Lanes<W>, feq: &Lanes<W>, rho_m1: &[f32; W], tau0: f32, cs: f32) -> [f32; W] {
    let pi = neq_stress_w::<L, W>(f, feq);
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

/// `acc += m a` for every lane; skipped where the multiplier is zero (most Hermite polynomials
/// vanish on most velocities, and the multiplier is a constant of the direction).
#[inline(always)]
fn add_term<const W: usize>(acc: &mut [f32; W], m: f32, a: &[f32; W]) {
    if m != 0.0 {
        for l in 0..W {
            acc[l] += m * a[l];
        }
    }
}

/// Recursive regularized collision of `W` cells (Latt and Chopard 2006, "Lattice Boltzmann
/// method with regularized pre-collision distribution functions"; Coreixas, Wissocq, Puigt,
/// Boussuge and Sagaut 2017, "Recursive regularization step for high-order lattice Boltzmann
/// methods").
///
/// Before relaxation the non-equilibrium part `f - feq` is replaced by a Hermite expansion
/// `w_i sum_n H_i^(n) : a^(n) / (n! cs^2n)` built from the measured stress alone:
/// `a2 = sum_i c_i c_i (f_i - feq_i)`, and the higher orders follow from it and the velocity as
/// for a Chapman-Enskog first-order part, each a sum over the index pairs of `a2` times the
/// velocity components of the remaining indices (`a3_xyz = u_x a2_yz + u_y a2_xz + u_z a2_xy`,
/// `a4_xxyy = u_y^2 a2_xx + u_x^2 a2_yy + 4 u_x u_y a2_xy`, ...). The equilibrium is expanded on
/// the same polynomials (coefficients `rho u...u`), as the recursive scheme prescribes. After
/// collision `f_i = feq_i + w_i sum_n H_i^(n) : b^(n) / (n! cs^2n)` with
/// `b = a_eq + (1 - omega) a_neq`, where `feq` is the second-order equilibrium every operator
/// uses and the higher orders of the equilibrium enter through `b`.
///
/// Only the polynomials a lattice carries are used: on D2Q9 xxy, xyy and xxyy; on D3Q19 the six
/// of type xxy and the three of type xxyy, the latter made orthogonal to the second-order ones
/// on this lattice (`H_xxyy + H_zz / 6`) so that they add nothing to the stress; on D3Q27 all of
/// them up to xxyyzz. Density, momentum and stress therefore relax exactly as with BGK; the
/// non-hydrodynamic moments of `f - feq`, which make BGK unstable at small tau, are dropped.
///
/// With a body force the velocity carries the Guo half-force shift, so the first moment of
/// `f - feq` is `-F/2`: the rebuilt part keeps it (first-order term `-w_i c_i . F / (2 cs^2)`)
/// and the Guo source is added as with BGK, so that the moments after collision are BGK's.
#[inline(always)]
fn regularized_w<L: Lat, const W: usize>(f: &mut Lanes<W>, feq: &Lanes<W>, rho_m1: &[f32; W], u: &[[f32; W]; 3], p: &CollideParams) {
    const CS2: f32 = 1.0 / 3.0;
    let three = L::D == 3;
    let full = L::Q == 27;
    let pi = neq_stress_w::<L, W>(f, feq);
    let omega = 1.0 / p.tau;
    let k = 1.0 - omega;
    // b = (1 - omega) a_neq + a_eq. b2: xx yy zz xy xz yz; b3: xxy xxz xyy yyz xzz yzz xyz;
    // b4: xxyy xxzz yyzz xxyz xyyz xyzz; b5: xxyyz xxyzz xyyzz; b6: xxyyzz. (The second-order
    // equilibrium part is in feq already.)
    let mut b2 = [[0.0f32; W]; 6];
    let mut b3 = [[0.0f32; W]; 7];
    let mut b4 = [[0.0f32; W]; 6];
    let mut b5 = [[0.0f32; W]; 3];
    let mut b6 = [0.0f32; W];
    for l in 0..W {
        let (x, y, z) = (u[0][l], u[1][l], u[2][l]);
        let r = rho_m1[l] + 1.0;
        let (pxx, pyy, pzz, pxy, pxz, pyz) = (pi[0][l], pi[1][l], pi[2][l], pi[3][l], pi[4][l], pi[5][l]);
        for m in 0..6 {
            b2[m][l] = pi[m][l] * k;
        }
        let a_xxyy = y * y * pxx + x * x * pyy + 4.0 * x * y * pxy;
        b3[0][l] = (y * pxx + 2.0 * x * pxy) * k + r * x * x * y;
        b3[2][l] = (x * pyy + 2.0 * y * pxy) * k + r * x * y * y;
        b4[0][l] = a_xxyy * k + r * x * x * y * y;
        if three {
            let a_xxzz = z * z * pxx + x * x * pzz + 4.0 * x * z * pxz;
            let a_yyzz = z * z * pyy + y * y * pzz + 4.0 * y * z * pyz;
            b3[1][l] = (z * pxx + 2.0 * x * pxz) * k + r * x * x * z;
            b3[3][l] = (z * pyy + 2.0 * y * pyz) * k + r * y * y * z;
            b3[4][l] = (x * pzz + 2.0 * z * pxz) * k + r * x * z * z;
            b3[5][l] = (y * pzz + 2.0 * z * pyz) * k + r * y * z * z;
            b4[1][l] = a_xxzz * k + r * x * x * z * z;
            b4[2][l] = a_yyzz * k + r * y * y * z * z;
            if full {
                b3[6][l] = (x * pyz + y * pxz + z * pxy) * k + r * x * y * z;
                b4[3][l] = (y * z * pxx + 2.0 * x * z * pxy + 2.0 * x * y * pxz + x * x * pyz) * k + r * x * x * y * z;
                b4[4][l] = (x * z * pyy + 2.0 * y * z * pxy + 2.0 * x * y * pyz + y * y * pxz) * k + r * x * y * y * z;
                b4[5][l] = (x * y * pzz + 2.0 * y * z * pxz + 2.0 * x * z * pyz + z * z * pxy) * k + r * x * y * z * z;
                b5[0][l] = (z * a_xxyy + 2.0 * x * y * (y * pxz + x * pyz)) * k + r * x * x * y * y * z;
                b5[1][l] = (y * a_xxzz + 2.0 * x * z * (z * pxy + x * pyz)) * k + r * x * x * y * z * z;
                b5[2][l] = (x * a_yyzz + 2.0 * y * z * (z * pxy + y * pxz)) * k + r * x * y * y * z * z;
                b6[l] = (z * z * a_xxyy + x * x * y * y * pzz + 4.0 * x * y * z * (y * pxz + x * pyz)) * k + r * x * x * y * y * z * z;
            }
        }
    }
    let forced = p.has_force();
    for i in 0..L::Q {
        let c = L::C[i];
        let (cx, cy, cz) = (c[0] as f32, c[1] as f32, c[2] as f32);
        let (hx, hy, hz) = (cx * cx - CS2, cy * cy - CS2, cz * cz - CS2);
        // sum_n H^(n) : b^(n) / (n! cs^2n), each distinct index set once with its number of
        // permutations: 1/(2 cs^4) = 4.5, 1/(2 cs^6) = 13.5, 1/cs^6 = 27, 1/(4 cs^8) = 20.25,
        // 1/(2 cs^8) = 40.5, 1/(4 cs^10) = 60.75, 1/(8 cs^12) = 91.125.
        let mut acc = [0.0f32; W];
        add_term(&mut acc, 4.5 * hx, &b2[0]);
        add_term(&mut acc, 4.5 * hy, &b2[1]);
        add_term(&mut acc, 9.0 * cx * cy, &b2[3]);
        if three {
            add_term(&mut acc, 4.5 * hz, &b2[2]);
            add_term(&mut acc, 9.0 * cx * cz, &b2[4]);
            add_term(&mut acc, 9.0 * cy * cz, &b2[5]);
        }
        add_term(&mut acc, 13.5 * hx * cy, &b3[0]);
        add_term(&mut acc, 13.5 * hy * cx, &b3[2]);
        if three {
            add_term(&mut acc, 13.5 * hx * cz, &b3[1]);
            add_term(&mut acc, 13.5 * hy * cz, &b3[3]);
            add_term(&mut acc, 13.5 * hz * cx, &b3[4]);
            add_term(&mut acc, 13.5 * hz * cy, &b3[5]);
        }
        if full {
            add_term(&mut acc, 27.0 * cx * cy * cz, &b3[6]);
        }
        if L::Q == 19 {
            // D3Q19: the fourth-order polynomials made orthogonal to the second-order ones.
            add_term(&mut acc, 20.25 * (hx * hy + hz / 6.0), &b4[0]);
            add_term(&mut acc, 20.25 * (hx * hz + hy / 6.0), &b4[1]);
            add_term(&mut acc, 20.25 * (hy * hz + hx / 6.0), &b4[2]);
        } else {
            add_term(&mut acc, 20.25 * (hx * hy), &b4[0]);
        }
        if full {
            add_term(&mut acc, 20.25 * (hx * hz), &b4[1]);
            add_term(&mut acc, 20.25 * (hy * hz), &b4[2]);
            add_term(&mut acc, 40.5 * hx * cy * cz, &b4[3]);
            add_term(&mut acc, 40.5 * hy * cx * cz, &b4[4]);
            add_term(&mut acc, 40.5 * hz * cx * cy, &b4[5]);
            add_term(&mut acc, 60.75 * hx * hy * cz, &b5[0]);
            add_term(&mut acc, 60.75 * hx * hz * cy, &b5[1]);
            add_term(&mut acc, 60.75 * hy * hz * cx, &b5[2]);
            add_term(&mut acc, 91.125 * hx * hy * hz, &b6);
        }
        let w = L::W[i];
        if forced {
            let first = -1.5 * (cx * p.force[0] + cy * p.force[1] + cz * p.force[2]);
            let s = guo_source_w::<L, W>(i, u, p.force);
            for l in 0..W {
                f[i][l] = feq[i][l] + w * (acc[l] + k * first) + (1.0 - 0.5 * omega) * s[l];
            }
        } else {
            for l in 0..W {
                f[i][l] = feq[i][l] + w * acc[l];
            }
        }
    }
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
    fn trt_keeps_its_magic_parameter_where_the_odd_rate_stays_bounded() {
        // Lambda = 1/4 from tau = 0.5625 up (tau- = 4.5 there), continuous across.
        for tau in [0.5625f32, 0.625, 0.8, 1.0, 3.0] {
            assert!((trt_lambda(tau) - TRT_MAGIC).abs() < 1e-6, "tau {tau}: Lambda {}", trt_lambda(tau));
        }
        assert!((trt_tau_minus(0.5625) - 4.5).abs() < 1e-4);
        assert!((trt_tau_minus(0.5625 - 1e-4) - trt_tau_minus(0.5625 + 1e-4)).abs() < 2e-2);
        // Below, tau- - 1/2 is 64 (tau+ - 1/2): at the default scene's 0.527, 2.23 instead of 9.76.
        assert!((trt_tau_minus(0.527) - (0.5 + 64.0 * 0.027)).abs() < 1e-4);
        // Towards tau = 1/2 TRT tends to BGK.
        assert!((trt_tau_minus(0.501) - 0.564).abs() < 1e-5);
    }

    #[test]
    fn collisions_conserve_mass_and_momentum() {
        for k in Collision::ALL {
            conserves::<D2Q9>(k);
            conserves::<D3Q19>(k);
            conserves::<D3Q27>(k);
        }
    }

    /// A pre-collision state with a sizeable non-equilibrium part of every order: equilibrium at
    /// a moderate velocity plus a deterministic perturbation.
    fn disturbed<L: Lat>(seed: usize) -> [f32; MAX_Q] {
        let mut f = [0.0f32; MAX_Q];
        equilibrium::<L>(0.013, [0.07, -0.04, if L::D == 3 { 0.03 } else { 0.0 }], &mut f);
        for i in 0..L::Q {
            f[i] += 0.004 * (((i * 7 + seed * 3) % 11) as f32 - 5.0) * L::W[i];
        }
        f
    }

    /// Density, momentum and second moment (xx yy zz xy xz yz) of shifted DDFs.
    fn moments_012<L: Lat>(f: &[f32; MAX_Q]) -> [f64; 10] {
        let mut m = [0.0f64; 10];
        for i in 0..L::Q {
            let c = L::C[i].map(f64::from);
            let v = f64::from(f[i]);
            let w = f64::from(L::W[i]);
            m[0] += v;
            for a in 0..3 {
                m[1 + a] += c[a] * v;
            }
            // Unshifted second moment (the shift's part w_i c c is the same for both).
            let full = v + w;
            let cc = [c[0] * c[0], c[1] * c[1], c[2] * c[2], c[0] * c[1], c[0] * c[2], c[1] * c[2]];
            for k in 0..6 {
                m[4 + k] += cc[k] * full;
            }
        }
        m
    }

    fn regularized_moments_are_bgk<L: Lat>() {
        for force in [[0.0; 3], [2e-4, -1e-4, if L::D == 3 { 1.5e-4 } else { 0.0 }]] {
            for tau in [0.5005, 0.53, 0.9] {
                let f0 = disturbed::<L>(1);
                let (mut a, mut b) = (f0, f0);
                collide::<L>(&mut a, &CollideParams { kind: Collision::Bgk, tau, cs: 0.0, force });
                collide::<L>(&mut b, &CollideParams { kind: Collision::Regularized, tau, cs: 0.0, force });
                let (ma, mb) = (moments_012::<L>(&a), moments_012::<L>(&b));
                for k in 0..10 {
                    assert!(
                        (ma[k] - mb[k]).abs() < 2e-7,
                        "{:?} tau {tau} force {force:?}: moment {k}: BGK {} regularized {}",
                        L::KIND,
                        ma[k],
                        mb[k]
                    );
                }
            }
        }
    }

    /// Regularized relaxes density, momentum and stress exactly as BGK does (the rebuilt
    /// non-equilibrium part keeps the stress, and with a body force its first moment), with and
    /// without the Guo force.
    #[test]
    fn regularized_moments_match_bgk() {
        regularized_moments_are_bgk::<D2Q9>();
        regularized_moments_are_bgk::<D3Q19>();
        regularized_moments_are_bgk::<D3Q27>();
    }

    /// The output depends on the input only through density, momentum and stress: adding a
    /// perturbation without those moments (a higher-order Hermite polynomial the lattice
    /// carries orthogonally) changes nothing, where BGK passes (1 - omega) of it on.
    fn regularized_ignores_ghosts<L: Lat>(ghost: impl Fn([f32; 3]) -> f32) {
        let f0 = disturbed::<L>(2);
        let mut g = f0;
        for i in 0..L::Q {
            let c = L::C[i].map(|v| v as f32);
            g[i] += 0.01 * L::W[i] * ghost(c);
        }
        // The perturbation has no density, momentum or stress.
        let (m0, m1) = (moments_012::<L>(&f0), moments_012::<L>(&g));
        for k in 0..10 {
            assert!((m0[k] - m1[k]).abs() < 1e-8, "{:?}: the ghost has moment {k}", L::KIND);
        }
        let p = CollideParams { kind: Collision::Regularized, tau: 0.51, cs: 0.0, force: [0.0; 3] };
        let (mut a, mut b) = (f0, g);
        collide::<L>(&mut a, &p);
        collide::<L>(&mut b, &p);
        for i in 0..L::Q {
            assert!((a[i] - b[i]).abs() < 1e-7, "{:?}: direction {i}: {} vs {}", L::KIND, a[i], b[i]);
        }
        let bgk = CollideParams { kind: Collision::Bgk, ..p };
        let (mut a, mut b) = (f0, g);
        collide::<L>(&mut a, &bgk);
        collide::<L>(&mut b, &bgk);
        assert!((0..L::Q).any(|i| (a[i] - b[i]).abs() > 1e-6), "{:?}: BGK should keep the ghost", L::KIND);
    }

    #[test]
    fn regularized_drops_non_hydrodynamic_moments() {
        let h = |c: f32| c * c - 1.0 / 3.0;
        regularized_ignores_ghosts::<D2Q9>(|c| h(c[0]) * h(c[1]));
        regularized_ignores_ghosts::<D2Q9>(|c| h(c[0]) * c[1]);
        regularized_ignores_ghosts::<D3Q19>(|c| h(c[0]) * c[1] - c[1] * h(c[2]));
        regularized_ignores_ghosts::<D3Q27>(|c| c[0] * c[1] * c[2]);
        regularized_ignores_ghosts::<D3Q27>(|c| h(c[0]) * h(c[1]) * h(c[2]));
    }

    /// The lane-parallel path gives each cell the bits of the scalar path, for every operator,
    /// with and without a body force.
    fn lanes_equal_scalar<L: Lat>() {
        const W: usize = 5;
        for kind in Collision::ALL {
            for force in [[0.0; 3], [1e-4, 3e-5, if L::D == 3 { -2e-5 } else { 0.0 }]] {
                let p = CollideParams { kind, tau: 0.52, cs: 0.1, force };
                let mut lanes: Lanes<W> = [[0.0; W]; MAX_Q];
                let cells: Vec<[f32; MAX_Q]> = (0..W).map(disturbed::<L>).collect();
                for (l, c) in cells.iter().enumerate() {
                    for i in 0..L::Q {
                        lanes[i][l] = c[i];
                    }
                }
                collide_w::<L, W>(&mut lanes, &p);
                for (l, c) in cells.iter().enumerate() {
                    let mut one = *c;
                    collide::<L>(&mut one, &p);
                    for i in 0..L::Q {
                        assert_eq!(one[i].to_bits(), lanes[i][l].to_bits(), "{:?} {kind} force {force:?}: lane {l} direction {i}", L::KIND);
                    }
                }
            }
        }
    }

    #[test]
    fn lane_parallel_path_equals_scalar_path() {
        lanes_equal_scalar::<D2Q9>();
        lanes_equal_scalar::<D3Q19>();
        lanes_equal_scalar::<D3Q27>();
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
