//! Finite-strain hyperelastic elements: Total Lagrangian kernels and their vector-Jacobian
//! products.
//!
//! # Formulation
//!
//! The unknown is the displacement u of the reference configuration X (three components per
//! node, full dof `3·n + i` as in [`crate::linear`]). At a quadrature point the deformation
//! gradient is `F = I + ∇u` (∇ with respect to X), the first Piola–Kirchhoff stress
//! `P = ∂ψ/∂F` and the tangent `A_iJkL = ∂P_iJ/∂F_kL` come from the region's
//! [`HyperelasticLaw`]. For local node a and component i, with the load factor s ∈ [0, 1]:
//!
//! `r_ai = Σ_cells ∫_Ω₀ ((∇N_a)_J P_iJ − s N_a b_i) dΩ₀ − s Σ_traction ∫_Γ₀ N_a t_i dΓ₀
//!        + s Σ_pressure ∫_Γ₀ p N_a n_i dΓ₀`,
//!
//! `K_ai,bk = ∫_Ω₀ (∇N_a)_J A_iJkL (∇N_b)_L dΩ₀`.
//!
//! Body forces b (per reference volume), tractions t and pressures p (per reference area, p
//! positive INTO the body along −n, n the outward unit normal of the reference facet given by
//! its node order) are **dead loads**: they act on the reference configuration and do not
//! follow the deformation, so the tangent has no load part and stays symmetric. Prescribed
//! displacements are `u_c = s ū_c`; fixed and roller conditions hold u_c = 0. All loads scale
//! with s, so s = 0 is the undeformed, stress-free state.
//!
//! # Thermal expansion
//!
//! With a nodal temperature T and a region's α, T_ref the deformation splits as `F = F_m F_θ`,
//! `F_θ = θ I`, `θ = 1 + α s (T_q − T_ref)` (the temperature change is ramped with the load
//! factor like every other load) and `ψ(F) = ψ_m(F/θ)` per unit reference volume
//! ([`crate::hyperelastic::ThermalExpansion`]), so `P = P_m(F/θ)/θ` and `A = A_m(F/θ)/θ²`.
//! A free body heated by ΔT takes `F = (1 + αΔT) I` with zero stress.
//!
//! # Parameters
//!
//! Each region has a flat parameter vector, named by [`HyperelasticLaw::parameter_names`]
//! (`mu1, alpha1, …, kappa` for Ogden; `mu, kappa`; `c10, c01, kappa`; `young, poisson`).
//! A per-element field `sₑ` (default 1, [`FiniteStrainModel::element_scale`]) multiplies the
//! law's shear-like parameters ([`HyperelasticLaw::scaled_parameters`]: the Ogden μ_p, the
//! Neo-Hookean μ, C₁₀ and C₀₁, Young's modulus of SVK): element e uses `pₑ,k = sₑ p_r,k` for
//! those, `p_r,k` for the others.
//!
//! # Vector-Jacobian products
//!
//! [`FiniteStrainModel::parameter_vjp`] gives `μᵀ ∂R/∂q` for a full-dof vector μ (any values at
//! constrained dofs: the full residual is differentiated, which is what a reaction-force
//! objective needs) and every parameter q: material parameters
//! (`Σ_q w (∇μ/θ) : ∂P_m/∂p_k`, one hyper-dual pass per parameter with F seeded along ∇μ),
//! the element field, body forces, tractions, pressures, prescribed displacement values
//! (`s (K_fullᵀ μ)_c` summed over the dofs a condition owns), α and T_ref, nodal temperatures
//! and node coordinates. The coordinate product of volume elements is in closed form: with
//! `G = Σ_a μ_a ⊗ ∇N_a`, `H = F − I`, `S_mL = G_iJ A_iJmL` and g_b = ∇N_b,
//!
//! `μᵀ ∂r/∂X_bk = Σ_q w [ g_bk (G : P − s μ_q · b) − (Gᵀ P g_b)_k − (Hᵀ S g_b)_k ]`
//!
//! (from `∂(∇N_a)_J/∂X_bk = −(∇N_a)_k (∇N_b)_J` and `∂ det J₀/∂X_bk = det J₀ (∇N_b)_k`);
//! facets use dual numbers. Every product is tested against finite differences.
//!
//! # Set-up
//!
//! Regions, boundary conditions, the numbering of the unknowns and the checks on them
//! (unknown groups, overlapping regions, conflicting constraints, rigid-body support) are
//! those of [`LinearElasticModel::new`], which this model uses for its topology.
//!
//! # Quadrature
//!
//! Simplices use degree `max(1, 2·order − 2)` (Tet4: 1 point, F is constant; Tet10: 4 points),
//! tensor cells and prisms degree `2·order` (Hex8: 2×2×2, Hex20/Hex27: 3×3×3). A Tet10 whose
//! mid-edge nodes are off the edge midpoints at set-up (curved) uses degree 3 (18 points): the
//! internal force of a constant stress, `P ∫ ∇N_a dΩ₀ = P ∫ cof(J₀) ∇_ξN_a dξ`, has a cubic
//! integrand there, and integrating it exactly is what makes the constant-stress patch test
//! pass. The choice is made once, so the residual stays a smooth function of the coordinates.
#![allow(non_snake_case)] // F, P, A, J: the names of continuum mechanics.

pub mod second_order;

use std::collections::HashMap;
use std::sync::Mutex;

use gradfem_kernel::{NodalDofMap, generic};
use gradfem_mesh::quadrature::ElementTable;
use gradfem_mesh::{CellType, Mesh, geometry};
use num_dual::{Dual, Dual64, DualNum, HyperDual64};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::hyperelastic::{
    HyperelasticError, Mat3, MooneyRivlin, NeoHookean, Ogden, SaintVenantKirchhoff, Spectrum,
    SpectrumSeed, StrainEnergy, Volumetric, cofactor, det, first_piola, right_cauchy_green,
    stress_and_tangent,
};
use crate::linear::{BcKind, BcSpec, Boundary, LinearElasticModel, MechanicalError, RegionSpec};

/// Largest number of nodes of a supported cell (Hex27).
const MAX_NODES: usize = 27;
/// Largest number of local dofs (Hex27 × 3).
const MAX_DOFS: usize = 3 * MAX_NODES;

/// A strain-energy law of a region (see [`crate::hyperelastic`] for the formulas).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "law", rename_all = "snake_case")]
pub enum HyperelasticLaw {
    /// Ogden, N terms, plus κ U(J). Parameters `mu1, alpha1, …, muN, alphaN, kappa`.
    Ogden(Ogden),
    /// Neo-Hookean `μ/2 (Ī₁ − 3) + κ U(J)`. Parameters `mu, kappa`.
    NeoHookean(NeoHookean),
    /// Mooney–Rivlin `C₁₀(Ī₁ − 3) + C₀₁(Ī₂ − 3) + κ U(J)`. Parameters `c10, c01, kappa`.
    MooneyRivlin(MooneyRivlin),
    /// Saint Venant–Kirchhoff. Parameters `young, poisson`.
    SaintVenantKirchhoff(SaintVenantKirchhoff),
}

impl StrainEnergy for HyperelasticLaw {
    fn parameter_names(&self) -> Vec<String> {
        match self {
            HyperelasticLaw::Ogden(m) => m.parameter_names(),
            HyperelasticLaw::NeoHookean(m) => m.parameter_names(),
            HyperelasticLaw::MooneyRivlin(m) => m.parameter_names(),
            HyperelasticLaw::SaintVenantKirchhoff(m) => m.parameter_names(),
        }
    }
    fn parameters(&self) -> Vec<f64> {
        match self {
            HyperelasticLaw::Ogden(m) => m.parameters(),
            HyperelasticLaw::NeoHookean(m) => m.parameters(),
            HyperelasticLaw::MooneyRivlin(m) => m.parameters(),
            HyperelasticLaw::SaintVenantKirchhoff(m) => m.parameters(),
        }
    }
    fn energy<D: DualNum<Primitive = f64> + Copy>(&self, F: &Mat3<D>, p: &[D]) -> D {
        match self {
            HyperelasticLaw::Ogden(m) => m.energy(F, p),
            HyperelasticLaw::NeoHookean(m) => m.energy(F, p),
            HyperelasticLaw::MooneyRivlin(m) => m.energy(F, p),
            HyperelasticLaw::SaintVenantKirchhoff(m) => m.energy(F, p),
        }
    }
}

impl HyperelasticLaw {
    /// Which parameters the per-element field scales (module docs), in parameter order.
    pub fn scaled_parameters(&self) -> Vec<bool> {
        match self {
            HyperelasticLaw::Ogden(m) => {
                let mut v: Vec<bool> = (0..m.terms.len()).flat_map(|_| [true, false]).collect();
                v.push(false);
                v
            }
            HyperelasticLaw::NeoHookean(_) => vec![true, false],
            HyperelasticLaw::MooneyRivlin(_) => vec![true, true, false],
            HyperelasticLaw::SaintVenantKirchhoff(_) => vec![true, false],
        }
    }

    /// The gradient of the law's isochoric–volumetric form `ψ = h(Ī₁, Ī₂, J; p)` with respect
    /// to `(Ī₁, Ī₂, J, p…)` at a point carrying dual parts (see
    /// [`Ogden::isochoric_form_gradient`]); `None` for Saint Venant–Kirchhoff, which has no
    /// such form. Neo-Hookean and Mooney–Rivlin are closed forms:
    /// `h = μ/2 (Ī₁ − 3) + κU(J)` and `h = C₁₀(Ī₁ − 3) + C₀₁(Ī₂ − 3) + κU(J)`.
    pub fn isochoric_form_gradient<D: DualNum<Primitive = f64> + Copy>(
        &self,
        ib1: D,
        ib2: D,
        J: D,
        p: &[D],
    ) -> Option<Vec<D>> {
        let volumetric = |v: Volumetric, kappa: D| {
            let u = v.eval(Dual::new(J, D::one()));
            (kappa * u.eps, u.re)
        };
        match self {
            HyperelasticLaw::Ogden(m) => Some(m.isochoric_form_gradient(ib1, ib2, J, p)),
            HyperelasticLaw::NeoHookean(m) => {
                let (dj, u) = volumetric(m.volumetric, p[1]);
                Some(vec![p[0] * 0.5, D::zero(), dj, (ib1 - 3.0) * 0.5, u])
            }
            HyperelasticLaw::MooneyRivlin(m) => {
                let (dj, u) = volumetric(m.volumetric, p[2]);
                Some(vec![p[0], p[1], dj, ib1 - 3.0, ib2 - 3.0, u])
            }
            HyperelasticLaw::SaintVenantKirchhoff(_) => None,
        }
    }

    /// Replace the parameters (order of [`StrainEnergy::parameter_names`]). Checks the count
    /// and that every value is finite, Ogden exponents non-zero and SVK's ν in (−1, ½).
    pub fn set_parameters(&mut self, p: &[f64]) -> Result<(), FiniteStrainError> {
        let names = self.parameter_names();
        if p.len() != names.len() {
            return Err(FiniteStrainError::ParameterCount {
                law: self.name(),
                got: p.len(),
                expected: names.len(),
            });
        }
        for (n, &v) in names.iter().zip(p) {
            if !v.is_finite() {
                return Err(FiniteStrainError::InvalidValue {
                    what: n.clone(),
                    requirement: "finite",
                    value: v,
                });
            }
        }
        match self {
            HyperelasticLaw::Ogden(m) => {
                for (k, t) in m.terms.iter_mut().enumerate() {
                    if p[2 * k + 1] == 0.0 {
                        return Err(FiniteStrainError::InvalidValue {
                            what: format!("alpha{}", k + 1),
                            requirement: "non-zero",
                            value: 0.0,
                        });
                    }
                    t.mu = p[2 * k];
                    t.alpha = p[2 * k + 1];
                }
                m.kappa = p[2 * m.terms.len()];
            }
            HyperelasticLaw::NeoHookean(m) => (m.mu, m.kappa) = (p[0], p[1]),
            HyperelasticLaw::MooneyRivlin(m) => (m.c10, m.c01, m.kappa) = (p[0], p[1], p[2]),
            HyperelasticLaw::SaintVenantKirchhoff(m) => {
                if p[1] <= -1.0 || p[1] >= 0.5 {
                    return Err(FiniteStrainError::InvalidValue {
                        what: "poisson".into(),
                        requirement: "in (−1, 0.5)",
                        value: p[1],
                    });
                }
                (m.young, m.poisson) = (p[0], p[1]);
            }
        }
        Ok(())
    }

    /// Short name: `ogden`, `neo_hookean`, `mooney_rivlin`, `saint_venant_kirchhoff`.
    pub fn name(&self) -> &'static str {
        match self {
            HyperelasticLaw::Ogden(_) => "ogden",
            HyperelasticLaw::NeoHookean(_) => "neo_hookean",
            HyperelasticLaw::MooneyRivlin(_) => "mooney_rivlin",
            HyperelasticLaw::SaintVenantKirchhoff(_) => "saint_venant_kirchhoff",
        }
    }

    /// The law with its scaled parameters multiplied by `scale`.
    fn scaled(&self, scale: f64) -> HyperelasticLaw {
        let mut law = self.clone();
        if scale != 1.0 {
            match &mut law {
                HyperelasticLaw::Ogden(m) => m.terms.iter_mut().for_each(|t| t.mu *= scale),
                HyperelasticLaw::NeoHookean(m) => m.mu *= scale,
                HyperelasticLaw::MooneyRivlin(m) => {
                    m.c10 *= scale;
                    m.c01 *= scale;
                }
                HyperelasticLaw::SaintVenantKirchhoff(m) => m.young *= scale,
            }
        }
        law
    }

    /// The evaluator used at quadrature points: Ogden-type laws through the fast invariant path
    /// (`ogden_stress_and_tangent`, the output of [`Ogden::stress_and_tangent_fast`] with half
    /// the dual-number passes; `ogden_first_piola` when no tangent is needed), SVK through the
    /// generic dual-number path.
    fn point_law(&self) -> PointLaw<'_> {
        match self {
            HyperelasticLaw::Ogden(m) => PointLaw::Ogden(m.clone()),
            HyperelasticLaw::NeoHookean(m) => PointLaw::Ogden(m.to_ogden()),
            HyperelasticLaw::MooneyRivlin(m) => PointLaw::Ogden(m.to_ogden()),
            HyperelasticLaw::SaintVenantKirchhoff(_) => PointLaw::Generic(self),
        }
    }
}

enum PointLaw<'a> {
    Ogden(Ogden),
    Generic(&'a HyperelasticLaw),
}

impl PointLaw<'_> {
    fn stress_and_tangent(
        &self,
        F: &Mat3<f64>,
    ) -> Result<(Mat3<f64>, [[f64; 9]; 9]), HyperelasticError> {
        match self {
            PointLaw::Ogden(m) => ogden_stress_and_tangent(m, F),
            PointLaw::Generic(m) => stress_and_tangent(*m, F),
        }
    }
}

impl PointLaw<'_> {
    /// P alone (no tangent): [`ogden_first_piola`] for Ogden-type laws.
    fn first_piola(&self, F: &Mat3<f64>) -> Result<Mat3<f64>, HyperelasticError> {
        match self {
            PointLaw::Ogden(m) => ogden_first_piola(m, F),
            PointLaw::Generic(m) => first_piola(*m, F),
        }
    }
}

/// The invariants `x = (I₁, I₂, J)` of F (`I₁ = tr C`, `I₂ = ½(I₁² − tr C²)`, `J = det F`,
/// `C = FᵀF`) and their gradients `g_a = ∂x_a/∂F`: `∂I₁/∂F = 2F`, `∂I₂/∂F = 2I₁F − 2FC`,
/// `∂J/∂F = cof F`.
fn invariants_and_gradients(F: &Mat3<f64>) -> ([f64; 3], [Mat3<f64>; 3]) {
    let C = right_cauchy_green(F);
    let i1 = C[0][0] + C[1][1] + C[2][2];
    let trc2: f64 = C.iter().flatten().map(|c| c * c).sum();
    let i2 = 0.5 * (i1 * i1 - trc2);
    let mut g = [[[0.0; 3]; 3], [[0.0; 3]; 3], cofactor(F)];
    for i in 0..3 {
        for j in 0..3 {
            let fc: f64 = (0..3).map(|k| F[i][k] * C[k][j]).sum();
            g[0][i][j] = 2.0 * F[i][j];
            g[1][i][j] = 2.0 * i1 * F[i][j] - 2.0 * fc;
        }
    }
    ([i1, i2, det(F)], g)
}

/// Gradient `h_a` and Hessian `h_ab` of `ψ = h(I₁, I₂, J)` ([`Ogden::invariant_energy`]) at
/// `x = (I₁, I₂, J)`, by the split `h = Φ(y₁, y₂) + κ U(J)` with the isochoric invariants
/// `y₁ = Ī₁ = J^{-2/3} I₁`, `y₂ = Ī₂ = J^{-4/3} I₂`: Φ is [`Ogden::isochoric_energy`] (three
/// [`HyperDual64`] passes in two variables instead of six in three, sharing one
/// [`SpectrumSeed`]), U' and U'' come from one
/// pass of [`crate::hyperelastic::Volumetric::eval`], and
/// `h_a = Σ_c Φ_c ∂y_c/∂x_a + κU' δ_aJ`,
/// `h_ab = Σ_cd Φ_cd ∂y_c/∂x_a ∂y_d/∂x_b + Σ_c Φ_c ∂²y_c/∂x_a∂x_b + κU'' δ_aJ δ_bJ` with
/// `∂y₁/∂I₁ = J^{-2/3}`, `∂y₁/∂J = −⅔ y₁/J`, `∂²y₁/∂I₁∂J = −⅔ J^{-5/3}`,
/// `∂²y₁/∂J² = 10/9 y₁/J²`, `∂y₂/∂I₂ = J^{-4/3}`, `∂y₂/∂J = −4/3 y₂/J`,
/// `∂²y₂/∂I₂∂J = −4/3 J^{-7/3}`, `∂²y₂/∂J² = 28/9 y₂/J²`.
fn invariant_derivatives(m: &Ogden, x: [f64; 3]) -> ([f64; 3], [[f64; 3]; 3]) {
    let [i1, i2, J] = x;
    let jm23 = J.powf(-2.0 / 3.0);
    let jm43 = jm23 * jm23;
    let y = [i1 * jm23, i2 * jm43];
    let kappa = m.kappa;
    let seed = SpectrumSeed::isochoric(y[0], y[1]);
    let mut phi = [0.0; 2];
    let mut phi2 = [[0.0; 2]; 2];
    for c in 0..2 {
        for d in c..2 {
            let mut yd = y.map(HyperDual64::from);
            yd[c].eps1 = 1.0;
            yd[d].eps2 += 1.0;
            let v = m.isochoric_energy(&Spectrum::isochoric_seeded(yd[0], yd[1], seed));
            phi[c] = v.eps1;
            phi2[c][d] = v.eps1eps2;
            phi2[d][c] = v.eps1eps2;
        }
    }
    let u = m.volumetric.eval(HyperDual64::new(J, 1.0, 1.0, 0.0));
    // dy[c][a] = ∂y_c/∂x_a; d2y[c] = ∂²y_c/∂x∂x (symmetric, 3×3).
    let dy = [[jm23, 0.0, -2.0 / 3.0 * y[0] / J], [0.0, jm43, -4.0 / 3.0 * y[1] / J]];
    let mut d2y = [[[0.0; 3]; 3]; 2];
    d2y[0][0][2] = -2.0 / 3.0 * jm23 / J;
    d2y[0][2][0] = d2y[0][0][2];
    d2y[0][2][2] = 10.0 / 9.0 * y[0] / (J * J);
    d2y[1][1][2] = -4.0 / 3.0 * jm43 / J;
    d2y[1][2][1] = d2y[1][1][2];
    d2y[1][2][2] = 28.0 / 9.0 * y[1] / (J * J);
    let mut h = [0.0; 3];
    let mut hh = [[0.0; 3]; 3];
    for a in 0..3 {
        h[a] = phi[0] * dy[0][a] + phi[1] * dy[1][a];
        for b in 0..3 {
            let mut v = phi[0] * d2y[0][a][b] + phi[1] * d2y[1][a][b];
            for c in 0..2 {
                for d in 0..2 {
                    v += phi2[c][d] * dy[c][a] * dy[d][b];
                }
            }
            hh[a][b] = v;
        }
    }
    h[2] += kappa * u.eps1;
    hh[2][2] += kappa * u.eps1eps2;
    (h, hh)
}

/// The gradient part of [`invariant_derivatives`]: two [`Dual64`] passes of Φ and U'(J).
fn invariant_gradient(m: &Ogden, x: [f64; 3]) -> [f64; 3] {
    let [i1, i2, J] = x;
    let jm23 = J.powf(-2.0 / 3.0);
    let jm43 = jm23 * jm23;
    let y = [i1 * jm23, i2 * jm43];
    let kappa = m.kappa;
    let seed = SpectrumSeed::isochoric(y[0], y[1]);
    let phi: [f64; 2] = std::array::from_fn(|c| {
        let mut yd = y.map(Dual64::from);
        yd[c].eps = 1.0;
        m.isochoric_energy(&Spectrum::isochoric_seeded(yd[0], yd[1], seed)).eps
    });
    let du = m.volumetric.eval(Dual64::new(J, 1.0)).eps;
    [
        phi[0] * jm23,
        phi[1] * jm43,
        -2.0 / 3.0 * phi[0] * y[0] / J - 4.0 / 3.0 * phi[1] * y[1] / J + kappa * du,
    ]
}

/// First Piola–Kirchhoff stress of an Ogden-type law through its invariant form
/// `ψ = h(I₁, I₂, J)` ([`Ogden::invariant_energy`]): [`invariant_gradient`] gives `h_a` and
/// `P = Σ_a h_a ∂x_a/∂F` ([`invariants_and_gradients`]). The stress of
/// [`Ogden::stress_and_tangent_fast`] without its tangent, for residual-only evaluations.
fn ogden_first_piola(m: &Ogden, F: &Mat3<f64>) -> Result<Mat3<f64>, HyperelasticError> {
    let (x, g) = invariants_and_gradients(F);
    if x[2].is_nan() || x[2] <= 0.0 {
        return Err(HyperelasticError::NonPositiveJacobian { det: x[2], F: *F });
    }
    let h = invariant_gradient(m, x);
    let mut P = [[0.0; 3]; 3];
    for a in 0..3 {
        for i in 0..3 {
            for j in 0..3 {
                P[i][j] += h[a] * g[a][i][j];
            }
        }
    }
    if P.iter().flatten().all(|v| v.is_finite()) {
        Ok(P)
    } else {
        Err(HyperelasticError::NonFinite { what: "stress", F: *F })
    }
}

/// Stress and tangent of an Ogden-type law (the output of [`Ogden::stress_and_tangent_fast`],
/// equal to round-off): the gradient `h_a` and Hessian `h_ab` of `ψ = h(I₁, I₂, J)`
/// ([`invariant_derivatives`]), then
/// `P = Σ_a h_a ∂x_a/∂F` and
/// `A = Σ_ab h_ab ∂x_a/∂F ⊗ ∂x_b/∂F + Σ_a h_a ∂²x_a/∂F∂F` with
/// `∂²I₁/∂F_ij∂F_kl = 2δ_ik δ_jl`,
/// `∂²I₂/∂F_ij∂F_kl = 4F_ij F_kl + 2I₁ δ_ik δ_jl − 2(δ_ik C_jl + F_il F_kj + B_ik δ_jl)`
/// (`B = FFᵀ`) and `∂²J/∂F_ij∂F_kl = ε_ikm ε_jln F_mn`, each term added only where it is
/// non-zero.
fn ogden_stress_and_tangent(
    m: &Ogden,
    F: &Mat3<f64>,
) -> Result<(Mat3<f64>, [[f64; 9]; 9]), HyperelasticError> {
    let (x, g) = invariants_and_gradients(F);
    if x[2].is_nan() || x[2] <= 0.0 {
        return Err(HyperelasticError::NonPositiveJacobian { det: x[2], F: *F });
    }
    let (h, hh) = invariant_derivatives(m, x);
    let gf: [[f64; 9]; 3] = std::array::from_fn(|a| std::array::from_fn(|r| g[a][r / 3][r % 3]));
    let mut P = [[0.0; 3]; 3];
    for (r, pr) in P.iter_mut().flatten().enumerate() {
        *pr = h[0] * gf[0][r] + h[1] * gf[1][r] + h[2] * gf[2][r];
    }
    // t_b = Σ_a h_ab g_a.
    let mut t = [[0.0; 9]; 3];
    for b in 0..3 {
        for r in 0..9 {
            t[b][r] = hh[0][b] * gf[0][r] + hh[1][b] * gf[1][r] + hh[2][b] * gf[2][r];
        }
    }
    let C = right_cauchy_green(F);
    let mut A = [[0.0; 9]; 9];
    for r in 0..9 {
        let (i, j) = (r / 3, r % 3);
        for c in 0..9 {
            let (k, l) = (c / 3, c % 3);
            A[r][c] = t[0][r] * gf[0][c]
                + t[1][r] * gf[1][c]
                + t[2][r] * gf[2][c]
                + h[1] * (4.0 * F[i][j] * F[k][l] - 2.0 * F[i][l] * F[k][j]);
        }
    }
    for i in 0..3 {
        for j in 0..3 {
            for l in 0..3 {
                // δ_ik terms.
                let diag = if j == l { 2.0 * h[0] + 2.0 * h[1] * x[0] } else { 0.0 };
                A[3 * i + j][3 * i + l] += diag - 2.0 * h[1] * C[j][l];
            }
            for k in 0..3 {
                // −2 B_ik δ_jl.
                let bik = (0..3).map(|n| F[i][n] * F[k][n]).sum::<f64>();
                A[3 * i + j][3 * k + j] -= 2.0 * h[1] * bik;
            }
        }
    }
    // ε_ikm ε_jln F_mn: i ≠ k, j ≠ l, m and n the remaining indices.
    for i in 0..3 {
        for k in (0..3).filter(|&k| k != i) {
            let si = if k == (i + 1) % 3 { 1.0 } else { -1.0 };
            for j in 0..3 {
                for l in (0..3).filter(|&l| l != j) {
                    let sj = if l == (j + 1) % 3 { 1.0 } else { -1.0 };
                    A[3 * i + j][3 * k + l] += h[2] * si * sj * F[3 - i - k][3 - j - l];
                }
            }
        }
    }
    if P.iter().flatten().chain(A.iter().flatten()).all(|v| v.is_finite()) {
        Ok((P, A))
    } else {
        Err(HyperelasticError::NonFinite { what: "tangent", F: *F })
    }
}

/// `out += w ·` [`parameter_contraction`] of an Ogden law through its invariant form: with
/// `P = Σ_a h_a ∂x_a/∂F`, `G : ∂P/∂p_k = Σ_a ∂²h/∂x_a∂p_k (G : ∂x_a/∂F)`. With the split of
/// [`invariant_derivatives`], one [`HyperDual64`] pass of Φ per term parameter (y seeded along
/// `(∂y/∂x)(G : ∂x/∂F)`, p_k in ε₂) and `U'(J) (G : cof F)` for κ (the last parameter).
fn add_ogden_parameter_contraction(
    m: &Ogden,
    F: &Mat3<f64>,
    G: &Mat3<f64>,
    w: f64,
    out: &mut [f64],
) {
    let (x, g) = invariants_and_gradients(F);
    let mut dx = [0.0; 3];
    for a in 0..3 {
        for i in 0..3 {
            for j in 0..3 {
                dx[a] += G[i][j] * g[a][i][j];
            }
        }
    }
    // Along dx: dy = (∂y/∂x) dx for the isochoric part Φ(y) (see invariant_derivatives);
    // κ U(J) contributes U'(J) dJ to the κ entry only.
    let [i1, i2, J] = x;
    let jm23 = J.powf(-2.0 / 3.0);
    let jm43 = jm23 * jm23;
    let y = [i1 * jm23, i2 * jm43];
    let dy =
        [jm23 * dx[0] - 2.0 / 3.0 * y[0] / J * dx[2], jm43 * dx[1] - 4.0 / 3.0 * y[1] / J * dx[2]];
    // One spectrum for every (μ_p, α_p): Ogden::isochoric_parameter_directional.
    let n = 2 * m.terms.len();
    m.add_isochoric_parameter_directional(y, dy, w, &mut out[..n]);
    out[n] += w * m.volumetric.eval(Dual64::new(J, 1.0)).eps * dx[2];
}

/// `Σ_ij G_ij ∂²ψ/∂F_ij∂p_k` for every parameter k (one hyper-dual pass each: F seeded along G
/// in ε₁, p_k in ε₂).
fn parameter_contraction<M: StrainEnergy>(law: &M, F: &Mat3<f64>, G: &Mat3<f64>) -> Vec<f64> {
    let values = law.parameters();
    let mut Fd = [[HyperDual64::from(0.0); 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            Fd[i][j] = HyperDual64::new(F[i][j], G[i][j], 0.0, 0.0);
        }
    }
    (0..values.len())
        .map(|k| {
            let p: Vec<HyperDual64> = values
                .iter()
                .enumerate()
                .map(|(i, &v)| HyperDual64::new(v, 0.0, if i == k { 1.0 } else { 0.0 }, 0.0))
                .collect();
            law.energy(&Fd, &p).eps1eps2
        })
        .collect()
}

/// Deformation gradient F and first Piola–Kirchhoff stress P at a quadrature point.
pub type PointStress = (Mat3<f64>, Mat3<f64>);

/// A volume group with its hyperelastic law.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FiniteRegionSpec {
    /// Name of a volume (dim 3) group of the mesh.
    pub group: String,
    /// The strain-energy law.
    pub law: HyperelasticLaw,
    /// Linear thermal expansion coefficient α (1/K).
    #[serde(default)]
    pub alpha: f64,
    /// Stress-free reference temperature T_ref (K).
    #[serde(default)]
    pub t_ref: f64,
    /// Body force per unit reference volume b (N/m³), a dead load scaled by the load factor.
    #[serde(default)]
    pub body_force: [f64; 3],
}

/// One region of the model, after set-up.
#[derive(Clone, Debug, PartialEq)]
pub struct FiniteRegion {
    /// The group's name.
    pub name: String,
    /// The law with the region's parameters.
    pub law: HyperelasticLaw,
    /// α (1/K).
    pub alpha: f64,
    /// T_ref (K).
    pub t_ref: f64,
    /// b (N/m³).
    pub body_force: [f64; 3],
    /// The model's volume elements of this region.
    pub elements: Vec<usize>,
}

/// Errors of the finite-strain model.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum FiniteStrainError {
    /// Set-up errors (groups, regions, conditions), as in the linear model.
    #[error(transparent)]
    Setup(#[from] MechanicalError),
    /// `J = det F ≤ 0` (or not finite) at a quadrature point: the element is inverted.
    #[error(
        "finite strain: element {element} (cell {cell_tag}, {cell_type}) is inverted: \
         det F = {det_f:.3e} at a quadrature point, element centroid ({:.6e}, {:.6e}, {:.6e})",
        centroid[0], centroid[1], centroid[2]
    )]
    InvertedElement {
        /// The model's element index.
        element: usize,
        /// The mesh cell tag.
        cell_tag: u64,
        /// The cell type.
        cell_type: CellType,
        /// Reference centroid of the element (vertex mean).
        centroid: [f64; 3],
        /// det F at the first offending quadrature point.
        det_f: f64,
    },
    /// The material law failed (non-finite stress or tangent).
    #[error("finite strain: material law of region '{region}' failed in cell {cell_tag}: {source}")]
    Material {
        /// Region name.
        region: String,
        /// Mesh cell tag.
        cell_tag: u64,
        /// The law's error.
        source: HyperelasticError,
    },
    /// A parameter vector of the wrong length.
    #[error("finite strain: law '{law}' takes {expected} parameters, got {got}")]
    ParameterCount {
        /// Law name.
        law: &'static str,
        /// Given.
        got: usize,
        /// Needed.
        expected: usize,
    },
    /// A value out of its range.
    #[error("finite strain: {what} must be {requirement}, got {value}")]
    InvalidValue {
        /// Which value.
        what: String,
        /// What it must be.
        requirement: &'static str,
        /// The value.
        value: f64,
    },
    /// A vector of the wrong length.
    #[error("finite strain: {what} has {got} entries, expected {expected}")]
    WrongLength {
        /// Which vector.
        what: &'static str,
        /// Given.
        got: usize,
        /// Needed.
        expected: usize,
    },
    /// A group that is not what a request needs.
    #[error("finite strain: {message}")]
    BadGroup {
        /// What is wrong.
        message: String,
    },
}

/// Which vector-Jacobian products [`FiniteStrainModel::parameter_vjp`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FiniteVjpRequest {
    /// Region law parameters and the per-element field.
    pub material: bool,
    /// Body forces, tractions, pressures.
    pub loads: bool,
    /// Prescribed displacement values.
    pub displacement: bool,
    /// α, T_ref per region and nodal temperatures (when a temperature field is set).
    pub thermal: bool,
    /// Node coordinates.
    pub coords: bool,
}

impl FiniteVjpRequest {
    /// Everything.
    pub const ALL: FiniteVjpRequest = FiniteVjpRequest {
        material: true,
        loads: true,
        displacement: true,
        thermal: true,
        coords: true,
    };

    /// The law parameters (and per-element factors) only.
    pub const MATERIAL: FiniteVjpRequest = FiniteVjpRequest {
        material: true,
        loads: false,
        displacement: false,
        thermal: false,
        coords: false,
    };
}

/// `μᵀ ∂R_full/∂q` for the parameters q of the model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FiniteParameterVjp {
    /// Per region, per law parameter (order of [`HyperelasticLaw::parameter_names`]).
    pub material: Vec<Vec<f64>>,
    /// Per volume element: with respect to the element field sₑ.
    pub element_scale: Vec<f64>,
    /// Per region: body force components.
    pub body_force: Vec<[f64; 3]>,
    /// Per region: α.
    pub alpha: Vec<f64>,
    /// Per region: T_ref.
    pub t_ref: Vec<f64>,
    /// Per boundary condition: traction components (traction conditions, else 0).
    pub traction: Vec<[f64; 3]>,
    /// Per boundary condition: pressure (pressure conditions, else 0).
    pub pressure: Vec<f64>,
    /// Per boundary condition: prescribed displacement value ū_c per component (the dofs it
    /// owns; fixed and roller conditions too, as if their zero values were free).
    pub displacement: Vec<[f64; 3]>,
    /// Per node: nodal temperatures (when requested and a field is set).
    pub temperature: Option<Vec<f64>>,
    /// Per node: coordinates (when requested).
    pub coords: Option<Vec<[f64; 3]>>,
}

/// A region's law as the element products read it: which parameters the element field
/// scales, and their values (formed once per product, not per element or point).
struct RegionLaw {
    scaled: Vec<bool>,
    params: Vec<f64>,
}

impl FiniteStrainModel {
    /// Every region's [`RegionLaw`].
    fn region_laws(&self) -> Vec<RegionLaw> {
        self.regions
            .iter()
            .map(|r| RegionLaw { scaled: r.law.scaled_parameters(), params: r.law.parameters() })
            .collect()
    }
}

/// Per-element parts of a parameter product.
#[derive(Default)]
struct ElementVjp {
    material: Vec<f64>,
    scale: f64,
    body: [f64; 3],
    alpha: f64,
    t_ref: f64,
    traction: [f64; 3],
    pressure: f64,
    temperature: Vec<f64>,
    coords: Vec<f64>,
}

impl ElementVjp {
    /// The zero products of element `e` (sized as the accumulation expects).
    fn empty(model: &FiniteStrainModel, e: usize, want: FiniteVjpRequest) -> Self {
        let nn = model.element_nodes(e).len();
        let volume = e < model.n_volume;
        ElementVjp {
            material: if volume && want.material {
                vec![0.0; model.regions[model.element_region(e)].law.parameters().len()]
            } else {
                Vec::new()
            },
            temperature: if volume && want.thermal && model.temperature.is_some() {
                vec![0.0; nn]
            } else {
                Vec::new()
            },
            coords: if want.coords { vec![0.0; 3 * nn] } else { Vec::new() },
            ..ElementVjp::default()
        }
    }
}

/// The discrete Total Lagrangian hyperelastic problem on one mesh (module docs).
#[derive(Clone, Debug)]
pub struct FiniteStrainModel {
    /// Reference node coordinates (the shape parameter; mesh numbering).
    pub coords: Vec<[f64; 3]>,
    topology: LinearElasticModel,
    /// Volume quadrature tables by cell type.
    tables: Vec<ElementTable>,
    elem_table: Vec<u8>,
    /// Region (volume elements) or boundary condition (facets) of each element.
    elem_tag: Vec<u32>,
    node_offsets: Vec<usize>,
    elem_nodes: Vec<usize>,
    n_volume: usize,
    /// Regions, in the order given.
    pub regions: Vec<FiniteRegion>,
    /// The per-element field sₑ (module docs), one per volume element, default 1.
    pub element_scale: Vec<f64>,
    /// Prescribed value of each full dof at load factor 1 (0 where free).
    prescribed: Vec<f64>,
    constraint_owner: Vec<Option<usize>>,
    temperature: Option<Vec<f64>>,
    group_nodes: HashMap<String, Vec<usize>>,
    node_tags: Vec<u64>,
}

/// Quadrature degree of a volume cell (module docs); `curved`: a Tet10 whose mid-edge nodes
/// are off the edge midpoints.
fn volume_degree(ct: CellType, curved: bool) -> usize {
    match ct.linear() {
        CellType::Tet4 if curved => 3,
        CellType::Tet4 => (2 * ct.order()).saturating_sub(2).max(1),
        _ => 2 * ct.order(),
    }
}

/// Whether a second-order simplex has a mid-edge node off its edge's midpoint (by more than
/// 1e-10 of the edge length): its geometry map is then not affine.
fn is_curved(ct: CellType, x: &[[f64; 3]]) -> bool {
    if ct != CellType::Tet10 {
        return false;
    }
    ct.edges().iter().enumerate().any(|(k, &[a, b])| {
        let len2: f64 = (0..3).map(|i| (x[a][i] - x[b][i]).powi(2)).sum();
        let off2: f64 = (0..3).map(|i| (x[4 + k][i] - 0.5 * (x[a][i] + x[b][i])).powi(2)).sum();
        off2 > 1e-20 * len2
    })
}

#[inline]
fn dot3(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// Facet loads (generic scalar): `r_a += s w N_a (p n − t |n|)`, n = ∂x/∂ξ × ∂x/∂η.
fn facet_residual_generic<D: DualNum<Primitive = f64> + Copy>(
    tab: &ElementTable,
    x: &[[D; 3]],
    traction: [D; 3],
    pressure: D,
    load: f64,
    out: &mut [D],
) {
    for q in 0..tab.n_points() {
        let j = generic::jacobian(tab.grad(q), x);
        let a = [j[0][0], j[1][0], j[2][0]];
        let b = [j[0][1], j[1][1], j[2][1]];
        let nv = [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
        let da = (nv[0] * nv[0] + nv[1] * nv[1] + nv[2] * nv[2]).sqrt();
        let w = tab.weights[q] * load;
        for (a, &s) in tab.shape(q).iter().enumerate() {
            for i in 0..3 {
                out[3 * a + i] += (pressure * nv[i] - traction[i] * da) * (w * s);
            }
        }
    }
}

impl FiniteStrainModel {
    /// Set up the model on `mesh` with a law per volume group and boundary conditions per group
    /// (the kinds of [`BcKind`]; traction and pressure are dead loads, prescribed displacements
    /// and loads scale with the load factor).
    pub fn new(
        mesh: &Mesh,
        regions: &[FiniteRegionSpec],
        bcs: &[BcSpec],
    ) -> Result<Self, FiniteStrainError> {
        for spec in regions {
            let g = &spec.group;
            let mut law = spec.law.clone();
            law.set_parameters(&spec.law.parameters()).map_err(|e| match e {
                FiniteStrainError::InvalidValue { what, requirement, value } => {
                    FiniteStrainError::InvalidValue {
                        what: format!("mechanical.{what}.{g}"),
                        requirement,
                        value,
                    }
                }
                other => other,
            })?;
        }
        let linear_regions: Vec<RegionSpec> = regions
            .iter()
            .map(|r| RegionSpec {
                group: r.group.clone(),
                young: 1.0,
                poisson: 0.0,
                alpha: r.alpha,
                t_ref: r.t_ref,
                body_force: r.body_force,
            })
            .collect();
        let topology = LinearElasticModel::new(mesh, &linear_regions, bcs)?;
        let n_volume = topology.n_volume_elements();
        let n_el = topology.n_elements();
        let mut tables: Vec<ElementTable> = Vec::new();
        let mut elem_table = Vec::with_capacity(n_volume);
        for e in 0..n_volume {
            let ct = topology.element_cell_type(e);
            let x: Vec<[f64; 3]> =
                topology.element_nodes(e).iter().map(|&n| mesh.coords[n]).collect();
            let degree = volume_degree(ct, is_curved(ct, &x));
            let k = match tables.iter().position(|t| t.cell_type == ct && t.degree == degree) {
                Some(k) => k,
                None => {
                    tables.push(ElementTable::new(ct, degree));
                    tables.len() - 1
                }
            };
            elem_table.push(k as u8);
        }
        let mut elem_tag: Vec<u32> = (0..n_el)
            .map(|e| if e < n_volume { topology.element_region(e) as u32 } else { 0 })
            .collect();
        for (b, bc) in topology.boundaries.iter().enumerate() {
            for &e in &bc.elements {
                elem_tag[e] = b as u32;
            }
        }
        let mut node_offsets = Vec::with_capacity(n_el + 1);
        let mut elem_nodes = Vec::new();
        node_offsets.push(0);
        for e in 0..n_el {
            elem_nodes.extend_from_slice(topology.element_nodes(e));
            node_offsets.push(elem_nodes.len());
        }
        let out_regions = regions
            .iter()
            .zip(&topology.regions)
            .map(|(spec, r)| FiniteRegion {
                name: spec.group.clone(),
                law: spec.law.clone(),
                alpha: spec.alpha,
                t_ref: spec.t_ref,
                body_force: spec.body_force,
                elements: r.elements.clone(),
            })
            .collect();
        let prescribed = topology.nodal_displacement(&vec![0.0; topology.n_unknowns()]);
        let constraint_owner = topology.constraint_owner();
        let mut active = vec![false; mesh.n_nodes()];
        for &n in &elem_nodes {
            active[n] = true;
        }
        let group_nodes = mesh
            .groups
            .iter()
            .map(|g| {
                let mut nodes = mesh.group_nodes(g);
                nodes.retain(|&n| active[n]);
                (g.name.clone(), nodes)
            })
            .collect();
        let model = FiniteStrainModel {
            coords: mesh.coords.clone(),
            topology,
            tables,
            elem_table,
            elem_tag,
            node_offsets,
            elem_nodes,
            n_volume,
            regions: out_regions,
            element_scale: vec![1.0; n_volume],
            prescribed,
            constraint_owner,
            temperature: None,
            group_nodes,
            node_tags: mesh.node_tags.clone(),
        };
        tracing::debug!(
            elements = model.n_elements(),
            unknowns = model.n_unknowns(),
            "finite-strain model set up"
        );
        Ok(model)
    }

    /// Number of unknowns (free displacement components).
    pub fn n_unknowns(&self) -> usize {
        self.topology.n_unknowns()
    }

    /// Number of mesh nodes (full vectors have `3 · n_nodes()` entries).
    pub fn n_nodes(&self) -> usize {
        self.coords.len()
    }

    /// Number of elements (volume cells, then traction/pressure facets).
    pub fn n_elements(&self) -> usize {
        self.node_offsets.len() - 1
    }

    /// Number of volume elements (the first ones).
    pub fn n_volume_elements(&self) -> usize {
        self.n_volume
    }

    /// Offsets of each element's local dofs in [`FiniteStrainModel::element_dofs`]: the input
    /// of `AssemblyPattern::new`.
    pub fn element_offsets(&self) -> &[usize] {
        self.topology.element_offsets()
    }

    /// Local dofs of all elements (node-major): unknown indices or [`crate::linear::CONSTRAINED`].
    pub fn element_dofs(&self) -> &[usize] {
        self.topology.element_dofs()
    }

    /// Numbering of the unknowns over the full dofs `3·node + component`.
    pub fn dofs(&self) -> &NodalDofMap {
        &self.topology.dofs
    }

    /// The displacement on the vertices of quadratic cells interpolated to their other nodes
    /// (p-multigrid's first coarse level; [`LinearElasticModel::vertex_interpolation`]).
    pub fn vertex_interpolation(&self) -> Option<crate::linear::VertexInterpolation> {
        self.topology.vertex_interpolation()
    }

    /// The boundary conditions, in the order given (nodes and facet elements of each).
    pub fn boundaries(&self) -> &[Boundary] {
        &self.topology.boundaries
    }

    /// For each full dof, the condition that owns its constraint, if any.
    pub fn constraint_owner(&self) -> &[Option<usize>] {
        &self.constraint_owner
    }

    /// The mesh nodes of element `e`.
    pub fn element_nodes(&self, e: usize) -> &[usize] {
        &self.elem_nodes[self.node_offsets[e]..self.node_offsets[e + 1]]
    }

    /// The mesh cell tag of element `e`.
    pub fn element_cell_tag(&self, e: usize) -> u64 {
        self.topology.element_cell_tag(e)
    }

    /// The cell type of element `e`.
    pub fn element_cell_type(&self, e: usize) -> CellType {
        self.topology.element_cell_type(e)
    }

    /// The region of volume element `e`.
    pub fn element_region(&self, e: usize) -> usize {
        assert!(e < self.n_volume, "element {e} is not a volume element");
        self.elem_tag[e] as usize
    }

    /// The volume elements of a 3D group (`"*"`: all).
    pub fn group_elements(&self, group: &str) -> Result<&[usize], FiniteStrainError> {
        Ok(self.topology.group_elements(group)?)
    }

    /// The nodes (of the model's elements) of any mesh group.
    pub fn group_nodes(&self, group: &str) -> Result<&[usize], FiniteStrainError> {
        self.group_nodes.get(group).map(|v| v.as_slice()).ok_or_else(|| {
            let mut known: Vec<String> = self.group_nodes.keys().cloned().collect();
            known.sort();
            FiniteStrainError::Setup(MechanicalError::UnknownGroup { name: group.into(), known })
        })
    }

    /// The volume element containing `point` (reference configuration) and the point's
    /// reference coordinates ξ in it (the first element found, within a relative tolerance).
    pub fn locate(&self, point: [f64; 3]) -> Result<(usize, [f64; 3]), FiniteStrainError> {
        (0..self.n_volume)
            .find_map(|e| {
                let x: Vec<[f64; 3]> =
                    self.element_nodes(e).iter().map(|&n| self.coords[n]).collect();
                geometry::reference_coordinates(self.element_cell_type(e), &x, point)
                    .map(|xi| (e, xi))
            })
            .ok_or(FiniteStrainError::Setup(MechanicalError::PointOutside { point }))
    }

    /// The node of the model's elements nearest to `point` (reference configuration).
    pub fn nearest_node(&self, point: [f64; 3]) -> usize {
        let mut best = (f64::INFINITY, 0);
        for &n in &self.elem_nodes {
            let x = self.coords[n];
            let d = (0..3).map(|k| (x[k] - point[k]).powi(2)).sum::<f64>();
            if d < best.0 {
                best = (d, n);
            }
        }
        best.1
    }

    /// A description of unknown `dof` for messages: component, node tag and (reference)
    /// position.
    pub fn describe_dof(&self, dof: usize) -> String {
        let full = self.dofs().node_of_unknown[dof];
        let p = self.coords[full / 3];
        format!(
            "u{} of node {} at ({:.6e}, {:.6e}, {:.6e})",
            ["x", "y", "z"][full % 3],
            self.node_tags[full / 3],
            p[0],
            p[1],
            p[2]
        )
    }

    /// The parameter names of region `r`'s law.
    pub fn parameter_names(&self, r: usize) -> Vec<String> {
        self.regions[r].law.parameter_names()
    }

    /// The parameter values of region `r`'s law.
    pub fn region_parameters(&self, r: usize) -> Vec<f64> {
        self.regions[r].law.parameters()
    }

    /// Set the parameter values of region `r`'s law (checked as in
    /// [`HyperelasticLaw::set_parameters`]).
    pub fn set_region_parameters(&mut self, r: usize, p: &[f64]) -> Result<(), FiniteStrainError> {
        self.regions[r].law.set_parameters(p)
    }

    /// Replace the values of condition `bc` (same kind and components; see
    /// [`LinearElasticModel::set_boundary_kind`]). Panics on a change of kind.
    pub fn set_boundary_kind(&mut self, bc: usize, kind: BcKind) {
        self.topology.set_boundary_kind(bc, kind);
        self.prescribed = self.topology.nodal_displacement(&vec![0.0; self.n_unknowns()]);
    }

    /// Set (or clear) the nodal temperature field (K).
    pub fn set_temperature(&mut self, t: Option<Vec<f64>>) -> Result<(), FiniteStrainError> {
        if let Some(t) = &t
            && t.len() != self.n_nodes()
        {
            return Err(FiniteStrainError::WrongLength {
                what: "temperature",
                got: t.len(),
                expected: self.n_nodes(),
            });
        }
        self.temperature = t;
        Ok(())
    }

    /// The nodal temperature field, if set.
    pub fn temperature(&self) -> Option<&[f64]> {
        self.temperature.as_deref()
    }

    /// Full displacement (`3·n_nodes`) at load factor `load`: the unknowns scattered, the
    /// prescribed values times `load` at constrained dofs.
    pub fn nodal_displacement(&self, unknowns: &[f64], load: f64) -> Vec<f64> {
        let mut u: Vec<f64> = self.prescribed.iter().map(|v| v * load).collect();
        self.dofs().scatter(unknowns, &mut u);
        u
    }

    /// Check that every volume element has det J₀ > 0 at its quadrature points (after the
    /// coordinates changed).
    pub fn check_coordinates(&self) -> Result<(), FiniteStrainError> {
        for e in 0..self.n_volume {
            let tab = &self.tables[self.elem_table[e] as usize];
            let nn = tab.n_nodes();
            let x = self.element_coords(e);
            let mut g = [[0.0; 3]; MAX_NODES];
            for q in 0..tab.n_points() {
                let d = geometry::physical_gradients_into(3, tab.grad(q), &x[..nn], &mut g[..nn]);
                if d.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
                    return Err(MechanicalError::InvertedCell {
                        cell_tag: self.element_cell_tag(e),
                        cell_type: self.element_cell_type(e),
                        det_j: d,
                        centroid: self.centroid(e),
                    }
                    .into());
                }
            }
        }
        Ok(())
    }

    fn element_coords(&self, e: usize) -> [[f64; 3]; MAX_NODES] {
        let mut x = [[0.0; 3]; MAX_NODES];
        for (xa, &n) in x.iter_mut().zip(self.element_nodes(e)) {
            *xa = self.coords[n];
        }
        x
    }

    fn centroid(&self, e: usize) -> [f64; 3] {
        let nv = self.element_cell_type(e).n_vertices();
        let mut c = [0.0; 3];
        for &n in &self.element_nodes(e)[..nv] {
            for k in 0..3 {
                c[k] += self.coords[n][k] / nv as f64;
            }
        }
        c
    }

    fn inverted(&self, e: usize, det_f: f64) -> FiniteStrainError {
        FiniteStrainError::InvertedElement {
            element: e,
            cell_tag: self.element_cell_tag(e),
            cell_type: self.element_cell_type(e),
            centroid: self.centroid(e),
            det_f,
        }
    }

    /// The law of volume element `e` (region parameters with the element field applied).
    pub fn element_law(&self, e: usize) -> HyperelasticLaw {
        self.regions[self.element_region(e)].law.scaled(self.element_scale[e])
    }

    /// θ at quadrature point q of volume element e (1 without a temperature field).
    fn theta(&self, e: usize, q: usize, load: f64) -> (f64, f64) {
        match &self.temperature {
            None => (1.0, 0.0),
            Some(t) => {
                let r = &self.regions[self.element_region(e)];
                let tab = &self.tables[self.elem_table[e] as usize];
                let tq: f64 =
                    self.element_nodes(e).iter().zip(tab.shape(q)).map(|(&a, s)| s * t[a]).sum();
                (1.0 + r.alpha * load * (tq - r.t_ref), tq)
            }
        }
    }

    fn facet_params(&self, e: usize) -> ([f64; 3], f64) {
        let b = self.elem_tag[e] as usize;
        match self.topology.boundaries[b].kind {
            BcKind::Traction { traction } => (traction, 0.0),
            BcKind::Pressure { pressure } => ([0.0; 3], pressure),
            _ => ([0.0; 3], 0.0),
        }
    }

    /// Element residual `fe` (3·nn, node-major) and tangent `ke` (row-major 3nn × 3nn, when
    /// given) of element `e` at the full displacement `u` and load factor `load`. Both buffers
    /// must be zeroed. Errors: an inverted element (det F ≤ 0 at a quadrature point) or a
    /// failing law.
    pub fn element_residual_tangent(
        &self,
        e: usize,
        u: &[f64],
        load: f64,
        ke: Option<&mut [f64]>,
        fe: &mut [f64],
    ) -> Result<(), FiniteStrainError> {
        if e >= self.n_volume {
            let (t, p) = self.facet_params(e);
            let nn = self.element_nodes(e).len();
            let x = self.element_coords(e);
            facet_residual_generic(self.topology.element_table(e), &x[..nn], t, p, load, fe);
            return Ok(());
        }
        let law = self.element_law(e);
        let point = law.point_law();
        let r = &self.regions[self.element_region(e)];
        let tab = &self.tables[self.elem_table[e] as usize];
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let nd = 3 * nn;
        let x = self.element_coords(e);
        let mut g = [[0.0; 3]; MAX_NODES];
        let mut ke = ke;
        for q in 0..tab.n_points() {
            let det0 = geometry::physical_gradients_into(3, tab.grad(q), &x[..nn], &mut g[..nn]);
            let w = tab.weights[q] * det0;
            let F = deformation_gradient(u, nodes, &g);
            let J = det(&F);
            if J.is_nan() || J <= 0.0 {
                return Err(self.inverted(e, J));
            }
            let (theta, _) = self.theta(e, q, load);
            let shape = tab.shape(q);
            // Residual-only evaluations skip the tangent.
            let (P, A) = match ke {
                Some(_) => {
                    let (P, A) = self.stress_at(&point, &F, theta, e)?;
                    (P, Some(A))
                }
                None => (self.stress_only_at(&point, &F, theta, e)?, None),
            };
            for a in 0..nn {
                for i in 0..3 {
                    fe[3 * a + i] += w * (dot3(P[i], g[a]) - load * shape[a] * r.body_force[i]);
                }
            }
            if let (Some(ke), Some(A)) = (ke.as_deref_mut(), A) {
                for b in 0..nn {
                    // AG[iJ][k] = Σ_L A_iJkL g_bL
                    let mut ag = [[0.0; 3]; 9];
                    for (ij, row) in ag.iter_mut().enumerate() {
                        for k in 0..3 {
                            row[k] = A[ij][3 * k] * g[b][0]
                                + A[ij][3 * k + 1] * g[b][1]
                                + A[ij][3 * k + 2] * g[b][2];
                        }
                    }
                    for a in 0..nn {
                        for i in 0..3 {
                            let row = (3 * a + i) * nd + 3 * b;
                            for k in 0..3 {
                                ke[row + k] += w
                                    * (g[a][0] * ag[3 * i][k]
                                        + g[a][1] * ag[3 * i + 1][k]
                                        + g[a][2] * ag[3 * i + 2][k]);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// P alone at F with thermal factor θ: `P = P_m(F/θ)/θ`.
    fn stress_only_at(
        &self,
        point: &PointLaw,
        F: &Mat3<f64>,
        theta: f64,
        e: usize,
    ) -> Result<Mat3<f64>, FiniteStrainError> {
        let material = |source| FiniteStrainError::Material {
            region: self.regions[self.element_region(e)].name.clone(),
            cell_tag: self.element_cell_tag(e),
            source,
        };
        if theta == 1.0 {
            return point.first_piola(F).map_err(material);
        }
        if theta.is_nan() || theta <= 0.0 {
            return Err(FiniteStrainError::InvalidValue {
                what: format!("thermal stretch θ in cell {}", self.element_cell_tag(e)),
                requirement: "positive",
                value: theta,
            });
        }
        let Fm = F.map(|r| r.map(|v| v / theta));
        let Pm = point.first_piola(&Fm).map_err(material)?;
        Ok(Pm.map(|r| r.map(|v| v / theta)))
    }

    /// P and A at F with thermal factor θ: `P = P_m(F/θ)/θ`, `A = A_m(F/θ)/θ²`.
    fn stress_at(
        &self,
        point: &PointLaw,
        F: &Mat3<f64>,
        theta: f64,
        e: usize,
    ) -> Result<(Mat3<f64>, [[f64; 9]; 9]), FiniteStrainError> {
        let material = |source| FiniteStrainError::Material {
            region: self.regions[self.element_region(e)].name.clone(),
            cell_tag: self.element_cell_tag(e),
            source,
        };
        if theta == 1.0 {
            return point.stress_and_tangent(F).map_err(material);
        }
        if theta.is_nan() || theta <= 0.0 {
            return Err(FiniteStrainError::InvalidValue {
                what: format!("thermal stretch θ in cell {}", self.element_cell_tag(e)),
                requirement: "positive",
                value: theta,
            });
        }
        let Fm = F.map(|r| r.map(|v| v / theta));
        let (Pm, Am) = point.stress_and_tangent(&Fm).map_err(material)?;
        let P = Pm.map(|r| r.map(|v| v / theta));
        let t2 = theta * theta;
        let A = Am.map(|r| r.map(|v| v / t2));
        Ok((P, A))
    }

    /// Runs `compute(e, local)` for every element and adds `width` values per local node into a
    /// nodal array, deterministically; the first element error is returned.
    fn scatter_checked(
        &self,
        width: usize,
        compute: impl Fn(usize, &mut [f64]) -> Result<(), FiniteStrainError> + Sync,
    ) -> Result<Vec<f64>, FiniteStrainError> {
        let mut out = vec![0.0; width * self.n_nodes()];
        let first: Mutex<Option<(usize, FiniteStrainError)>> = Mutex::new(None);
        gradfem_kernel::scatter_chunked(
            self.n_elements(),
            &self.node_offsets,
            &self.elem_nodes,
            &mut out,
            width,
            |e, local| {
                if let Err(err) = compute(e, local) {
                    let mut f = first.lock().unwrap_or_else(|p| p.into_inner());
                    if f.as_ref().is_none_or(|(k, _)| e < *k) {
                        *f = Some((e, err));
                    }
                    local.fill(0.0);
                }
            },
        );
        match first.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some((_, err)) => Err(err),
            None => Ok(out),
        }
    }

    /// The full residual R(u; s) at every dof (`3·n_nodes`), constrained dofs included.
    pub fn full_residual(&self, u: &[f64], load: f64) -> Result<Vec<f64>, FiniteStrainError> {
        self.scatter_checked(3, |e, local| self.element_residual_tangent(e, u, load, None, local))
    }

    /// Reaction forces (N) per boundary condition: the sum of the full residual over the dofs
    /// the condition owns, per component (the force the support exerts on the body); zero for
    /// loads and free components.
    pub fn reactions(&self, u: &[f64], load: f64) -> Result<Vec<[f64; 3]>, FiniteStrainError> {
        let r = self.full_residual(u, load)?;
        let mut out = vec![[0.0; 3]; self.boundaries().len()];
        for (d, b) in self.constraint_owner.iter().enumerate() {
            if let Some(b) = b {
                out[*b][d % 3] += r[d];
            }
        }
        Ok(out)
    }

    /// `(∂R_full/∂u)ᵀ μ` over every dof (constrained columns included), with μ at every dof.
    pub fn tangent_transpose_product(
        &self,
        u: &[f64],
        load: f64,
        mu: &[f64],
    ) -> Result<Vec<f64>, FiniteStrainError> {
        self.scatter_checked(3, |e, local| {
            if e >= self.n_volume {
                return Ok(());
            }
            let nodes = self.element_nodes(e);
            if self.vanishes_on(e, mu) {
                return Ok(());
            }
            let nd = 3 * nodes.len();
            let mut ke = vec![0.0; nd * nd];
            let mut fe = [0.0; MAX_DOFS];
            self.element_residual_tangent(e, u, load, Some(&mut ke), &mut fe[..nd])?;
            for b in 0..nd {
                local[b] = (0..nd).map(|a| ke[a * nd + b] * mu[3 * nodes[a / 3] + a % 3]).sum();
            }
            Ok(())
        })
    }

    /// Whether the full-dof vector `v` is zero at every node of element `e` (its products then
    /// vanish and the element is skipped).
    fn vanishes_on(&self, e: usize, v: &[f64]) -> bool {
        self.element_nodes(e).iter().all(|&n| v[3 * n..3 * n + 3].iter().all(|x| *x == 0.0))
    }

    /// `cᵀ R_full(u; s)` for a full-dof vector `c` (a reaction-force quantity), summed over the
    /// elements on which `c` does not vanish.
    pub fn residual_dot(&self, u: &[f64], load: f64, c: &[f64]) -> Result<f64, FiniteStrainError> {
        let per: Vec<f64> = (0..self.n_elements())
            .into_par_iter()
            .map(|e| {
                if self.vanishes_on(e, c) {
                    return Ok(0.0);
                }
                let nodes = self.element_nodes(e);
                let nd = 3 * nodes.len();
                let mut fe = [0.0; MAX_DOFS];
                self.element_residual_tangent(e, u, load, None, &mut fe[..nd])?;
                Ok((0..nd).map(|r| fe[r] * c[3 * nodes[r / 3] + r % 3]).sum())
            })
            .collect::<Result<_, FiniteStrainError>>()?;
        Ok(per.iter().sum())
    }

    /// `μᵀ ∂R_full/∂q` for the requested parameters q at the full displacement `u` and load
    /// factor `load`, for a full-dof vector `mu` (module docs). Elements on which μ vanishes
    /// are skipped.
    pub fn parameter_vjp(
        &self,
        u: &[f64],
        load: f64,
        mu: &[f64],
        want: FiniteVjpRequest,
    ) -> Result<FiniteParameterVjp, FiniteStrainError> {
        let laws = self.region_laws();
        let per_elem: Vec<ElementVjp> = (0..self.n_elements())
            .into_par_iter()
            .map(|e| {
                if self.vanishes_on(e, mu) {
                    Ok(ElementVjp::empty(self, e, want))
                } else {
                    self.element_vjp(e, u, load, mu, want, &laws)
                }
            })
            .collect::<Result<_, _>>()?;
        let nb = self.boundaries().len();
        let nr = self.regions.len();
        let mut vjp = FiniteParameterVjp {
            material: self.regions.iter().map(|r| vec![0.0; r.law.parameters().len()]).collect(),
            element_scale: vec![0.0; self.n_volume],
            body_force: vec![[0.0; 3]; nr],
            alpha: vec![0.0; nr],
            t_ref: vec![0.0; nr],
            traction: vec![[0.0; 3]; nb],
            pressure: vec![0.0; nb],
            displacement: vec![[0.0; 3]; nb],
            temperature: None,
            coords: None,
        };
        let thermal = want.thermal && self.temperature.is_some();
        let mut temperature = thermal.then(|| vec![0.0; self.n_nodes()]);
        let mut coords = want.coords.then(|| vec![[0.0; 3]; self.n_nodes()]);
        let scaled: Vec<Vec<bool>> =
            self.regions.iter().map(|r| r.law.scaled_parameters()).collect();
        for (e, ev) in per_elem.iter().enumerate() {
            let nodes = self.element_nodes(e);
            if e < self.n_volume {
                let r = self.element_region(e);
                if want.material {
                    for (k, d) in ev.material.iter().enumerate() {
                        vjp.material[r][k] +=
                            if scaled[r][k] { self.element_scale[e] * d } else { *d };
                    }
                    vjp.element_scale[e] = ev.scale;
                }
                for k in 0..3 {
                    vjp.body_force[r][k] += ev.body[k];
                }
                vjp.alpha[r] += ev.alpha;
                vjp.t_ref[r] += ev.t_ref;
                if let Some(t) = &mut temperature {
                    for (a, &n) in nodes.iter().enumerate() {
                        t[n] += ev.temperature[a];
                    }
                }
            } else {
                let b = self.elem_tag[e] as usize;
                for k in 0..3 {
                    vjp.traction[b][k] += ev.traction[k];
                }
                vjp.pressure[b] += ev.pressure;
            }
            if let Some(c) = &mut coords {
                for (a, &n) in nodes.iter().enumerate() {
                    for k in 0..3 {
                        c[n][k] += ev.coords[3 * a + k];
                    }
                }
            }
        }
        if want.displacement {
            let kt = self.tangent_transpose_product(u, load, mu)?;
            for (d, b) in self.constraint_owner.iter().enumerate() {
                if let Some(b) = b {
                    vjp.displacement[*b][d % 3] += load * kt[d];
                }
            }
        }
        vjp.temperature = temperature;
        vjp.coords = coords;
        Ok(vjp)
    }

    fn element_vjp(
        &self,
        e: usize,
        u: &[f64],
        load: f64,
        mu: &[f64],
        want: FiniteVjpRequest,
        laws: &[RegionLaw],
    ) -> Result<ElementVjp, FiniteStrainError> {
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let x = self.element_coords(e);
        let mut out = ElementVjp::default();
        if e >= self.n_volume {
            let tab = self.topology.element_table(e);
            let mut fe = [0.0; MAX_DOFS];
            let dot = |fe: &[f64]| -> f64 {
                (0..3 * nn).map(|r| fe[r] * mu[3 * nodes[r / 3] + r % 3]).sum()
            };
            let (t, p) = self.facet_params(e);
            if want.loads {
                for k in 0..3 {
                    let mut tk = [0.0; 3];
                    tk[k] = 1.0;
                    fe[..3 * nn].fill(0.0);
                    facet_residual_generic(tab, &x[..nn], tk, 0.0, load, &mut fe[..3 * nn]);
                    out.traction[k] = dot(&fe[..3 * nn]);
                }
                fe[..3 * nn].fill(0.0);
                facet_residual_generic(tab, &x[..nn], [0.0; 3], 1.0, load, &mut fe[..3 * nn]);
                out.pressure = dot(&fe[..3 * nn]);
            }
            if want.coords {
                out.coords = vec![0.0; 3 * nn];
                let c = Dual64::from;
                let mut xd: Vec<[Dual64; 3]> = x[..nn].iter().map(|p| p.map(c)).collect();
                let mut r = vec![c(0.0); 3 * nn];
                for a in 0..nn {
                    for i in 0..3 {
                        xd[a][i].eps = 1.0;
                        r.fill(c(0.0));
                        facet_residual_generic(tab, &xd, t.map(c), c(p), load, &mut r);
                        xd[a][i].eps = 0.0;
                        out.coords[3 * a + i] =
                            (0..3 * nn).map(|k| r[k].eps * mu[3 * nodes[k / 3] + k % 3]).sum();
                    }
                }
            }
            return Ok(out);
        }
        let r = &self.regions[self.element_region(e)];
        let law = self.element_law(e);
        let tab = &self.tables[self.elem_table[e] as usize];
        let thermal = want.thermal && self.temperature.is_some();
        // The stress is needed for the thermal and coordinate parts alone.
        let point = (thermal || want.coords).then(|| law.point_law());
        let region_law = &laws[self.element_region(e)];
        let n_par = region_law.params.len();
        if want.material {
            out.material = vec![0.0; n_par];
        }
        if thermal {
            out.temperature = vec![0.0; nn];
        }
        if want.coords {
            out.coords = vec![0.0; 3 * nn];
        }
        let mut g = [[0.0; 3]; MAX_NODES];
        for q in 0..tab.n_points() {
            let det0 = geometry::physical_gradients_into(3, tab.grad(q), &x[..nn], &mut g[..nn]);
            let w = tab.weights[q] * det0;
            let F = deformation_gradient(u, nodes, &g);
            let J = det(&F);
            if J.is_nan() || J <= 0.0 {
                return Err(self.inverted(e, J));
            }
            let shape = tab.shape(q);
            let G = field_gradient(mu, nodes, &g);
            let mut mq = [0.0; 3];
            for a in 0..nn {
                for i in 0..3 {
                    mq[i] += shape[a] * mu[3 * nodes[a] + i];
                }
            }
            let (theta, tq) = self.theta(e, q, load);
            if want.loads {
                for i in 0..3 {
                    out.body[i] -= w * load * mq[i];
                }
            }
            if want.material {
                let Fm = F.map(|row| row.map(|v| v / theta));
                let Gm = G.map(|row| row.map(|v| v / theta));
                match &law {
                    HyperelasticLaw::Ogden(o) => {
                        add_ogden_parameter_contraction(o, &Fm, &Gm, w, &mut out.material)
                    }
                    _ => {
                        let d = parameter_contraction(&law, &Fm, &Gm);
                        for k in 0..n_par {
                            out.material[k] += w * d[k];
                        }
                    }
                }
            }
            if !(thermal || want.coords) {
                continue;
            }
            let (P, A) = self.stress_at(point.as_ref().expect("formed above"), &F, theta, e)?;
            if thermal {
                // ∂P/∂θ = −(P_m + A_m : F_m)/θ² = −(P + A : F)/θ.
                let mut c = 0.0;
                for i in 0..3 {
                    for j in 0..3 {
                        let mut af = 0.0;
                        for k in 0..3 {
                            for l in 0..3 {
                                af += A[3 * i + j][3 * k + l] * F[k][l];
                            }
                        }
                        c -= G[i][j] * (P[i][j] + af) / theta;
                    }
                }
                let c = w * c;
                out.alpha += c * load * (tq - r.t_ref);
                out.t_ref -= c * load * r.alpha;
                for a in 0..nn {
                    out.temperature[a] += c * load * r.alpha * shape[a];
                }
            }
            if want.coords {
                let mut H = F;
                for (i, row) in H.iter_mut().enumerate() {
                    row[i] -= 1.0;
                }
                let mut gp = -load * dot3(mq, r.body_force);
                for i in 0..3 {
                    gp += dot3(G[i], P[i]);
                }
                // S_mL = Σ_iJ G_iJ A_iJmL.
                let mut S = [[0.0; 3]; 3];
                for i in 0..3 {
                    for j in 0..3 {
                        let gij = G[i][j];
                        if gij != 0.0 {
                            for m in 0..3 {
                                for l in 0..3 {
                                    S[m][l] += gij * A[3 * i + j][3 * m + l];
                                }
                            }
                        }
                    }
                }
                for b in 0..nn {
                    let pg = [dot3(P[0], g[b]), dot3(P[1], g[b]), dot3(P[2], g[b])];
                    let sg = [dot3(S[0], g[b]), dot3(S[1], g[b]), dot3(S[2], g[b])];
                    for k in 0..3 {
                        let t1: f64 = (0..3).map(|i| G[i][k] * pg[i]).sum();
                        let t2: f64 = (0..3).map(|m| H[m][k] * sg[m]).sum();
                        out.coords[3 * b + k] += w * (g[b][k] * gp - t1 - t2);
                    }
                }
            }
        }
        if want.material {
            out.scale = region_law
                .scaled
                .iter()
                .zip(&region_law.params)
                .zip(&out.material)
                .filter(|((s, _), _)| **s)
                .map(|((_, p), d)| p * d)
                .sum();
        }
        Ok(out)
    }

    /// `μᵀ ∂rₑ/∂X` of element `e` by central finite differences of the element residual
    /// (step `h`), the reference the closed form is tested against; `local` (3·nn) is
    /// overwritten.
    pub fn coordinate_vjp_fd(
        &self,
        e: usize,
        u: &[f64],
        load: f64,
        mu: &[f64],
        h: f64,
        local: &mut [f64],
    ) -> Result<(), FiniteStrainError> {
        let nodes = self.element_nodes(e).to_vec();
        let nd = 3 * nodes.len();
        let mut m = self.clone();
        for (a, &n) in nodes.iter().enumerate() {
            for k in 0..3 {
                let x0 = self.coords[n][k];
                let mut eval = |x: f64| -> Result<f64, FiniteStrainError> {
                    m.coords[n][k] = x;
                    let mut fe = vec![0.0; nd];
                    m.element_residual_tangent(e, u, load, None, &mut fe)?;
                    Ok((0..nd).map(|r| fe[r] * mu[3 * nodes[r / 3] + r % 3]).sum())
                };
                let (p, q) = (eval(x0 + h)?, eval(x0 - h)?);
                m.coords[n][k] = x0;
                local[3 * a + k] = (p - q) / (2.0 * h);
            }
        }
        Ok(())
    }

    /// `μᵀ ∂rₑ/∂X` of element `e` as [`FiniteStrainModel::parameter_vjp`] computes it;
    /// `local` (3·nn) is overwritten.
    pub fn coordinate_vjp_element(
        &self,
        e: usize,
        u: &[f64],
        load: f64,
        mu: &[f64],
        local: &mut [f64],
    ) -> Result<(), FiniteStrainError> {
        let want = FiniteVjpRequest {
            material: false,
            loads: false,
            displacement: false,
            thermal: false,
            coords: true,
        };
        let ev = self.element_vjp(e, u, load, mu, want, &self.region_laws())?;
        local.copy_from_slice(&ev.coords);
        Ok(())
    }

    /// Deformation gradient and first Piola–Kirchhoff stress (row-major 3×3) at every quadrature
    /// point of the volume elements (element by element, in table order).
    pub fn stresses(&self, u: &[f64], load: f64) -> Result<Vec<PointStress>, FiniteStrainError> {
        Ok(self.element_stresses(u, load)?.into_iter().flatten().collect())
    }

    /// [`stresses`](Self::stresses) grouped by volume element: one list of quadrature points
    /// per element.
    pub fn element_stresses(
        &self,
        u: &[f64],
        load: f64,
    ) -> Result<Vec<Vec<PointStress>>, FiniteStrainError> {
        (0..self.n_volume)
            .into_par_iter()
            .map(|e| {
                let law = self.element_law(e);
                let point = law.point_law();
                let tab = &self.tables[self.elem_table[e] as usize];
                let nodes = self.element_nodes(e);
                let nn = nodes.len();
                let x = self.element_coords(e);
                let mut g = [[0.0; 3]; MAX_NODES];
                (0..tab.n_points())
                    .map(|q| {
                        geometry::physical_gradients_into(3, tab.grad(q), &x[..nn], &mut g[..nn]);
                        let F = deformation_gradient(u, nodes, &g);
                        let J = det(&F);
                        if J.is_nan() || J <= 0.0 {
                            return Err(self.inverted(e, J));
                        }
                        let (theta, _) = self.theta(e, q, load);
                        Ok((F, self.stress_at(&point, &F, theta, e)?.0))
                    })
                    .collect()
            })
            .collect()
    }
}

/// What a results file shows of one quadrature point of a finite-strain solution.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PointOutput {
    /// Cauchy (true) stress σ = J⁻¹ P Fᵀ in Voigt order `[xx, yy, zz, yz, xz, xy]` (Pa).
    pub cauchy: [f64; 6],
    /// Volume ratio J = det F.
    pub j: f64,
    /// Principal stretches λ₁ ≥ λ₂ ≥ λ₃: the square roots of the eigenvalues of C = FᵀF.
    pub stretches: [f64; 3],
}

impl PointOutput {
    /// The outputs of a point with deformation gradient `F` and first Piola–Kirchhoff stress
    /// `P` (row-major 3×3).
    pub fn of(F: &Mat3<f64>, P: &Mat3<f64>) -> Self {
        let j = det(F);
        let mut sigma = [[0.0; 3]; 3];
        for (i, row) in sigma.iter_mut().enumerate() {
            for (k, v) in row.iter_mut().enumerate() {
                *v = (0..3).map(|m| P[i][m] * F[k][m]).sum::<f64>() / j;
            }
        }
        // σ is symmetric for an objective law; its symmetric part removes round-off.
        let sym = |a: usize, b: usize| 0.5 * (sigma[a][b] + sigma[b][a]);
        let cauchy = [sigma[0][0], sigma[1][1], sigma[2][2], sym(1, 2), sym(0, 2), sym(0, 1)];
        let c = right_cauchy_green(F);
        let eig = symmetric_eigenvalues([c[0][0], c[1][1], c[2][2], c[1][2], c[0][2], c[0][1]]);
        PointOutput { cauchy, j, stretches: eig.map(|l| l.max(0.0).sqrt()) }
    }
}

/// The eigenvalues of a symmetric 3×3 matrix given in Voigt order `[xx, yy, zz, yz, xz, xy]`,
/// largest first, by the trigonometric solution of the characteristic cubic (Smith 1961).
pub fn symmetric_eigenvalues(a: [f64; 6]) -> [f64; 3] {
    let [xx, yy, zz, yz, xz, xy] = a;
    let off = xy * xy + xz * xz + yz * yz;
    let scale = xx.abs().max(yy.abs()).max(zz.abs()).max(off.sqrt());
    if off <= (f64::EPSILON * scale).powi(2) {
        let mut d = [xx, yy, zz];
        d.sort_by(|p, q| q.total_cmp(p));
        return d;
    }
    let q = (xx + yy + zz) / 3.0;
    let (b0, b1, b2) = (xx - q, yy - q, zz - q);
    let p = ((b0 * b0 + b1 * b1 + b2 * b2 + 2.0 * off) / 6.0).sqrt();
    // det((A − qI)/p) / 2, clamped against round-off to the cosine's range.
    let det_b = b0 * (b1 * b2 - yz * yz) - xy * (xy * b2 - yz * xz) + xz * (xy * yz - b1 * xz);
    let r = (det_b / (2.0 * p * p * p)).clamp(-1.0, 1.0);
    let phi = r.acos() / 3.0;
    let l1 = q + 2.0 * p * phi.cos();
    let l3 = q + 2.0 * p * (phi + 2.0 * std::f64::consts::FRAC_PI_3).cos();
    let l2 = 3.0 * q - l1 - l3;
    [l1, l2, l3]
}

/// `F = I + ∇u` from a full-dof vector.
fn deformation_gradient(u: &[f64], nodes: &[usize], g: &[[f64; 3]; MAX_NODES]) -> Mat3<f64> {
    let mut F = field_gradient(u, nodes, g);
    for (i, row) in F.iter_mut().enumerate() {
        row[i] += 1.0;
    }
    F
}

/// `∇v = Σ_a v_a ⊗ ∇N_a` of a full-dof vector.
fn field_gradient(u: &[f64], nodes: &[usize], g: &[[f64; 3]; MAX_NODES]) -> Mat3<f64> {
    let mut F = [[0.0; 3]; 3];
    for (a, &n) in nodes.iter().enumerate() {
        for i in 0..3 {
            let ui = u[3 * n + i];
            for j in 0..3 {
                F[i][j] += ui * g[a][j];
            }
        }
    }
    F
}

impl gradfem_kernel::DescribeDof for FiniteStrainModel {
    fn describe_dof(&self, dof: usize) -> String {
        FiniteStrainModel::describe_dof(self, dof)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_eigenvalues_match_a_rotated_diagonal() {
        // R diag(5, 2, −1) Rᵀ with R a rotation about (1, 2, 2)/3 by 0.7 rad.
        let (c, s) = (0.7f64.cos(), 0.7f64.sin());
        let n = [1.0 / 3.0, 2.0 / 3.0, 2.0 / 3.0];
        let mut r = [[0.0; 3]; 3];
        for i in 0..3 {
            for k in 0..3 {
                let cross = match (i, k) {
                    (0, 1) => -n[2],
                    (0, 2) => n[1],
                    (1, 0) => n[2],
                    (1, 2) => -n[0],
                    (2, 0) => -n[1],
                    (2, 1) => n[0],
                    _ => 0.0,
                };
                r[i][k] = if i == k { c } else { 0.0 } + s * cross + (1.0 - c) * n[i] * n[k];
            }
        }
        let d = [5.0, 2.0, -1.0];
        let a = |i: usize, k: usize| (0..3).map(|m| r[i][m] * d[m] * r[k][m]).sum::<f64>();
        let e = symmetric_eigenvalues([a(0, 0), a(1, 1), a(2, 2), a(1, 2), a(0, 2), a(0, 1)]);
        for (x, y) in e.iter().zip(d) {
            assert!((x - y).abs() < 1e-13 * 5.0, "{e:?}");
        }
        // Diagonal and repeated eigenvalues.
        assert_eq!(symmetric_eigenvalues([1.0, 3.0, 2.0, 0.0, 0.0, 0.0]), [3.0, 2.0, 1.0]);
        let e = symmetric_eigenvalues([2.0, 2.0, 2.0, 1e-3, 0.0, 0.0]);
        assert!((e[0] - 2.001).abs() < 1e-12 && (e[2] - 1.999).abs() < 1e-12, "{e:?}");
    }

    #[test]
    fn point_outputs_of_a_uniaxial_stretch() {
        // F = diag(λ, μ, μ), P = diag(p, 0, 0): σ_xx = p λ / J, J = λ μ², stretches (λ, μ, μ).
        let (l, m, p) = (1.5, 0.9, 2.0e6);
        let f = [[l, 0.0, 0.0], [0.0, m, 0.0], [0.0, 0.0, m]];
        let pk = [[p, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]];
        let o = PointOutput::of(&f, &pk);
        let j = l * m * m;
        assert!((o.j - j).abs() < 1e-15);
        assert!((o.cauchy[0] - p * l / j).abs() < 1e-9 * p);
        assert!(o.cauchy[1..].iter().all(|v| v.abs() < 1e-9));
        for (x, y) in o.stretches.iter().zip([l, m, m]) {
            assert!((x - y).abs() < 1e-14, "{:?}", o.stretches);
        }
        // A rigid rotation of a stretched state: J and stretches unchanged, σ rotated.
        let (c, s) = (0.6, 0.8);
        let q = [[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]];
        let mul = |a: &Mat3<f64>, b: &Mat3<f64>| {
            std::array::from_fn(|i| {
                std::array::from_fn(|k| (0..3).map(|m| a[i][m] * b[m][k]).sum())
            })
        };
        let o2 = PointOutput::of(&mul(&q, &f), &mul(&q, &pk));
        assert!((o2.j - j).abs() < 1e-14);
        for (x, y) in o2.stretches.iter().zip([l, m, m]) {
            assert!((x - y).abs() < 1e-13, "{:?}", o2.stretches);
        }
        let sxx = p * l / j;
        assert!((o2.cauchy[0] - c * c * sxx).abs() < 1e-9 * p, "{:?}", o2.cauchy);
        assert!((o2.cauchy[5] - s * c * sxx).abs() < 1e-9 * p, "{:?}", o2.cauchy);
    }

    #[test]
    fn law_parameters_round_trip_and_scaling() {
        let mut law = HyperelasticLaw::Ogden(Ogden::new(&[(1.0, 2.0), (0.5, -3.0)], 10.0));
        assert_eq!(law.parameter_names(), ["mu1", "alpha1", "mu2", "alpha2", "kappa"]);
        assert_eq!(law.scaled_parameters(), [true, false, true, false, false]);
        law.set_parameters(&[2.0, 2.5, 0.1, -2.0, 5.0]).unwrap();
        assert_eq!(law.parameters(), [2.0, 2.5, 0.1, -2.0, 5.0]);
        assert_eq!(law.scaled(2.0).parameters(), [4.0, 2.5, 0.2, -2.0, 5.0]);
        assert!(matches!(
            law.set_parameters(&[1.0, 0.0, 1.0, 1.0, 1.0]),
            Err(FiniteStrainError::InvalidValue { .. })
        ));
        assert!(matches!(
            law.set_parameters(&[1.0]),
            Err(FiniteStrainError::ParameterCount { .. })
        ));
        let spec: FiniteRegionSpec = serde_json::from_str(
            r#"{"group": "domain",
                "law": {"law": "neo_hookean", "mu": 1.0, "kappa": 5.0,
                        "volumetric": "Quadratic"}}"#,
        )
        .unwrap();
        assert_eq!(spec.law.parameters(), [1.0, 5.0]);
    }

    /// Deformation gradients that reach every branch of the invariant spectrum: identity-like
    /// (three close stretches), axisymmetric (a close pair), general, and compressed.
    fn sample_deformations() -> Vec<Mat3<f64>> {
        vec![
            [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
            [[1.0 + 1e-7, 2e-8, 0.0], [0.0, 1.0, -1e-8], [3e-8, 0.0, 1.0 - 1e-7]],
            [[1.3, 0.0, 0.0], [0.0, 0.9, 0.0], [0.0, 0.0, 0.9]],
            [[1.2, 0.1, 0.0], [0.05, 0.9, 0.1], [0.0, -0.1, 1.05]],
            [[0.7, 0.2, -0.1], [0.1, 1.1, 0.3], [-0.2, 0.05, 0.95]],
        ]
    }

    #[test]
    fn point_evaluations_match_the_reference_ogden_paths() {
        let m = Ogden::new(&[(0.63, 1.3), (0.0012, 5.0), (-0.01, -2.0)], 10.0);
        let G = [[0.3, -0.2, 0.1], [0.4, 0.5, -0.6], [0.7, 0.2, -0.1]];
        for F in sample_deformations() {
            let (P0, A0) = m.stress_and_tangent_fast(&F).unwrap();
            let (P, A) = ogden_stress_and_tangent(&m, &F).unwrap();
            let P1 = ogden_first_piola(&m, &F).unwrap();
            let scale = A0.iter().flatten().fold(0.0f64, |s, v| s.max(v.abs()));
            for r in 0..9 {
                let (i, j) = (r / 3, r % 3);
                assert!((P[i][j] - P0[i][j]).abs() <= 1e-12 * scale, "P {F:?}");
                assert!((P1[i][j] - P0[i][j]).abs() <= 1e-12 * scale, "P only {F:?}");
                for c in 0..9 {
                    assert!((A[r][c] - A0[r][c]).abs() <= 1e-11 * scale, "A[{r}][{c}] {F:?}");
                }
            }
            // Accumulated with a weight onto a non-zero start, as the element product does.
            let generic = parameter_contraction(&m, &F, &G);
            let mut fast = vec![1.0; generic.len()];
            add_ogden_parameter_contraction(&m, &F, &G, 0.5, &mut fast);
            fast.iter_mut().for_each(|v| *v = 2.0 * (*v - 1.0));
            for (a, b) in fast.iter().zip(&generic) {
                assert!((a - b).abs() <= 1e-10 * (1.0 + b.abs()), "{a} vs {b} at {F:?}");
            }
        }
        let inverted = [[-1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        assert!(matches!(
            ogden_stress_and_tangent(&m, &inverted),
            Err(HyperelasticError::NonPositiveJacobian { .. })
        ));
        assert!(matches!(
            ogden_first_piola(&m, &inverted),
            Err(HyperelasticError::NonPositiveJacobian { .. })
        ));
    }

    #[test]
    fn parameter_contraction_matches_stress_parameter_derivatives() {
        let law = HyperelasticLaw::Ogden(Ogden::new(&[(0.7, 2.5), (0.1, -1.5)], 8.0));
        let F = [[1.2, 0.1, 0.0], [0.05, 0.9, 0.1], [0.0, -0.1, 1.05]];
        let G = [[0.3, -0.2, 0.1], [0.4, 0.5, -0.6], [0.7, 0.2, -0.1]];
        let d = parameter_contraction(&law, &F, &G);
        let reference = crate::hyperelastic::stress_parameter_derivatives(&law, &F).unwrap();
        for (k, dk) in reference.iter().enumerate() {
            let mut v = 0.0;
            for i in 0..3 {
                for j in 0..3 {
                    v += G[i][j] * dk[i][j];
                }
            }
            assert!((v - d[k]).abs() < 1e-12 * (1.0 + v.abs()), "{k}: {v} vs {}", d[k]);
        }
    }
}
