//! Finite-strain hyperelasticity: strain-energy densities `ψ(F; p)` written once, generic over
//! the scalar, and the drivers that turn them into the first Piola–Kirchhoff stress
//! `P = ∂ψ/∂F`, the tangent `∂P/∂F` (9×9) and the parameter derivatives `∂P/∂p` by dual numbers.
//!
//! # Laws
//!
//! - [`Ogden`]: `ψ = Σ_p 2μ_p/α_p² (λ̄₁^α_p + λ̄₂^α_p + λ̄₃^α_p − 3) + κ U(J)` on the isochoric
//!   principal stretches `λ̄_i = J^{-1/3} λ_i`. With this `2μ/α²` form the small-strain shear
//!   modulus is `G = Σ_p μ_p` and the bulk modulus is `κ` (every [`Volumetric`] has
//!   `U(1) = U'(1) = 0`, `U''(1) = 1`). The other common form `Σ μ̃_p/α_p (…)`
//!   (data/treloar/README.md, DESIGN.md) is the same law with `μ̃_p = 2μ_p/α_p`; the Ogden
//!   stability condition `μ̃_p α_p > 0` reads `μ_p > 0` here.
//! - [`NeoHookean`]: `ψ = μ/2 (Ī₁ − 3) + κ U(J)` = Ogden with one term `(μ, α = 2)`.
//! - [`MooneyRivlin`]: `ψ = C₁₀ (Ī₁ − 3) + C₀₁ (Ī₂ − 3) + κ U(J)` = Ogden with the terms
//!   `(2C₁₀, 2)` and `(2C₀₁, −2)` (because `λ̄₁λ̄₂λ̄₃ = 1` gives `Ī₂ = Σ λ̄_i^{-2}`).
//! - [`SaintVenantKirchhoff`]: `ψ = λ/2 (tr E)² + μ tr(E²)`, `E = ½(FᵀF − I)`, from `(E, ν)`.
//! - [`ThermalExpansion`]: `F = F_m F_θ`, `F_θ = θ I`, `θ = 1 + α(T − T_ref)`;
//!   `ψ(F, T) = ψ_m(F/θ)` per unit reference volume (no `J_θ` factor, which keeps the
//!   small-strain limit equal to linear thermo-elasticity `σ = C : (ε − α ΔT I)`).
//!
//! # Equal principal stretches
//!
//! `Σ_i λ̄_i^α = Σ_i c_i^{α/2}` with `c_i` the eigenvalues of `C̄ = J^{-2/3} FᵀF` is a smooth
//! symmetric function of `C̄`, but the individual eigenvalues are not differentiable where they
//! coincide (at `F = I`, in uniaxial tension). [`Spectrum`] evaluates the sum without ever
//! differentiating a repeated eigenvalue, exactly (no perturbation), in any dual type:
//!
//! - write `C̄ = m I + D`, `m = tr C̄ / 3`, `D` deviatoric with invariants `J₂ = ½ tr D²`,
//!   `J₃ = det D` (polynomials in `F`, hence exact in dual arithmetic);
//! - **three close eigenvalues** (`√(tr D²)/m < 0.05`): the Taylor series
//!   `Σ_i f(m + d_i) = Σ_k f⁽ᵏ⁾(m)/k! tr(Dᵏ)`, `tr Dᵏ = J₂ tr Dᵏ⁻² + J₃ tr Dᵏ⁻³`
//!   (Cayley–Hamilton), summed to 8 orders beyond `ρᵏ < 1e-17`, `ρ = √(tr D²)/m` (at most
//!   k = 24), so that the truncation stays below round-off also in second derivatives;
//! - otherwise the eigenvalue `c₁ = m + d₁`, `d₁` the eigenvalue of `D` farthest from 0, is
//!   **simple** and separated from the other two by at least `|d₁|`; it is found in f64
//!   (trigonometric solution of `d³ − J₂ d − J₃ = 0`), polished by Newton steps in f64 on the
//!   characteristic polynomial `p(c) = c³ − I₁c² + I₂c − I₃` of `C` itself and refined by
//!   Newton steps on `p` in dual arithmetic (implicit-function theorem: from a value exact to
//!   round-off each step doubles the number of exact derivative orders, so one step serves
//!   first derivatives and two serve second ones); the other two are the roots of `x² − s x + q` with
//!   product `q = I₃/c₁` and sum `s = I₁ − c₁` when `c₁` is the smallest eigenvalue,
//!   `s = (I₂ − q)/c₁` when it is the largest, so their mean `m̃ = s/2` and squared
//!   half-difference `δ² = m̃² − q` follow, and `f(m̃ + δ) + f(m̃ − δ)` is summed as the even
//!   series `2 Σ_j f⁽²ʲ⁾(m̃) δ²ʲ/(2j)!` when `δ²/m̃² < 0.0025` (two close eigenvalues), directly
//!   otherwise, the smaller root as `q/(m̃ + δ)`.
//!
//! No quantity is ever divided by an eigenvalue difference smaller than `0.04 m`, so stress and
//! tangent are finite and accurate at `F = I`, at two or three equal stretches and near them.
//! No eigenvalue is obtained as a difference of larger numbers either: at extreme stretch
//! ratios (equibiaxial λ = 7 has `λ₃² ≈ 4·10⁻⁴`, so the eigenvalues of `C̄` span 10⁷) the
//! small eigenvalues keep their relative accuracy, which `m + d₁` or `m̃ − δ` would lose to
//! cancellation (a relative error of `ε m / c_min`, 10⁻¹¹ in the value and far more in the
//! second derivatives, enough to stall Newton).
//!
//! # Derivatives (how)
//!
//! All by forward-mode dual numbers on the one generic [`StrainEnergy::energy`]:
//! `P` by 9 [`Dual64`] passes (direction `e_ij`), the tangent `A_ijkl = ∂²ψ/∂F_ij∂F_kl` by 45
//! [`HyperDual64`] passes (pairs `ij ≤ kl`, symmetric), `∂P/∂p_k` by `9 n_p` [`HyperDual64`]
//! passes. num-dual is used without its nalgebra feature (scalar duals, our `[[D; 3]; 3]`).
//! Measured (release, one core): generic stress 1.7 µs, generic tangent 15 µs (22 µs at `F = I`).
//!
//! Fast path for assembly: [`Ogden::stress_and_tangent_fast`] writes `ψ = h(I₁, I₂, J)`, takes
//! the 3×3 Hessian of the scalar `h` by 6 hyper-dual passes and does the chain rule to `F` by
//! hand: 2.0 µs (3.1 µs at `F = I`), equal to the generic path to 1e-10 in the tests.
//! Third derivatives (the second-order adjoint) take the same route one order up:
//! [`Ogden::isochoric_form_gradient`] gives the gradient of `h(Ī₁, Ī₂, J; p)` at a dual point,
//! three spectral analyses shared by every term, and the finite-strain model chains it.
//! Flat index of `F_ij` is `3 i + j` everywhere.
#![allow(non_snake_case)] // F, P, C, J: the mathematical names of continuum mechanics.

use num_dual::{Dual, Dual64, DualNum, HyperDual64};

/// A 3×3 matrix of scalars, row-major: `m[i][j]`.
pub type Mat3<D> = [[D; 3]; 3];

/// The identity in f64.
pub const IDENTITY: Mat3<f64> = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];

/// Errors of the hyperelastic drivers.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HyperelasticError {
    /// `J = det F ≤ 0`: the deformation inverts or collapses the material point.
    #[error("det F = {det} is not positive (F = {F:?})")]
    NonPositiveJacobian {
        /// `det F`.
        det: f64,
        /// The deformation gradient.
        F: Mat3<f64>,
    },
    /// The energy or a derivative came out NaN or infinite.
    #[error("non-finite {what} at F = {F:?}")]
    NonFinite {
        /// Which quantity.
        what: &'static str,
        /// The deformation gradient.
        F: Mat3<f64>,
    },
}

/// A strain-energy density `ψ(F; p)` per unit reference volume, generic over the scalar.
///
/// The parameters are passed explicitly (same order as [`StrainEnergy::parameter_names`]) so
/// that dual parts can be seeded in them; [`StrainEnergy::parameters`] gives the stored values.
pub trait StrainEnergy {
    /// Names of the parameters, e.g. `["mu1", "alpha1", "kappa"]`.
    fn parameter_names(&self) -> Vec<String>;
    /// Current parameter values, same order.
    fn parameters(&self) -> Vec<f64>;
    /// `ψ(F; p)`. `F` must have `det F > 0` (the drivers check it).
    fn energy<D: DualNum<Primitive = f64> + Copy>(&self, F: &Mat3<D>, p: &[D]) -> D;
}

/// Volumetric energy `U(J)`; all have `U(1) = U'(1) = 0`, `U''(1) = 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Volumetric {
    /// `U = ½ (J − 1)²` (the project's benchmark; default).
    #[default]
    Quadratic,
    /// `U = ½ ln² J`.
    LogSquared,
    /// `U = ¼ (J² − 1 − 2 ln J)` (Simo–Taylor).
    SimoTaylor,
}

impl Volumetric {
    /// `U(J)`.
    pub fn eval<D: DualNum<Primitive = f64> + Copy>(self, J: D) -> D {
        match self {
            Volumetric::Quadratic => (J - 1.0) * (J - 1.0) * 0.5,
            Volumetric::LogSquared => {
                let l = J.ln();
                l * l * 0.5
            }
            Volumetric::SimoTaylor => (J * J - 1.0 - J.ln() * 2.0) * 0.25,
        }
    }
}

/// One Ogden term `(μ_p, α_p)` of `2μ_p/α_p² (Σ λ̄_i^α_p − 3)`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OgdenTerm {
    /// `μ_p` (contributes `μ_p` to the shear modulus).
    pub mu: f64,
    /// `α_p` (non-zero).
    pub alpha: f64,
}

/// Compressible Ogden solid on isochoric stretches (see the module docs for the formula).
/// Parameters: `mu1, alpha1, …, muN, alphaN, kappa`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Ogden {
    /// The terms.
    pub terms: Vec<OgdenTerm>,
    /// Bulk modulus `κ`.
    pub kappa: f64,
    /// Volumetric function `U`.
    pub volumetric: Volumetric,
}

impl Ogden {
    /// An Ogden solid with `U = ½(J − 1)²`. Panics on an `α_p = 0` (the `2μ/α²` form needs
    /// `α ≠ 0`; a programming mistake).
    pub fn new(terms: &[(f64, f64)], kappa: f64) -> Self {
        assert!(terms.iter().all(|t| t.1 != 0.0), "Ogden::new: some alpha_p is zero: {terms:?}");
        Self {
            terms: terms.iter().map(|&(mu, alpha)| OgdenTerm { mu, alpha }).collect(),
            kappa,
            volumetric: Volumetric::Quadratic,
        }
    }

    /// Small-strain shear modulus `G = Σ μ_p`.
    pub fn shear_modulus(&self) -> f64 {
        self.terms.iter().map(|t| t.mu).sum()
    }
}

impl StrainEnergy for Ogden {
    fn parameter_names(&self) -> Vec<String> {
        let mut n = Vec::with_capacity(2 * self.terms.len() + 1);
        for i in 1..=self.terms.len() {
            n.push(format!("mu{i}"));
            n.push(format!("alpha{i}"));
        }
        n.push("kappa".into());
        n
    }
    fn parameters(&self) -> Vec<f64> {
        let mut p: Vec<f64> = self.terms.iter().flat_map(|t| [t.mu, t.alpha]).collect();
        p.push(self.kappa);
        p
    }
    fn energy<D: DualNum<Primitive = f64> + Copy>(&self, F: &Mat3<D>, p: &[D]) -> D {
        let n = self.terms.len();
        assert_eq!(p.len(), 2 * n + 1, "Ogden::energy: {} parameters for {n} terms", p.len());
        let J = det(F);
        let cbar = isochoric_right_cauchy_green(F, J);
        let spectrum = Spectrum::new(&cbar);
        let mut psi = self.volumetric.eval(J) * p[2 * n];
        for k in 0..n {
            let (mu, alpha) = (p[2 * k], p[2 * k + 1]);
            let s = spectrum.sum_powers(alpha * 0.5);
            psi += mu * 2.0 / (alpha * alpha) * (s - 3.0);
        }
        psi
    }
}

/// Neo-Hookean in invariant form: `ψ = μ/2 (Ī₁ − 3) + κ U(J)`, `Ī₁ = J^{-2/3} tr(FᵀF)`.
/// Parameters: `mu, kappa`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NeoHookean {
    /// Shear modulus `μ`.
    pub mu: f64,
    /// Bulk modulus `κ`.
    pub kappa: f64,
    /// Volumetric function.
    pub volumetric: Volumetric,
}

impl NeoHookean {
    /// The equivalent one-term [`Ogden`] `(μ, α = 2)`.
    pub fn to_ogden(&self) -> Ogden {
        Ogden::new(&[(self.mu, 2.0)], self.kappa).with_volumetric(self.volumetric)
    }
}

impl Ogden {
    /// The same solid with another volumetric function.
    pub fn with_volumetric(mut self, volumetric: Volumetric) -> Self {
        self.volumetric = volumetric;
        self
    }
}

impl StrainEnergy for NeoHookean {
    fn parameter_names(&self) -> Vec<String> {
        vec!["mu".into(), "kappa".into()]
    }
    fn parameters(&self) -> Vec<f64> {
        vec![self.mu, self.kappa]
    }
    fn energy<D: DualNum<Primitive = f64> + Copy>(&self, F: &Mat3<D>, p: &[D]) -> D {
        let J = det(F);
        let cbar = isochoric_right_cauchy_green(F, J);
        let i1 = cbar[0][0] + cbar[1][1] + cbar[2][2];
        p[0] * 0.5 * (i1 - 3.0) + self.volumetric.eval(J) * p[1]
    }
}

/// Mooney–Rivlin in invariant form: `ψ = C₁₀(Ī₁ − 3) + C₀₁(Ī₂ − 3) + κ U(J)`,
/// `Ī₂ = ½(Ī₁² − tr C̄²)`. Shear modulus `2(C₁₀ + C₀₁)`. Parameters: `c10, c01, kappa`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MooneyRivlin {
    /// `C₁₀`.
    pub c10: f64,
    /// `C₀₁`.
    pub c01: f64,
    /// Bulk modulus `κ`.
    pub kappa: f64,
    /// Volumetric function.
    pub volumetric: Volumetric,
}

impl MooneyRivlin {
    /// The equivalent two-term [`Ogden`] `(2C₁₀, 2), (2C₀₁, −2)`.
    pub fn to_ogden(&self) -> Ogden {
        Ogden::new(&[(2.0 * self.c10, 2.0), (2.0 * self.c01, -2.0)], self.kappa)
            .with_volumetric(self.volumetric)
    }
}

impl StrainEnergy for MooneyRivlin {
    fn parameter_names(&self) -> Vec<String> {
        vec!["c10".into(), "c01".into(), "kappa".into()]
    }
    fn parameters(&self) -> Vec<f64> {
        vec![self.c10, self.c01, self.kappa]
    }
    fn energy<D: DualNum<Primitive = f64> + Copy>(&self, F: &Mat3<D>, p: &[D]) -> D {
        let J = det(F);
        let c = isochoric_right_cauchy_green(F, J);
        let i1 = c[0][0] + c[1][1] + c[2][2];
        let mut trc2 = D::from(0.0);
        for i in 0..3 {
            for j in 0..3 {
                trc2 += c[i][j] * c[j][i];
            }
        }
        let i2 = (i1 * i1 - trc2) * 0.5;
        p[0] * (i1 - 3.0) + p[1] * (i2 - 3.0) + self.volumetric.eval(J) * p[2]
    }
}

/// Saint Venant–Kirchhoff: `ψ = λ/2 (tr E)² + μ tr(E²)`, `E = ½(FᵀF − I)`, with Lamé constants
/// `λ = Eν/((1+ν)(1−2ν))`, `μ = E/(2(1+ν))`. Parameters: `young, poisson`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SaintVenantKirchhoff {
    /// Young's modulus `E`.
    pub young: f64,
    /// Poisson's ratio `ν`.
    pub poisson: f64,
}

impl StrainEnergy for SaintVenantKirchhoff {
    fn parameter_names(&self) -> Vec<String> {
        vec!["young".into(), "poisson".into()]
    }
    fn parameters(&self) -> Vec<f64> {
        vec![self.young, self.poisson]
    }
    fn energy<D: DualNum<Primitive = f64> + Copy>(&self, F: &Mat3<D>, p: &[D]) -> D {
        let (e, nu) = (p[0], p[1]);
        let lambda = e * nu / ((nu + 1.0) * (-nu * 2.0 + 1.0));
        let mu = e / ((nu + 1.0) * 2.0);
        let mut E = right_cauchy_green(F);
        for i in 0..3 {
            for j in 0..3 {
                E[i][j] = (E[i][j] - if i == j { 1.0 } else { 0.0 }) * 0.5;
            }
        }
        let tr = E[0][0] + E[1][1] + E[2][2];
        let mut tr2 = D::from(0.0);
        for i in 0..3 {
            for j in 0..3 {
                tr2 += E[i][j] * E[i][j];
            }
        }
        lambda * 0.5 * tr * tr + mu * tr2
    }
}

/// Isotropic thermal expansion `F_θ = (1 + α(T − T_ref)) I` in front of a mechanical law:
/// `ψ(F, T) = ψ_m(F / θ)`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ThermalExpansion {
    /// Linear expansion coefficient `α` [1/K].
    pub alpha: f64,
    /// Stress-free temperature `T_ref`.
    pub t_ref: f64,
}

impl ThermalExpansion {
    /// `ψ(F, T; p) = ψ_m(F/θ; p)`, `θ = 1 + α(T − T_ref)`, generic in `F`, `T` and `p`.
    pub fn energy<M: StrainEnergy, D: DualNum<Primitive = f64> + Copy>(
        &self,
        material: &M,
        F: &Mat3<D>,
        T: D,
        p: &[D],
    ) -> D {
        let theta = (T - self.t_ref) * self.alpha + 1.0;
        let inv = theta.recip();
        material.energy(&F.map(|r| r.map(|x| x * inv)), p)
    }

    /// `P(F, T)` and `∂P/∂T` (9 [`HyperDual64`] passes: `F_ij` × `T`).
    pub fn first_piola_and_temperature_derivative<M: StrainEnergy>(
        &self,
        material: &M,
        F: &Mat3<f64>,
        T: f64,
    ) -> Result<(Mat3<f64>, Mat3<f64>), HyperelasticError> {
        check_det(F)?;
        let p: Vec<HyperDual64> =
            material.parameters().into_iter().map(HyperDual64::from).collect();
        let mut P = [[0.0; 3]; 3];
        let mut dP = [[0.0; 3]; 3];
        for a in 0..9 {
            let Fd = seed_hyper(F, Some(a), None);
            let Td = HyperDual64::new(T, 0.0, 1.0, 0.0);
            let psi = self.energy(material, &Fd, Td, &p);
            P[a / 3][a % 3] = psi.eps1;
            dP[a / 3][a % 3] = psi.eps1eps2;
        }
        check_finite(F, "thermal stress", P.iter().flatten().chain(dP.iter().flatten()))?;
        Ok((P, dP))
    }
}

/// `det F`.
pub fn det<D: DualNum<Primitive = f64> + Copy>(F: &Mat3<D>) -> D {
    F[0][0] * (F[1][1] * F[2][2] - F[1][2] * F[2][1])
        - F[0][1] * (F[1][0] * F[2][2] - F[1][2] * F[2][0])
        + F[0][2] * (F[1][0] * F[2][1] - F[1][1] * F[2][0])
}

/// `cof F = det F · F⁻ᵀ` (`∂J/∂F`): `cof F_ij = F_(i+1)(j+1) F_(i+2)(j+2) − F_(i+1)(j+2) F_(i+2)(j+1)`,
/// indices mod 3.
pub fn cofactor<D: DualNum<Primitive = f64> + Copy>(F: &Mat3<D>) -> Mat3<D> {
    let mut cof = *F;
    for i in 0..3 {
        for j in 0..3 {
            let (i1, i2, j1, j2) = ((i + 1) % 3, (i + 2) % 3, (j + 1) % 3, (j + 2) % 3);
            cof[i][j] = F[i1][j1] * F[i2][j2] - F[i1][j2] * F[i2][j1];
        }
    }
    cof
}

/// `C = FᵀF`.
pub fn right_cauchy_green<D: DualNum<Primitive = f64> + Copy>(F: &Mat3<D>) -> Mat3<D> {
    let mut C = [[D::from(0.0); 3]; 3];
    for i in 0..3 {
        for j in i..3 {
            let mut s = D::from(0.0);
            for k in 0..3 {
                s += F[k][i] * F[k][j];
            }
            C[i][j] = s;
            C[j][i] = s;
        }
    }
    C
}

/// `C̄ = J^{-2/3} FᵀF` given `J = det F > 0`.
pub fn isochoric_right_cauchy_green<D: DualNum<Primitive = f64> + Copy>(
    F: &Mat3<D>,
    J: D,
) -> Mat3<D> {
    let s = J.powf(-2.0 / 3.0);
    right_cauchy_green(F).map(|r| r.map(|x| x * s))
}

/// Relative deviator size `√(tr D²)/m` below which all three eigenvalues are treated as a cluster.
const CLUSTER3: f64 = 0.05;
/// `δ²/m̃²` below which the two remaining eigenvalues are treated as a pair cluster.
const CLUSTER2: f64 = 0.0025;
/// Most terms of the three-eigenvalue series (`tr D^0 … tr D^K`); fewer are used when the
/// deviator is small (8 orders beyond where `ρᵏ < 1e-17`, so second derivatives stay exact).
const SERIES3: usize = 24;
const _: () = assert!(2 * SERIES2 <= SERIES3 + 1, "binomial tables cover both series");
/// `1/k` for the binomial coefficients of the series (index 0 unused).
const INVERSE_INTEGERS: [f64; SERIES3 + 2] = {
    let mut t = [0.0; SERIES3 + 2];
    let mut k = 1;
    while k < SERIES3 + 2 {
        t[k] = 1.0 / k as f64;
        k += 1;
    }
    t
};
/// Most terms of the pair series (`δ^0, δ^2, …, δ^{2K}`); 4 beyond `(δ²/m̃²)ʲ < 1e-17`.
const SERIES2: usize = 12;

/// The eigenvalue structure of a symmetric positive-definite 3×3 matrix, set up so that
/// `Σ_i c_i^a` is evaluated without differentiating repeated eigenvalues (module docs).
#[derive(Debug, Clone)]
pub enum Spectrum<D> {
    /// Three close eigenvalues: mean `m` and `tr Dᵏ`, `k = 0..=n`, `n ≤ 24`.
    Cluster3 {
        /// `tr C / 3`.
        m: D,
        /// `tr Dᵏ` for `k < n`, zero beyond.
        traces: [D; SERIES3 + 1],
        /// Number of terms used.
        n: usize,
    },
    /// One simple eigenvalue `c₁` and a pair with mean `m̃`, squared half-difference `δ²` and
    /// product `q = m̃² − δ²`.
    Split {
        /// The simple eigenvalue.
        c1: D,
        /// Mean of the other two.
        pair_mean: D,
        /// Squared half-difference of the other two.
        half_diff_sq: D,
        /// Product of the other two (`I₃/c₁`).
        pair_product: D,
    },
}

impl<D: DualNum<Primitive = f64> + Copy> Spectrum<D> {
    /// Analyses the symmetric matrix `c` (only its upper triangle and diagonal are read).
    pub fn new(c: &Mat3<D>) -> Self {
        let m = (c[0][0] + c[1][1] + c[2][2]) * (1.0 / 3.0);
        let d = [
            [c[0][0] - m, c[0][1], c[0][2]],
            [c[0][1], c[1][1] - m, c[1][2]],
            [c[0][2], c[1][2], c[2][2] - m],
        ];
        let trd2 = d[0][0] * d[0][0]
            + d[1][1] * d[1][1]
            + d[2][2] * d[2][2]
            + (d[0][1] * d[0][1] + d[0][2] * d[0][2] + d[1][2] * d[1][2]) * 2.0;
        let j2 = trd2 * 0.5;
        let j3 = det(&d);
        // I₂ as the sum of the principal 2×2 minors, I₃ = det C: no cancellation of large
        // terms where the eigenvalues are far apart.
        let i2 = c[0][0] * c[1][1] - c[0][1] * c[0][1] + c[0][0] * c[2][2] - c[0][2] * c[0][2]
            + c[1][1] * c[2][2]
            - c[1][2] * c[1][2];
        let i3 = det(&[
            [c[0][0], c[0][1], c[0][2]],
            [c[0][1], c[1][1], c[1][2]],
            [c[0][2], c[1][2], c[2][2]],
        ]);
        Self::from_all_invariants(m, j2, j3, i2, i3)
    }

    /// The spectrum of the isochoric `C̄` (det C̄ = 1) from its invariants `Ī₁`, `Ī₂`: `m = Ī₁/3`,
    /// `J₂ = Ī₁²/3 − Ī₂`, `J₃ = 1 − m Ī₂ + 2m³` (from `det(C̄ − mI)`), `I₂ = Ī₂`, `I₃ = 1`.
    pub fn isochoric(ib1: D, ib2: D) -> Self {
        let (m, j2, j3) = isochoric_deviator(ib1, ib2);
        Self::from_all_invariants(m, j2, j3, ib2, D::from(1.0))
    }

    /// From `m = I₁/3`, the deviatoric invariants `J₂ = ½ tr D²`, `J₃ = det D` (which choose
    /// the branch and give the f64 starting value) and the principal invariants `I₂`, `I₃` of
    /// `C` (from which the eigenvalues are computed in the split branch; module docs).
    pub fn from_all_invariants(m: D, j2: D, j3: D, i2: D, i3: D) -> Self {
        let seed = SpectrumSeed::new(m.re(), j2.re(), j3.re(), i2.re(), i3.re());
        Self::from_seed(m, j2, j3, i2, i3, seed)
    }

    /// [`Spectrum::isochoric`] with its real part already analysed
    /// ([`SpectrumSeed::isochoric`] of the real parts of `ib1`, `ib2`): several dual passes at
    /// one point share the trigonometric start and the polish of the simple eigenvalue.
    pub fn isochoric_seeded(ib1: D, ib2: D, seed: SpectrumSeed) -> Self {
        let (m, j2, j3) = isochoric_deviator(ib1, ib2);
        Self::from_seed(m, j2, j3, ib2, D::from(1.0), seed)
    }

    /// The dual part of [`Spectrum::from_all_invariants`] on the branch and real root of
    /// `seed` (which must come from the real parts of the same invariants).
    fn from_seed(m: D, j2: D, j3: D, i2: D, i3: D, seed: SpectrumSeed) -> Self {
        match seed {
            SpectrumSeed::Cluster3 { n } => {
                let mut traces = [D::from(0.0); SERIES3 + 1];
                traces[0] = D::from(3.0);
                traces[2] = j2 * 2.0;
                for k in 3..=n {
                    traces[k] = j2 * traces[k - 2] + j3 * traces[k - 3];
                }
                Spectrum::Cluster3 { m, traces, n: n + 1 }
            }
            SpectrumSeed::Split { c1: c1r, below_mean, polished } => {
                // From a value exact to round-off, each Newton step in truncated Taylor
                // arithmetic doubles the number of exact derivative orders (0 → 1 → 3 → 7):
                // ⌈log₂(n + 1)⌉ steps make all n orders the type carries exact (Dual64: one,
                // HyperDual64: two); one more when the polish did not settle.
                let steps =
                    (usize::BITS - D::NDERIV.leading_zeros()) as usize + usize::from(!polished);
                let i1 = m * 3.0;
                let mut c1 = D::from(c1r);
                for _ in 0..steps {
                    let g = ((c1 - i1) * c1 + i2) * c1 - i3;
                    let dg = (c1 * 3.0 - i1 * 2.0) * c1 + i2;
                    c1 -= g / dg;
                }
                let pair_product = i3 / c1;
                let pair_sum = if below_mean { i1 - c1 } else { (i2 - pair_product) / c1 };
                let pair_mean = pair_sum * 0.5;
                let half_diff_sq = pair_mean * pair_mean - pair_product;
                Spectrum::Split { c1, pair_mean, half_diff_sq, pair_product }
            }
        }
    }

    /// The same spectrum in another number type (each stored quantity mapped by `f`, the
    /// branch kept): lifts a spectrum into a type with more dual parts.
    pub fn map<E: DualNum<Primitive = f64> + Copy>(&self, f: impl Fn(D) -> E) -> Spectrum<E> {
        match self {
            Spectrum::Cluster3 { m, traces, n } => {
                Spectrum::Cluster3 { m: f(*m), traces: traces.map(&f), n: *n }
            }
            Spectrum::Split { c1, pair_mean, half_diff_sq, pair_product } => Spectrum::Split {
                c1: f(*c1),
                pair_mean: f(*pair_mean),
                half_diff_sq: f(*half_diff_sq),
                pair_product: f(*pair_product),
            },
        }
    }

    /// `Σ_i c_i^a` (exponent `a` may carry dual parts).
    pub fn sum_powers(&self, a: D) -> D {
        match self {
            Spectrum::Cluster3 { m, traces, n } => {
                // Σ_k binom(a, k) m^{a−k} tr Dᵏ.
                let mut coef = D::from(1.0);
                let mut sum = traces[0];
                let minv = m.recip();
                for k in 1..*n {
                    coef = coef * (a - (k - 1) as f64) * minv * (1.0 / k as f64);
                    sum += coef * traces[k];
                }
                m.powd(a) * sum
            }
            Spectrum::Split { c1, pair_mean, half_diff_sq, pair_product } => {
                let first = c1.powd(a);
                if half_diff_sq.re() < CLUSTER2 * pair_mean.re().powi(2) {
                    // 2 Σ_j binom(a, 2j) m̃^{a−2j} δ^{2j}.
                    let minv = pair_mean.recip();
                    let n = pair_series_terms(half_diff_sq.re(), pair_mean.re());
                    let mut coef = D::from(1.0);
                    let mut dpow = D::from(1.0);
                    let mut sum = D::from(1.0);
                    for k in 1..=2 * n {
                        coef = coef * (a - (k - 1) as f64) * minv * (1.0 / k as f64);
                        if k % 2 == 0 {
                            dpow *= *half_diff_sq;
                            sum += coef * dpow;
                        }
                    }
                    first + pair_mean.powd(a) * sum * 2.0
                } else {
                    let larger = *pair_mean + half_diff_sq.sqrt();
                    first + larger.powd(a) + (*pair_product / larger).powd(a)
                }
            }
        }
    }

    /// `Σ_i c_i^a` for a constant exponent: the same branches and series as
    /// [`Spectrum::sum_powers`], with the binomial coefficients `binom(a, k)` as plain numbers
    /// (the series summed by Horner's rule in `1/m` or `δ²/m̃²`) and `powf` (one real power and
    /// the chain rule) where `powd` needs a logarithm and an exponential in dual arithmetic.
    pub fn sum_powers_real(&self, a: f64) -> D {
        // binom(a, k) for k = 0 ..= n (n ≤ SERIES3 + 1 and n ≤ 2 SERIES2).
        let binomials = |n: usize| {
            let mut b = [1.0; SERIES3 + 2];
            for k in 1..=n {
                b[k] = b[k - 1] * (a - (k - 1) as f64) * INVERSE_INTEGERS[k];
            }
            b
        };
        match self {
            Spectrum::Cluster3 { m, traces, n } => {
                // m^a Σ_{k<n} binom(a, k) tr Dᵏ m^{−k}.
                let b = binomials(*n);
                let minv = m.recip();
                let mut acc = traces[*n - 1] * b[*n - 1];
                for k in (0..*n - 1).rev() {
                    acc = acc * minv + traces[k] * b[k];
                }
                m.powf(a) * acc
            }
            Spectrum::Split { c1, pair_mean, half_diff_sq, pair_product } => {
                let first = c1.powf(a);
                if half_diff_sq.re() < CLUSTER2 * pair_mean.re().powi(2) {
                    // 2 m̃^a Σ_{j≤n} binom(a, 2j) t^j with t = δ²/m̃².
                    let n = pair_series_terms(half_diff_sq.re(), pair_mean.re());
                    let b = binomials(2 * n);
                    let minv = pair_mean.recip();
                    let t = *half_diff_sq * minv * minv;
                    let mut acc = D::from(b[2 * n]);
                    for j in (0..n).rev() {
                        acc = acc * t + b[2 * j];
                    }
                    first + pair_mean.powf(a) * acc * 2.0
                } else {
                    let larger = *pair_mean + half_diff_sq.sqrt();
                    first + larger.powf(a) + (*pair_product / larger).powf(a)
                }
            }
        }
    }
}

/// `(m, J₂, J₃)` of the isochoric `C̄` from `Ī₁`, `Ī₂` (see [`Spectrum::isochoric`]).
fn isochoric_deviator<D: DualNum<Primitive = f64> + Copy>(ib1: D, ib2: D) -> (D, D, D) {
    let m = ib1 * (1.0 / 3.0);
    let j2 = ib1 * ib1 * (1.0 / 3.0) - ib2;
    let j3 = -m * ib2 + m * m * m * 2.0 + 1.0;
    (m, j2, j3)
}

/// The real-valued analysis behind a [`Spectrum`]: the branch, and in the split branch the
/// simple eigenvalue to round-off (trigonometric start, Newton polish on the characteristic
/// polynomial). Dual passes at the same point share it ([`Spectrum::isochoric_seeded`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SpectrumSeed {
    /// Three close eigenvalues: the series has `tr Dᵏ` up to `k = n`.
    Cluster3 {
        /// Highest power of the deviator kept.
        n: usize,
    },
    /// The simple eigenvalue `c1` (the one farthest from the mean); `below_mean` when it lies
    /// below the mean; `polished` when its Newton polish settled to round-off.
    Split {
        /// The simple eigenvalue.
        c1: f64,
        /// `c1` lies below the mean `m`.
        below_mean: bool,
        /// The polish settled.
        polished: bool,
    },
}

impl SpectrumSeed {
    /// From `m = I₁/3`, `J₂`, `J₃`, `I₂`, `I₃` (as in [`Spectrum::from_all_invariants`]).
    pub fn new(mr: f64, j2r: f64, j3r: f64, i2r: f64, i3r: f64) -> Self {
        let trd2 = 2.0 * j2r;
        if trd2 < (CLUSTER3 * mr).powi(2) {
            // tr Dᵏ ~ ρᵏ and its r-th derivatives ~ ρ^{k−r}: keep 8 orders beyond 1e-17.
            let rho = trd2.max(0.0).sqrt() / mr;
            let n = if rho > 1e-300 {
                (8 + (-39.2 / rho.ln()).ceil() as usize).min(SERIES3)
            } else {
                8
            };
            return SpectrumSeed::Cluster3 { n };
        }
        // Trigonometric eigenvalues of the real deviator; pick the one farthest from 0.
        let p = (j2r / 3.0).sqrt();
        let r = (j3r / (2.0 * p * p * p)).clamp(-1.0, 1.0);
        let phi = r.acos() / 3.0;
        let d_max = 2.0 * p * phi.cos();
        let d_min = 2.0 * p * (phi + 2.0 * std::f64::consts::PI / 3.0).cos();
        let mut d1r = if d_max.abs() >= d_min.abs() { d_max } else { d_min };
        for _ in 0..4 {
            let g = d1r * d1r * d1r - j2r * d1r - j3r;
            let dg = 3.0 * d1r * d1r - j2r;
            d1r -= g / dg;
        }
        // Polish c₁ on p(c) = c³ − I₁c² + I₂c − I₃, whose coefficients carry no cancellation:
        // a small c₁ keeps its relative accuracy (m + d₁ would not).
        let i1r = 3.0 * mr;
        let poly = |c: f64| ((c - i1r) * c + i2r) * c - i3r;
        let slope = |c: f64| (3.0 * c - 2.0 * i1r) * c + i2r;
        let mut c1r = mr + d1r;
        if d1r < 0.0 {
            // The smallest root lies above I₃/I₂ (p is increasing and concave below it).
            c1r = c1r.max(i3r / i2r);
        }
        let mut polished = false;
        for _ in 0..6 {
            let dg = slope(c1r);
            if dg == 0.0 || !dg.is_finite() {
                break;
            }
            let next = c1r - poly(c1r) / dg;
            if next.is_nan() || next <= 0.0 {
                break;
            }
            let settled = (next - c1r).abs() <= 4.0 * f64::EPSILON * c1r;
            c1r = next;
            if settled {
                polished = true;
                break;
            }
        }
        SpectrumSeed::Split { c1: c1r, below_mean: d1r < 0.0, polished }
    }

    /// The seed of [`Spectrum::isochoric`] at `Ī₁`, `Ī₂`.
    pub fn isochoric(ib1: f64, ib2: f64) -> Self {
        let (m, j2, j3) = isochoric_deviator(ib1, ib2);
        SpectrumSeed::new(m, j2, j3, ib2, 1.0)
    }
}

/// Terms `j = 1 ..= n` of the pair series in `t = δ²/m̃²`: 4 beyond `tʲ < 1e-17`.
fn pair_series_terms(half_diff_sq: f64, pair_mean: f64) -> usize {
    let r = half_diff_sq.abs() / (pair_mean * pair_mean);
    if r > 1e-300 { (4 + (-39.2 / r.ln()).ceil() as usize).min(SERIES2) } else { 4 }
}

fn check_det(F: &Mat3<f64>) -> Result<(), HyperelasticError> {
    let j = det(F);
    if j > 0.0 { Ok(()) } else { Err(HyperelasticError::NonPositiveJacobian { det: j, F: *F }) }
}

fn check_finite<'a>(
    F: &Mat3<f64>,
    what: &'static str,
    mut values: impl Iterator<Item = &'a f64>,
) -> Result<(), HyperelasticError> {
    if values.all(|v| v.is_finite()) {
        Ok(())
    } else {
        Err(HyperelasticError::NonFinite { what, F: *F })
    }
}

fn seed_hyper(F: &Mat3<f64>, a: Option<usize>, b: Option<usize>) -> Mat3<HyperDual64> {
    let mut Fd = F.map(|r| r.map(HyperDual64::from));
    if let Some(a) = a {
        Fd[a / 3][a % 3].eps1 = 1.0;
    }
    if let Some(b) = b {
        Fd[b / 3][b % 3].eps2 = 1.0;
    }
    Fd
}

/// `ψ(F)` with the material's stored parameters.
pub fn energy<M: StrainEnergy>(material: &M, F: &Mat3<f64>) -> Result<f64, HyperelasticError> {
    check_det(F)?;
    let psi = material.energy(F, &material.parameters());
    check_finite(F, "energy", std::iter::once(&psi))?;
    Ok(psi)
}

/// First Piola–Kirchhoff stress `P_ij = ∂ψ/∂F_ij` (9 [`Dual64`] passes).
pub fn first_piola<M: StrainEnergy>(
    material: &M,
    F: &Mat3<f64>,
) -> Result<Mat3<f64>, HyperelasticError> {
    check_det(F)?;
    let p: Vec<Dual64> = material.parameters().into_iter().map(Dual64::from).collect();
    let mut P = [[0.0; 3]; 3];
    for a in 0..9 {
        let mut Fd = F.map(|r| r.map(Dual64::from));
        Fd[a / 3][a % 3].eps = 1.0;
        P[a / 3][a % 3] = material.energy(&Fd, &p).eps;
    }
    check_finite(F, "stress", P.iter().flatten())?;
    Ok(P)
}

/// Stress `P` and tangent `A[3i+j][3k+l] = ∂P_ij/∂F_kl = ∂²ψ/∂F_ij∂F_kl` (45 [`HyperDual64`]
/// passes over `ij ≤ kl`; `A` is symmetric).
pub fn stress_and_tangent<M: StrainEnergy>(
    material: &M,
    F: &Mat3<f64>,
) -> Result<(Mat3<f64>, [[f64; 9]; 9]), HyperelasticError> {
    check_det(F)?;
    let p: Vec<HyperDual64> = material.parameters().into_iter().map(HyperDual64::from).collect();
    let mut P = [[0.0; 3]; 3];
    let mut A = [[0.0; 9]; 9];
    for a in 0..9 {
        for b in a..9 {
            let psi = material.energy(&seed_hyper(F, Some(a), Some(b)), &p);
            if a == b {
                P[a / 3][a % 3] = psi.eps1;
            }
            A[a][b] = psi.eps1eps2;
            A[b][a] = psi.eps1eps2;
        }
    }
    check_finite(F, "tangent", P.iter().flatten().chain(A.iter().flatten()))?;
    Ok((P, A))
}

/// `∂P/∂p_k` for every parameter `k` (order of [`StrainEnergy::parameter_names`]);
/// `9 n_p` [`HyperDual64`] passes.
pub fn stress_parameter_derivatives<M: StrainEnergy>(
    material: &M,
    F: &Mat3<f64>,
) -> Result<Vec<Mat3<f64>>, HyperelasticError> {
    check_det(F)?;
    let values = material.parameters();
    let mut out = vec![[[0.0; 3]; 3]; values.len()];
    for (k, dk) in out.iter_mut().enumerate() {
        let mut p: Vec<HyperDual64> = values.iter().map(|&v| HyperDual64::from(v)).collect();
        p[k].eps2 = 1.0;
        for a in 0..9 {
            dk[a / 3][a % 3] = material.energy(&seed_hyper(F, Some(a), None), &p).eps1eps2;
        }
        check_finite(F, "parameter derivative", dk.iter().flatten())?;
    }
    Ok(out)
}

impl Ogden {
    /// `ψ` as a function of `I₁ = tr C`, `I₂ = ½(I₁² − tr C²)` and `J`: with `Ī₁ = J^{-2/3} I₁`,
    /// `Ī₂ = J^{-4/3} I₂`, the spectrum of `C̄` has `m = Ī₁/3`, `J₂ = Ī₁²/3 − Ī₂`,
    /// `J₃ = 1 − m Ī₂ + 2m³` (from `det(C̄ − mI)` with `det C̄ = 1`). Smooth in `(I₁, I₂, J)`
    /// (see [`Spectrum`]). Parameters as in [`StrainEnergy::energy`].
    pub fn invariant_energy<D: DualNum<Primitive = f64> + Copy>(
        &self,
        i1: D,
        i2: D,
        J: D,
        p: &[D],
    ) -> D {
        let n = self.terms.len();
        let jm23 = J.powf(-2.0 / 3.0);
        let spectrum = Spectrum::isochoric(i1 * jm23, i2 * jm23 * jm23);
        let mut psi = self.volumetric.eval(J) * p[2 * n];
        for k in 0..n {
            let (mu, alpha) = (p[2 * k], p[2 * k + 1]);
            psi += mu * 2.0 / (alpha * alpha) * (spectrum.sum_powers(alpha * 0.5) - 3.0);
        }
        psi
    }

    /// The isochoric energy `Φ(Ī₁, Ī₂) = Σ_p 2μ_p/α_p² (Σ_i λ̄_i^{α_p} − 3)` on the spectrum of
    /// `C̄` ([`Spectrum::isochoric`] of `Ī₁`, `Ī₂`) with the stored parameters: the value of
    /// [`Ogden::invariant_energy`] at `J = 1` without its volumetric term, with constant
    /// exponents ([`Spectrum::sum_powers_real`]).
    pub fn isochoric_energy<D: DualNum<Primitive = f64> + Copy>(
        &self,
        spectrum: &Spectrum<D>,
    ) -> D {
        let mut phi = D::from(0.0);
        for t in &self.terms {
            let s = spectrum.sum_powers_real(t.alpha * 0.5) - 3.0;
            phi += s * (2.0 * t.mu / (t.alpha * t.alpha));
        }
        phi
    }

    /// Directional derivatives of the isochoric parameter derivatives: for the isochoric
    /// invariants `y = (Ī₁, Ī₂)` moving along `dy`, `d/dε ∂ψ_iso/∂p_k (y + ε dy)` for the `2n`
    /// parameters `p = (μ₁, α₁, …, μₙ, αₙ)` (κ is not among them: `ψ_iso` does not depend on it).
    ///
    /// The same numbers as `n` hyper-dual passes of [`Ogden::invariant_energy`] (ε₁ along `dy`,
    /// ε₂ on `p_k`), but the spectrum of `C̄` is evaluated once instead of once per parameter:
    /// with `T_k = 2μ_k/α_k² (S(α_k/2) − 3)`, `S(a) = Σ_i c_iᵃ`, one hyper-dual evaluation of
    /// `S` with `α_k` seeded in ε₂ gives `∂²T_k/∂ε∂α_k`, and `∂T_k/∂μ_k = T_k/μ_k` is linear
    /// in `μ_k`, so its ε-derivative comes from the same evaluation.
    pub fn isochoric_parameter_directional(&self, y: [f64; 2], dy: [f64; 2]) -> Vec<f64> {
        let mut out = vec![0.0; 2 * self.terms.len()];
        self.add_isochoric_parameter_directional(y, dy, 1.0, &mut out);
        out
    }

    /// `out += w ·` [`Ogden::isochoric_parameter_directional`] (`out`: 2 per term), without
    /// a heap allocation (an element product calls it at every quadrature point).
    pub fn add_isochoric_parameter_directional(
        &self,
        y: [f64; 2],
        dy: [f64; 2],
        w: f64,
        out: &mut [f64],
    ) {
        let spectrum = Spectrum::isochoric(
            HyperDual64::new(y[0], dy[0], 0.0, 0.0),
            HyperDual64::new(y[1], dy[1], 0.0, 0.0),
        );
        for (t, pair) in self.terms.iter().zip(out.chunks_exact_mut(2)) {
            let alpha = HyperDual64::new(t.alpha, 0.0, 1.0, 0.0);
            let per_mu = (spectrum.sum_powers(alpha * 0.5) - 3.0) * 2.0 / (alpha * alpha);
            pair[0] += w * per_mu.eps1;
            pair[1] += w * (per_mu * t.mu).eps1eps2;
        }
    }

    /// The gradient of the isochoric–volumetric form
    /// `h(Ī₁, Ī₂, J; p) = Σ_k 2μ_k/α_k² (Σ_i λ̄_i^{α_k} − 3) + κ U(J)` (the spectrum of `C̄`
    /// from `Ī₁`, `Ī₂`, [`Spectrum::isochoric`]) with respect to `(Ī₁, Ī₂, J, μ₁, α₁, …, κ)`,
    /// at a point that carries dual parts: each entry is the derivative along the curve the
    /// duals describe (a hyper-dual point gives `∇h`, `∇²h·d₁`, `∇²h·d₂` and
    /// `∇²h·d₁₂ + ∇³h[d₁, d₂]`, what a third derivative through `h` needs).
    ///
    /// The spectrum is analysed three times (plain, and with `Ī₁` or `Ī₂` seeded in one more
    /// dual level), shared by every term; `μ_k` and `κ` enter linearly and cost nothing more.
    /// One pass per variable of [`Ogden::invariant_energy`] would analyse it `4 + 2n` times.
    pub fn isochoric_form_gradient<D: DualNum<Primitive = f64> + Copy>(
        &self,
        ib1: D,
        ib2: D,
        J: D,
        p: &[D],
    ) -> Vec<D> {
        let n = self.terms.len();
        let seed = SpectrumSeed::isochoric(ib1.re(), ib2.re());
        let seeded = |v: D| Dual::new(v, D::one());
        let held = |v: D| Dual::from_re(v);
        let along_ib1 = Spectrum::isochoric_seeded(seeded(ib1), held(ib2), seed);
        let along_ib2 = Spectrum::isochoric_seeded(held(ib1), seeded(ib2), seed);
        let plain = Spectrum::isochoric_seeded(ib1, ib2, seed).map(held);
        // q(a) = 2/a² (S(a/2) − 3): ∂h/∂μ_k = q(α_k), ∂h/∂α_k = μ_k q'(α_k).
        let q = |spectrum: &Spectrum<Dual<D>>, a: Dual<D>| {
            (spectrum.sum_powers(a * 0.5) - 3.0) * (a * a).recip() * 2.0
        };
        let mut grad = vec![D::zero(); 4 + 2 * n];
        for k in 0..n {
            let (mu, alpha) = (p[2 * k], p[2 * k + 1]);
            grad[0] += mu * q(&along_ib1, held(alpha)).eps;
            grad[1] += mu * q(&along_ib2, held(alpha)).eps;
            let per_mu = q(&plain, seeded(alpha));
            grad[3 + 2 * k] = per_mu.re;
            grad[4 + 2 * k] = mu * per_mu.eps;
        }
        let u = self.volumetric.eval(seeded(J));
        grad[2] = p[2 * n] * u.eps;
        grad[3 + 2 * n] = u.re;
        grad
    }

    /// Fast stress and tangent (same output as [`stress_and_tangent`], about 5–10× faster):
    /// `ψ = h(I₁, I₂, J)` ([`Ogden::invariant_energy`]); the gradient `h_a` and Hessian `h_ab`
    /// of the scalar function `h` come from 6 [`HyperDual64`] passes, the rest by hand:
    /// `P = Σ_a h_a ∂x_a/∂F`, `A = Σ_ab h_ab ∂x_a/∂F ⊗ ∂x_b/∂F + Σ_a h_a ∂²x_a/∂F∂F` with
    /// `∂I₁/∂F = 2F`, `∂I₂/∂F = 2I₁F − 2FC`, `∂J/∂F = cof F`,
    /// `∂²I₁/∂F_ij∂F_kl = 2δ_ik δ_jl`,
    /// `∂²I₂/∂F_ij∂F_kl = 4F_ij F_kl + 2I₁ δ_ik δ_jl − 2(δ_ik C_jl + F_il F_kj + B_ik δ_jl)`
    /// (`B = FFᵀ`), `∂²J/∂F_ij∂F_kl = ε_ikm ε_jln F_mn`. Tested against the generic path.
    pub fn stress_and_tangent_fast(
        &self,
        F: &Mat3<f64>,
    ) -> Result<(Mat3<f64>, [[f64; 9]; 9]), HyperelasticError> {
        check_det(F)?;
        let C = right_cauchy_green(F);
        let i1 = C[0][0] + C[1][1] + C[2][2];
        let mut trc2 = 0.0;
        for i in 0..3 {
            for j in 0..3 {
                trc2 += C[i][j] * C[i][j];
            }
        }
        let i2 = 0.5 * (i1 * i1 - trc2);
        let J = det(F);
        let x = [i1, i2, J];
        let p: Vec<HyperDual64> = self.parameters().into_iter().map(HyperDual64::from).collect();
        let mut h = [0.0; 3];
        let mut hh = [[0.0; 3]; 3];
        for a in 0..3 {
            for b in a..3 {
                let mut xd = x.map(HyperDual64::from);
                xd[a].eps1 = 1.0;
                xd[b].eps2 += 1.0;
                let v = self.invariant_energy(xd[0], xd[1], xd[2], &p);
                h[a] = v.eps1;
                hh[a][b] = v.eps1eps2;
                hh[b][a] = v.eps1eps2;
            }
        }
        // Gradients of the invariants, flat 3i + j.
        let mut FC = [[0.0; 3]; 3];
        let mut B = [[0.0; 3]; 3];
        for i in 0..3 {
            for j in 0..3 {
                for k in 0..3 {
                    FC[i][j] += F[i][k] * C[k][j];
                    B[i][j] += F[i][k] * F[j][k];
                }
            }
        }
        let cof = cofactor(F);
        let mut g = [[0.0; 9]; 3];
        for i in 0..3 {
            for j in 0..3 {
                g[0][3 * i + j] = 2.0 * F[i][j];
                g[1][3 * i + j] = 2.0 * i1 * F[i][j] - 2.0 * FC[i][j];
                g[2][3 * i + j] = cof[i][j];
            }
        }
        let mut P = [[0.0; 3]; 3];
        for i in 0..3 {
            for j in 0..3 {
                P[i][j] = (0..3).map(|a| h[a] * g[a][3 * i + j]).sum();
            }
        }
        let eps = |i: usize, j: usize, k: usize| -> f64 {
            if i == j || j == k || i == k {
                0.0
            } else if (i, j, k) == (0, 1, 2) || (i, j, k) == (1, 2, 0) || (i, j, k) == (2, 0, 1) {
                1.0
            } else {
                -1.0
            }
        };
        let d = |i: usize, j: usize| if i == j { 1.0 } else { 0.0 };
        let mut A = [[0.0; 9]; 9];
        for i in 0..3 {
            for j in 0..3 {
                let r = 3 * i + j;
                for k in 0..3 {
                    for l in 0..3 {
                        let c = 3 * k + l;
                        let mut v = 0.0;
                        for a in 0..3 {
                            for b in 0..3 {
                                v += hh[a][b] * g[a][r] * g[b][c];
                            }
                        }
                        let h1 = 2.0 * d(i, k) * d(j, l);
                        let h2 = 4.0 * F[i][j] * F[k][l] + 2.0 * i1 * d(i, k) * d(j, l)
                            - 2.0 * (d(i, k) * C[j][l] + F[i][l] * F[k][j] + B[i][k] * d(j, l));
                        let mut hj = 0.0;
                        for m in 0..3 {
                            for n in 0..3 {
                                hj += eps(i, k, m) * eps(j, l, n) * F[m][n];
                            }
                        }
                        A[r][c] = v + h[0] * h1 + h[1] * h2 + h[2] * hj;
                    }
                }
            }
        }
        check_finite(F, "tangent", P.iter().flatten().chain(A.iter().flatten()))?;
        Ok((P, A))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn ogden3() -> Ogden {
        // Treloar-like 3-term fit (MPa) with a moderately compressible κ.
        Ogden::new(&[(0.4, 1.3), (0.001, 5.0), (-0.01, -2.0)], 10.0)
    }

    fn fd_stress<M: StrainEnergy>(m: &M, F: &Mat3<f64>, h: f64) -> Mat3<f64> {
        let p = m.parameters();
        let mut P = [[0.0; 3]; 3];
        for a in 0..9 {
            let (mut fp, mut fm) = (*F, *F);
            fp[a / 3][a % 3] += h;
            fm[a / 3][a % 3] -= h;
            P[a / 3][a % 3] = (m.energy(&fp, &p) - m.energy(&fm, &p)) / (2.0 * h);
        }
        P
    }

    fn fd_tangent<M: StrainEnergy>(m: &M, F: &Mat3<f64>, h: f64) -> [[f64; 9]; 9] {
        let mut A = [[0.0; 9]; 9];
        for b in 0..9 {
            let (mut fp, mut fm) = (*F, *F);
            fp[b / 3][b % 3] += h;
            fm[b / 3][b % 3] -= h;
            let (pp, pm) = (first_piola(m, &fp).unwrap(), first_piola(m, &fm).unwrap());
            for a in 0..9 {
                A[a][b] = (pp[a / 3][a % 3] - pm[a / 3][a % 3]) / (2.0 * h);
            }
        }
        A
    }

    fn max_abs<'a>(v: impl Iterator<Item = &'a f64>) -> f64 {
        v.fold(0.0, |m, x| m.max(x.abs()))
    }

    fn diag(a: f64, b: f64, c: f64) -> Mat3<f64> {
        [[a, 0.0, 0.0], [0.0, b, 0.0], [0.0, 0.0, c]]
    }

    fn rotation(axis: [f64; 3], angle: f64) -> Mat3<f64> {
        let n = (axis[0] * axis[0] + axis[1] * axis[1] + axis[2] * axis[2]).sqrt();
        let [x, y, z] = axis.map(|v| v / n);
        let (s, c) = angle.sin_cos();
        let t = 1.0 - c;
        [
            [c + x * x * t, x * y * t - z * s, x * z * t + y * s],
            [y * x * t + z * s, c + y * y * t, y * z * t - x * s],
            [z * x * t - y * s, z * y * t + x * s, c + z * z * t],
        ]
    }

    fn matmul(a: &Mat3<f64>, b: &Mat3<f64>) -> Mat3<f64> {
        let mut c = [[0.0; 3]; 3];
        for i in 0..3 {
            for j in 0..3 {
                for k in 0..3 {
                    c[i][j] += a[i][k] * b[k][j];
                }
            }
        }
        c
    }

    /// Pseudo-random F near identity (deterministic LCG).
    fn random_F(seed: u64, amp: f64) -> Mat3<f64> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut F = IDENTITY;
        for row in F.iter_mut() {
            for v in row.iter_mut() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                *v += amp * (((s >> 11) as f64 / (1u64 << 53) as f64) - 0.5);
            }
        }
        F
    }

    #[rstest]
    #[case::identity(IDENTITY)]
    #[case::uniaxial_two_equal(diag(1.5, 0.8, 0.8))]
    #[case::three_nearly_equal(diag(1.0 + 1e-9, 1.0 - 1e-9, 1.0 + 2e-9))]
    #[case::volumetric_only(diag(1.1, 1.1, 1.1))]
    #[case::large_stretch(diag(7.0, 1.0 / 7f64.sqrt(), 1.0 / 7f64.sqrt()))]
    #[case::pure_shear(diag(3.0, 1.0, 1.0 / 3.0))]
    #[case::near_threshold(diag(1.05, 1.0, 1.0))]
    #[case::random1(random_F(1, 0.6))]
    #[case::random2(random_F(2, 0.6))]
    #[case::random_rotated_uniaxial(matmul(&rotation([1.0, 2.0, 0.5], 0.7), &diag(2.0, 0.7, 0.7)))]
    fn ogden_stress_and_tangent_match_finite_differences(#[case] F: Mat3<f64>) {
        let m = ogden3();
        let P = first_piola(&m, &F).unwrap();
        let Pfd = fd_stress(&m, &F, 1e-6);
        let scale = 1.0 + max_abs(P.iter().flatten());
        let err = max_abs(
            P.iter()
                .flatten()
                .zip(Pfd.iter().flatten())
                .map(|(a, b)| a - b)
                .collect::<Vec<_>>()
                .iter(),
        );
        assert!(err < 1e-6 * scale, "stress error {err} at {F:?}: {P:?} vs {Pfd:?}");
        let (P2, A) = stress_and_tangent(&m, &F).unwrap();
        assert!(
            P2.iter().flatten().zip(P.iter().flatten()).all(|(a, b)| (a - b).abs() < 1e-12 * scale)
        );
        let Afd = fd_tangent(&m, &F, 1e-6);
        let ascale = 1.0 + max_abs(A.iter().flatten());
        let aerr = max_abs(
            A.iter()
                .flatten()
                .zip(Afd.iter().flatten())
                .map(|(a, b)| a - b)
                .collect::<Vec<_>>()
                .iter(),
        );
        assert!(aerr < 1e-5 * ascale, "tangent error {aerr} (scale {ascale}) at {F:?}");
    }

    /// Scans paths that cross every branch threshold of [`Spectrum`] (three-cluster series ↔
    /// split; pair series ↔ direct): the energy is continuous (checked against explicit
    /// eigenvalue powers) and stress and tangent match finite differences everywhere.
    #[test]
    fn branch_thresholds_are_seamless() {
        let m = ogden3();
        let p = m.parameters();
        for path in [[1.0, 0.3, -0.5], [1.0, -0.5, -0.5], [1.0, 1.0, -2.0], [0.2, 0.0, 1.0]] {
            for i in 0..60 {
                let s = 0.002 * i as f64;
                let F = diag(1.0 + path[0] * s, 1.0 + path[1] * s, 1.0 + path[2] * s);
                // Energy from explicit principal stretches.
                let J = F[0][0] * F[1][1] * F[2][2];
                let mut psi = 0.5 * (J - 1.0) * (J - 1.0) * m.kappa;
                for t in &m.terms {
                    let sum: f64 =
                        (0..3).map(|k| (F[k][k] * J.powf(-1.0 / 3.0)).powf(t.alpha)).sum();
                    psi += 2.0 * t.mu / (t.alpha * t.alpha) * (sum - 3.0);
                }
                let e = m.energy(&F, &p);
                assert!((e - psi).abs() < 1e-15 * (1.0 + psi.abs()), "s = {s}: {e} vs {psi}");
                let P = first_piola(&m, &F).unwrap();
                let Pfd = fd_stress(&m, &F, 1e-6);
                for (a, b) in P.iter().flatten().zip(Pfd.iter().flatten()) {
                    assert!((a - b).abs() < 1e-8, "s = {s}: stress {a} vs {b}");
                }
                let (_, A) = stress_and_tangent(&m, &F).unwrap();
                let Afd = fd_tangent(&m, &F, 1e-6);
                for (a, b) in A.iter().flatten().zip(Afd.iter().flatten()) {
                    assert!((a - b).abs() < 1e-7 * (1.0 + a.abs()), "s = {s}: tangent {a} vs {b}");
                }
            }
        }
    }

    /// The fast path equals the generic dual-number path at random and special states.
    #[rstest]
    #[case(IDENTITY)]
    #[case(diag(1.5, 0.8, 0.8))]
    #[case(diag(1.0 + 1e-9, 1.0 - 1e-9, 1.0 + 2e-9))]
    #[case(diag(7.0, 1.0 / 7f64.sqrt(), 1.0 / 7f64.sqrt()))]
    #[case(diag(1.03, 1.0, 0.99))]
    #[case(random_F(11, 0.6))]
    #[case(random_F(12, 1.0))]
    #[case(matmul(&rotation([1.0, 2.0, 0.5], 0.7), &diag(2.0, 0.7, 0.7)))]
    fn fast_path_matches_generic(#[case] F: Mat3<f64>) {
        let m = ogden3().with_volumetric(Volumetric::SimoTaylor);
        let (P, A) = stress_and_tangent(&m, &F).unwrap();
        let (Pf, Af) = m.stress_and_tangent_fast(&F).unwrap();
        let ps = 1.0 + max_abs(P.iter().flatten());
        let as_ = 1.0 + max_abs(A.iter().flatten());
        for (a, b) in P.iter().flatten().zip(Pf.iter().flatten()) {
            assert!((a - b).abs() < 1e-10 * ps, "stress {a} vs {b} at {F:?}");
        }
        for (a, b) in A.iter().flatten().zip(Af.iter().flatten()) {
            assert!((a - b).abs() < 1e-9 * as_, "tangent {a} vs {b} at {F:?}");
        }
    }

    /// The tangent at F = I equals the isotropic small-strain tensor with G = Σμ, K = κ:
    /// A_ijkl = K δ_ij δ_kl + G (δ_ik δ_jl + δ_il δ_jk − ⅔ δ_ij δ_kl).
    #[rstest]
    #[case(Volumetric::Quadratic)]
    #[case(Volumetric::LogSquared)]
    #[case(Volumetric::SimoTaylor)]
    fn small_strain_limit_is_linear_elasticity(#[case] vol: Volumetric) {
        let m = ogden3().with_volumetric(vol);
        let (G, K) = (m.shear_modulus(), m.kappa);
        let (P, A) = stress_and_tangent(&m, &IDENTITY).unwrap();
        assert!(max_abs(P.iter().flatten()) < 1e-14);
        let d = |i: usize, j: usize| if i == j { 1.0 } else { 0.0 };
        for i in 0..3 {
            for j in 0..3 {
                for k in 0..3 {
                    for l in 0..3 {
                        let e = K * d(i, j) * d(k, l)
                            + G * (d(i, k) * d(j, l) + d(i, l) * d(j, k)
                                - 2.0 / 3.0 * d(i, j) * d(k, l));
                        let a = A[3 * i + j][3 * k + l];
                        assert!((a - e).abs() < 1e-12 * K, "A[{i}{j}{k}{l}] = {a}, expected {e}");
                    }
                }
            }
        }
        // And a small strain gives σ = 2G ε_dev + K tr ε I to first order.
        let eps = 1e-7;
        let F = [[1.0 + eps, 0.5 * eps, 0.0], [0.5 * eps, 1.0, 0.0], [0.0, 0.0, 1.0 - 0.3 * eps]];
        let P = first_piola(&m, &F).unwrap();
        let tr = 0.7 * eps;
        let sigma_xx = 2.0 * G * (eps - tr / 3.0) + K * tr;
        assert!((P[0][0] - sigma_xx).abs() < 1e-5 * sigma_xx.abs());
        assert!((P[0][1] - G * eps).abs() < 1e-5 * G * eps);
    }

    #[rstest]
    #[case(random_F(3, 0.8))]
    #[case(diag(2.0, 0.7, 0.7))]
    #[case(IDENTITY)]
    fn frame_indifference_and_rigid_rotation(#[case] F: Mat3<f64>) {
        let m = ogden3();
        let Q = rotation([0.3, -1.0, 2.0], 1.1);
        let psi = energy(&m, &F).unwrap();
        let psi_q = energy(&m, &matmul(&Q, &F)).unwrap();
        assert!((psi - psi_q).abs() < 1e-12 * (1.0 + psi.abs()), "{psi} vs {psi_q}");
        let P = first_piola(&m, &Q).unwrap();
        assert!(max_abs(P.iter().flatten()) < 1e-12, "rotation gives stress {P:?}");
    }

    #[rstest]
    #[case(IDENTITY)]
    #[case(diag(1.4, 0.9, 0.9))]
    #[case(random_F(4, 0.7))]
    #[case(diag(1.0 + 1e-9, 1.0 - 1e-9, 1.0 + 2e-9))]
    fn invariant_forms_equal_their_ogden_special_cases(#[case] F: Mat3<f64>) {
        let nh = NeoHookean { mu: 0.7, kappa: 5.0, volumetric: Volumetric::LogSquared };
        let mr =
            MooneyRivlin { c10: 0.3, c01: 0.05, kappa: 5.0, volumetric: Volumetric::SimoTaylor };
        for (a, b) in [
            (stress_and_tangent(&nh, &F).unwrap(), stress_and_tangent(&nh.to_ogden(), &F).unwrap()),
            (stress_and_tangent(&mr, &F).unwrap(), stress_and_tangent(&mr.to_ogden(), &F).unwrap()),
        ] {
            for (x, y) in a.0.iter().flatten().zip(b.0.iter().flatten()) {
                assert!((x - y).abs() < 1e-12 * (1.0 + x.abs()), "stress {x} vs {y}");
            }
            for (x, y) in a.1.iter().flatten().zip(b.1.iter().flatten()) {
                assert!((x - y).abs() < 1e-10 * (1.0 + x.abs()), "tangent {x} vs {y}");
            }
        }
    }

    #[test]
    fn saint_venant_kirchhoff_matches_closed_form() {
        let m = SaintVenantKirchhoff { young: 200.0, poisson: 0.3 };
        let F = random_F(5, 0.5);
        let P = first_piola(&m, &F).unwrap();
        // P = F S, S = λ tr E I + 2 μ E.
        let (l, mu) = (200.0 * 0.3 / (1.3 * 0.4), 200.0 / 2.6);
        let C = right_cauchy_green(&F);
        let mut S = [[0.0; 3]; 3];
        let trE = 0.5 * (C[0][0] + C[1][1] + C[2][2] - 3.0);
        for i in 0..3 {
            for j in 0..3 {
                let e = 0.5 * (C[i][j] - IDENTITY[i][j]);
                S[i][j] = l * trE * IDENTITY[i][j] + 2.0 * mu * e;
            }
        }
        let Pe = matmul(&F, &S);
        for (x, y) in P.iter().flatten().zip(Pe.iter().flatten()) {
            assert!((x - y).abs() < 1e-10 * 200.0, "{x} vs {y}");
        }
    }

    #[test]
    fn parameter_derivatives_match_finite_differences() {
        let m = ogden3();
        let F = random_F(6, 0.5);
        let dP = stress_parameter_derivatives(&m, &F).unwrap();
        let p0 = m.parameters();
        for k in 0..p0.len() {
            let h = 1e-6 * (1.0 + p0[k].abs());
            let mut mp = m.clone();
            let mut mm = m.clone();
            let set = |o: &mut Ogden, v: f64| {
                if k == p0.len() - 1 {
                    o.kappa = v
                } else if k % 2 == 0 {
                    o.terms[k / 2].mu = v
                } else {
                    o.terms[k / 2].alpha = v
                }
            };
            set(&mut mp, p0[k] + h);
            set(&mut mm, p0[k] - h);
            let (pp, pm) = (first_piola(&mp, &F).unwrap(), first_piola(&mm, &F).unwrap());
            for a in 0..9 {
                let fd = (pp[a / 3][a % 3] - pm[a / 3][a % 3]) / (2.0 * h);
                let ad = dP[k][a / 3][a % 3];
                assert!(
                    (fd - ad).abs() < 1e-6 * (1.0 + ad.abs()),
                    "param {k} entry {a}: {ad} vs {fd}"
                );
            }
        }
    }

    #[test]
    fn thermal_expansion_is_stress_free_and_derivative_matches() {
        let m = ogden3();
        let th = ThermalExpansion { alpha: 1e-3, t_ref: 293.0 };
        let theta = 1.0 + 1e-3 * 50.0;
        let (P, _) = th
            .first_piola_and_temperature_derivative(&m, &diag(theta, theta, theta), 343.0)
            .unwrap();
        assert!(max_abs(P.iter().flatten()) < 1e-12, "free expansion gives stress {P:?}");
        let F = random_F(7, 0.3);
        let (_, dP) = th.first_piola_and_temperature_derivative(&m, &F, 320.0).unwrap();
        let h = 1e-3;
        let (pp, _) = th.first_piola_and_temperature_derivative(&m, &F, 320.0 + h).unwrap();
        let (pm, _) = th.first_piola_and_temperature_derivative(&m, &F, 320.0 - h).unwrap();
        for a in 0..9 {
            let fd = (pp[a / 3][a % 3] - pm[a / 3][a % 3]) / (2.0 * h);
            assert!((fd - dP[a / 3][a % 3]).abs() < 1e-7, "{fd} vs {}", dP[a / 3][a % 3]);
        }
        // Small-strain limit: clamped (F = I) heating gives P = −3K α ΔT I.
        let (P, _) =
            th.first_piola_and_temperature_derivative(&m, &IDENTITY, 293.0 + 1e-4).unwrap();
        let expected = -3.0 * m.kappa * 1e-3 * 1e-4;
        assert!((P[0][0] - expected).abs() < 1e-6 * expected.abs(), "{} vs {expected}", P[0][0]);
    }

    #[test]
    fn inverted_point_is_an_error() {
        let e = first_piola(&ogden3(), &diag(1.0, 1.0, -0.5)).unwrap_err();
        assert!(matches!(e, HyperelasticError::NonPositiveJacobian { det, .. } if det == -0.5));
    }

    #[test]
    fn spectrum_sums_match_explicit_eigenvalues() {
        // diag entries are the eigenvalues; check each branch against direct powers.
        for (c, a) in [
            ([1.0, 1.0 + 1e-3, 1.0 - 2e-3], 2.7),
            ([4.0, 0.5, 0.5 + 1e-4], -1.3),
            ([49.0, 1.0 / 7.0, 0.3], 5.0),
        ] {
            let m = diag(c[0], c[1], c[2]);
            let s = Spectrum::new(&m).sum_powers(a);
            let e: f64 = c.iter().map(|x| x.powf(a)).sum();
            assert!((s - e).abs() < 1e-13 * e.abs(), "{s} vs {e} for {c:?}");
        }
    }

    /// The constant-exponent power sum equals the general one with every derivative order a
    /// hyper-dual number carries, in each branch (three-cluster series, pair series, closed
    /// form), with the matrix moving along a symmetric direction.
    #[rstest]
    #[case::cluster3([1.0, 1.0 + 1e-3, 1.0 - 2e-3], 2.7, 0)]
    #[case::pair_series([4.0, 0.5, 0.5 + 1e-4], -1.3, 1)]
    #[case::pair_series_wide([2.0, 0.7, 0.7 * 1.09], 1.5, 1)]
    #[case::closed_form([49.0, 1.0 / 7.0, 0.3], 5.0, 2)]
    fn real_exponent_power_sum_matches_the_general_one(
        #[case] c: [f64; 3],
        #[case] a: f64,
        #[case] branch: usize,
    ) {
        let dir = [[0.3, 0.1, -0.2], [0.1, -0.4, 0.05], [-0.2, 0.05, 0.25]];
        let dir2 = [[0.1, -0.3, 0.0], [-0.3, 0.2, 0.1], [0.0, 0.1, -0.15]];
        let m: Mat3<HyperDual64> = std::array::from_fn(|i| {
            std::array::from_fn(|j| {
                let d = if i == j { c[i] } else { 0.0 };
                HyperDual64::new(d, dir[i][j], dir2[i][j], 0.0)
            })
        });
        let spectrum = Spectrum::new(&m);
        let taken = match &spectrum {
            Spectrum::Cluster3 { .. } => 0,
            Spectrum::Split { pair_mean, half_diff_sq, .. } => {
                if half_diff_sq.re < CLUSTER2 * pair_mean.re * pair_mean.re { 1 } else { 2 }
            }
        };
        assert_eq!(taken, branch, "{c:?} takes another branch");
        let general = spectrum.sum_powers(HyperDual64::from(a));
        let real = spectrum.sum_powers_real(a);
        for (g, r) in [
            (general.re, real.re),
            (general.eps1, real.eps1),
            (general.eps2, real.eps2),
            (general.eps1eps2, real.eps1eps2),
        ] {
            assert!((g - r).abs() <= 1e-12 * (1.0 + g.abs()), "{r} vs {g} for {c:?}, a = {a}");
        }
    }

    /// A seeded spectrum (the real analysis done once) equals the unseeded one in value and
    /// every derivative, in each branch.
    #[rstest]
    #[case::cluster3(3.000003005011021, 3.000003007017031)]
    #[case::pair(5.0000495049504945, 4.25019801980198)]
    #[case::split(6.125, 8.75)]
    fn seeded_isochoric_spectrum_equals_the_unseeded_one(#[case] ib1: f64, #[case] ib2: f64) {
        let y = [HyperDual64::new(ib1, 0.3, -0.2, 0.05), HyperDual64::new(ib2, -0.1, 0.4, 0.02)];
        let seed = SpectrumSeed::isochoric(ib1, ib2);
        let plain = Spectrum::isochoric(y[0], y[1]).sum_powers_real(1.7);
        let seeded = Spectrum::isochoric_seeded(y[0], y[1], seed).sum_powers_real(1.7);
        assert_eq!(
            (plain.re, plain.eps1, plain.eps2, plain.eps1eps2),
            (seeded.re, seeded.eps1, seeded.eps2, seeded.eps1eps2)
        );
    }

    /// Extreme stretch ratios (equibiaxial and pure shear at λ = 7, uniaxial compression to
    /// 1/7): the small eigenvalues of C̄ keep their relative accuracy, so the stress of both
    /// paths equals the principal-stretch formula
    /// `P_i = (Σ_p 2μ_p/α_p (λ̄_i^α_p − ⅓ Σ_j λ̄_j^α_p) + κ U'(J) J)/λ_i` to 1e-12 of the size
    /// of its terms (an eigenvalue found as `m + d₁` lost 1e-8 at λ₃ = 0.02).
    #[rstest]
    #[case::equibiaxial(diag(7.0, 7.0, 0.021))]
    #[case::equibiaxial_thinner(diag(7.0, 7.0, 0.004))]
    #[case::pure_shear(diag(7.0, 1.0, 0.15))]
    #[case::uniaxial_compression(diag(1.0 / 7.0, 2.5, 2.5))]
    fn extreme_stretch_ratios_keep_relative_accuracy(#[case] F: Mat3<f64>) {
        let m = Ogden::new(&[(0.4095, 1.3), (0.003, 5.0), (0.01, -2.0)], 1e3);
        let l = [F[0][0], F[1][1], F[2][2]];
        let J = l[0] * l[1] * l[2];
        let jm = J.powf(-1.0 / 3.0);
        let mut tau = [0.0; 3];
        let mut size = [m.kappa * ((J - 1.0) * J).abs(); 3];
        for t in &m.terms {
            let b: Vec<f64> = l.iter().map(|x| (x * jm).powf(t.alpha)).collect();
            let sum: f64 = b.iter().sum();
            for i in 0..3 {
                tau[i] += 2.0 * t.mu / t.alpha * (b[i] - sum / 3.0);
                size[i] += (2.0 * t.mu / t.alpha).abs() * sum;
            }
        }
        let exact: Vec<f64> = (0..3).map(|i| (tau[i] + m.kappa * (J - 1.0) * J) / l[i]).collect();
        let (P, A) = stress_and_tangent(&m, &F).unwrap();
        let (Pf, Af) = m.stress_and_tangent_fast(&F).unwrap();
        for i in 0..3 {
            let tol = 1e-12 * size[i] / l[i];
            assert!(
                (P[i][i] - exact[i]).abs() < tol,
                "generic P{i}{i} {} vs {}",
                P[i][i],
                exact[i]
            );
            assert!((Pf[i][i] - exact[i]).abs() < tol, "fast P{i}{i} {} vs {}", Pf[i][i], exact[i]);
        }
        let ascale = max_abs(A.iter().flatten());
        for (a, b) in A.iter().flatten().zip(Af.iter().flatten()) {
            assert!((a - b).abs() < 1e-10 * ascale, "tangent {a} vs {b}");
        }
        // The thickness entry of the tangent against central differences of the stress.
        let h = 1e-6 * l[2];
        let (mut Fp, mut Fm) = (F, F);
        Fp[2][2] += h;
        Fm[2][2] -= h;
        let fd =
            (first_piola(&m, &Fp).unwrap()[2][2] - first_piola(&m, &Fm).unwrap()[2][2]) / (2.0 * h);
        assert!((A[8][8] - fd).abs() < 1e-6 * A[8][8].abs(), "A33 {} vs {fd}", A[8][8]);
    }

    /// One spectrum for all parameters gives what one hyper-dual pass per parameter gives,
    /// at F = I (all stretches equal), two equal stretches, nearly equal and extreme ones.
    #[rstest]
    #[case::identity([3.0, 3.0], [0.2, -0.1])]
    #[case::two_equal([3.0 + 1e-9, 3.0 + 2e-9], [0.1, 0.3])]
    #[case::general([3.4, 3.9], [-0.3, 0.5])]
    #[case::extreme([49.0 + 49.0 + 1.0 / 2401.0, 2401.0 + 2.0 / 49.0], [1.0, -2.0])]
    fn isochoric_parameter_directional_matches_per_parameter_passes(
        #[case] y: [f64; 2],
        #[case] dy: [f64; 2],
    ) {
        let m = Ogden::new(&[(0.4095, 1.3), (0.003, 5.0), (0.01, -2.0)], 10.0);
        let got = m.isochoric_parameter_directional(y, dy);
        let values = m.parameters();
        let yd = [HyperDual64::new(y[0], dy[0], 0.0, 0.0), HyperDual64::new(y[1], dy[1], 0.0, 0.0)];
        assert_eq!(got.len(), values.len() - 1);
        for (k, g) in got.iter().enumerate() {
            let p: Vec<HyperDual64> = values
                .iter()
                .enumerate()
                .map(|(i, &v)| HyperDual64::new(v, 0.0, if i == k { 1.0 } else { 0.0 }, 0.0))
                .collect();
            let want = m.invariant_energy(yd[0], yd[1], HyperDual64::from(1.0), &p).eps1eps2;
            assert!((g - want).abs() <= 1e-12 * want.abs().max(1e-12), "p{k}: {g} vs {want}");
        }
    }
}
