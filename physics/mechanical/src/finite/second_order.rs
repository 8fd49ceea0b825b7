//! Second-order products of the finite-strain residual, for tangent-linear solves and
//! Hessian-vector products through load steps by the second-order adjoint.
//!
//! At a quadrature point of a volume element the residual weighted by a full-dof vector μ is
//! `w Dφ(x)[Gμ]`, with `Gμ = Σ_a μ_a ⊗ ∇N_a` and φ the energy density as a function of every
//! quadrature-point input
//!
//! `x = (F, p, sₑ, α, T_ref, T_q)`, `φ(x) = ψ_law(F/θ; m)`, `m_k = sₑ p_k` (the law's scaled
//! parameters) or `p_k`, `θ = 1 + α s (T_q − T_ref)` (θ = 1 without a temperature field),
//!
//! so that the element field's and the thermal chain's own second derivatives (sₑ·p_k,
//! α·T_q) are part of φ. Along a direction δx (δF = Gδu, the parameters' and the nodal
//! temperature's tangents):
//!
//! - [`FiniteStrainModel::residual_jvp`], the tangent-linear right-hand side
//!   `dR = K δu + ∂R/∂q δq`: per point `dP_iJ = D²φ[E_iJ, δx]`; body forces, tractions and
//!   pressures enter linearly (the facet residual at the load direction);
//! - [`FiniteStrainModel::second_order_vjp`], `d/dε ∇_{(u,q)} (μᵀR_full)` with μ held: the
//!   gradient of `D²φ[Gμ, δx]` with respect to every input, mapped to the nodes by
//!   `∂F/∂u_b = e_i ⊗ ∇N_b` and `∂T_q/∂T_b = N_b`. Loads have no second derivatives (dead
//!   loads, linear in their values) and are left out.
//!
//! How the point derivatives are taken: the Ogden family (Ogden, neo-Hookean, Mooney–Rivlin)
//! has `φ = h(z)`, `z = (Ī₁, Ī₂, Ĵ = det F/θ³, m)` (the isochoric invariants do not see θ).
//! The chain rule to third order then needs only the gradient of `h` along the two
//! directions, one dual evaluation whose spectrum of C̄ is analysed three times
//! ([`HyperelasticLaw::isochoric_form_gradient`]), and the Jacobian of `z`, in closed form
//! and evaluated once in dual arithmetic for every input. Saint Venant–Kirchhoff takes dual
//! passes of φ: 9 [`HyperDual64`] for `dP`, one [`HyperHyperDual64`] per input (ε₁ along
//! Gμ, ε₂ along δx, ε₃ the input) for the second-order product; the tests hold both ways
//! equal.
//!
//! Node coordinates are a direction too (shape parameters). Moving the nodes by δX moves
//! a point's weight, `δw = w tr ∇δX`, the physical shape gradients, `δ∇N_a = −(∇δX)ᵀ∇N_a`,
//! and so `δF = ∇δu − H∇δX` (H = ∇u) and `δG = −G∇δX`; the point derivatives above take δF
//! among their inputs and the weight and gradients are chained by hand. The coordinates' own
//! product differentiates the first-order closed form `M ∇N_b`,
//! `M = w(ℓ I − Hᵀ(A:G) − GᵀP)` (parent module docs), along every input; facets (dead
//! tractions and pressures on the reference area) take hyper-dual passes. Both products
//! are tested against central differences of the first-order products they differentiate,
//! with and without moving nodes.

#![allow(non_snake_case)] // F, P: the names of continuum mechanics.

use num_dual::{Dual64, DualNum, HyperDual64, HyperHyperDual64};
use smallvec::SmallVec;

use super::{
    FiniteParameterVjp, FiniteStrainError, FiniteStrainModel, FiniteVjpRequest, HyperelasticLaw,
    MAX_NODES, RegionLaw, dot3, facet_residual_generic, field_gradient,
};
use crate::hyperelastic::{Mat3, StrainEnergy, cofactor, det, right_cauchy_green};
use gradfem_mesh::geometry;

/// A direction in the finite-strain model's variables.
#[derive(Clone, Debug, PartialEq)]
pub struct FiniteDirection {
    /// δu, three per node (constrained components included: a prescribed displacement that
    /// changes moves them).
    pub displacement: Vec<f64>,
    /// δT per node (read when the model has a temperature field).
    pub temperature: Vec<f64>,
    /// δX per node, the node coordinates' tangent (empty: the nodes hold still).
    pub coordinates: Vec<[f64; 3]>,
    /// δp per region, per law parameter (order of [`StrainEnergy::parameter_names`]).
    pub material: Vec<Vec<f64>>,
    /// δsₑ per volume element.
    pub element_scale: Vec<f64>,
    /// δα per region.
    pub alpha: Vec<f64>,
    /// δT_ref per region.
    pub t_ref: Vec<f64>,
    /// δb per region.
    pub body_force: Vec<[f64; 3]>,
    /// δ(traction) per boundary condition (traction conditions only).
    pub traction: Vec<[f64; 3]>,
    /// δ(pressure) per boundary condition (pressure conditions only).
    pub pressure: Vec<f64>,
}

impl FiniteDirection {
    /// The zero direction of `model`.
    pub fn zeros(model: &FiniteStrainModel) -> Self {
        let (nr, nb) = (model.regions.len(), model.boundaries().len());
        FiniteDirection {
            displacement: vec![0.0; 3 * model.n_nodes()],
            temperature: vec![0.0; model.n_nodes()],
            coordinates: Vec::new(),
            material: model.regions.iter().map(|r| vec![0.0; r.law.parameters().len()]).collect(),
            element_scale: vec![0.0; model.n_volume_elements()],
            alpha: vec![0.0; nr],
            t_ref: vec![0.0; nr],
            body_force: vec![[0.0; 3]; nr],
            traction: vec![[0.0; 3]; nb],
            pressure: vec![0.0; nb],
        }
    }
}

/// `d/dε ∇_{(u,q)} (μᵀR_full)` along a direction with μ held: the displacement part and the
/// parameter part (material, element field, α, T_ref, nodal temperature; loads and
/// prescribed values have no second-order terms and stay zero).
#[derive(Clone, Debug, PartialEq)]
pub struct FiniteSecondOrder {
    /// d/dε (∂R_full/∂u)ᵀμ, three per node (constrained components included).
    pub displacement: Vec<f64>,
    /// d/dε (∂R_full/∂q)ᵀμ in the layout of [`FiniteStrainModel::parameter_vjp`].
    pub parameters: FiniteParameterVjp,
}

/// The inputs of φ at one quadrature point (module docs), with their layout.
/// A point's inputs `x` (F, the law's parameters, sₑ, α, T_ref, T_q: 13 + n_p) or a vector
/// over them, kept on the stack for laws of up to 11 parameters (a five-term Ogden law).
type Inputs<T> = SmallVec<[T; 24]>;

/// The Jacobian `∂z/∂x` of [`PointInputs::form_arguments`] ((3 + n_p) rows of 13 + n_p),
/// on the stack up to the same size.
type ArgumentJacobian<T> = SmallVec<[T; 336]>;

struct PointInputs<'a> {
    law: &'a HyperelasticLaw,
    scaled: &'a [bool],
    /// Load factor s (the thermal ramp).
    load: f64,
    /// Whether θ depends on the temperature (a temperature field is set).
    thermal: bool,
    /// `x` in the layout F (9), p (n_p), sₑ, α, T_ref, T_q.
    x: Inputs<f64>,
}

impl PointInputs<'_> {
    fn n_params(&self) -> usize {
        self.scaled.len()
    }

    /// φ(x) in any dual type.
    fn energy<D: DualNum<Primitive = f64> + Copy>(&self, x: &[D]) -> D {
        let np = self.n_params();
        let s = x[9 + np];
        let m: Inputs<D> = x[9..9 + np]
            .iter()
            .zip(self.scaled)
            .map(|(p, scaled)| if *scaled { *p * s } else { *p })
            .collect();
        let mut F = [[x[0]; 3]; 3];
        for (ij, v) in x[..9].iter().enumerate() {
            F[ij / 3][ij % 3] = *v;
        }
        if self.thermal {
            let (alpha, t_ref, tq) = (x[10 + np], x[11 + np], x[12 + np]);
            let theta = (tq - t_ref) * alpha * self.load + 1.0;
            let inv = theta.recip();
            let Fm: Mat3<D> = F.map(|r| r.map(|v| v * inv));
            self.law.energy(&Fm, &m)
        } else {
            self.law.energy(&F, &m)
        }
    }

    /// `z(x) = (Ī₁, Ī₂, Ĵ, m)`, the arguments of the law's isochoric–volumetric form
    /// `φ(x) = h(z(x))` ([`HyperelasticLaw::isochoric_form_gradient`]): the isochoric
    /// invariants of `F` (the same for `F/θ`), `Ĵ = det F / θ³` and the law's parameters
    /// `m_k = sₑ p_k` or `p_k`; with the Jacobian `∂z_c/∂x_k` (row-major, a row of `x.len()`
    /// per argument), by hand:
    /// `∂Ī₁/∂F = J^{-2/3} 2F − ⅔ Ī₁/J cof F`,
    /// `∂Ī₂/∂F = J^{-4/3} (2I₁F − 2FC) − ⁴⁄₃ Ī₂/J cof F`, `∂Ĵ/∂F = θ⁻³ cof F`,
    /// `∂Ĵ/∂θ = −3Ĵ/θ`. In a dual type whose parts follow directions of `x`, each entry carries
    /// its derivatives along them: one evaluation serves every input `k`.
    /// (Written into `z` and `jac`, emptied first: the caller's buffers are not moved.)
    fn form_arguments<D: DualNum<Primitive = f64> + Copy>(
        &self,
        x: &[D],
        z: &mut Inputs<D>,
        jac: &mut ArgumentJacobian<D>,
    ) {
        let np = self.n_params();
        let n = x.len();
        let mut F = [[x[0]; 3]; 3];
        for (ij, v) in x[..9].iter().enumerate() {
            F[ij / 3][ij % 3] = *v;
        }
        let J = det(&F);
        let c = right_cauchy_green(&F);
        let i1 = c[0][0] + c[1][1] + c[2][2];
        // I₂ as the sum of the principal minors (as `Spectrum::new` forms it).
        let i2 = c[0][0] * c[1][1] - c[0][1] * c[0][1] + c[0][0] * c[2][2] - c[0][2] * c[0][2]
            + c[1][1] * c[2][2]
            - c[1][2] * c[1][2];
        let jm23 = J.powf(-2.0 / 3.0);
        let (ib1, ib2) = (i1 * jm23, i2 * jm23 * jm23);
        let cof = cofactor(&F);
        let j_inv = J.recip();
        jac.clear();
        jac.resize(n * (3 + np), D::zero());
        for i in 0..3 {
            for j in 0..3 {
                let fc: D = (0..3).map(|k| F[i][k] * c[k][j]).sum();
                let k = 3 * i + j;
                jac[k] = F[i][j] * jm23 * 2.0 - ib1 * j_inv * cof[i][j] * (2.0 / 3.0);
                jac[n + k] =
                    (F[i][j] * i1 - fc) * jm23 * jm23 * 2.0 - ib2 * j_inv * cof[i][j] * (4.0 / 3.0);
                jac[2 * n + k] = cof[i][j];
            }
        }
        let volume = if self.thermal {
            let (alpha, t_ref, tq) = (x[10 + np], x[11 + np], x[12 + np]);
            let theta = (tq - t_ref) * alpha * self.load + 1.0;
            let theta_inv = theta.recip();
            let scale = theta_inv * theta_inv * theta_inv;
            let volume = J * scale;
            jac[2 * n..2 * n + 9].iter_mut().for_each(|v| *v *= scale);
            // ∂Ĵ/∂θ ∂θ/∂(α, T_ref, T_q).
            let d_theta = volume * theta_inv * (-3.0);
            jac[2 * n + 10 + np] = d_theta * (tq - t_ref) * self.load;
            jac[2 * n + 11 + np] = -d_theta * alpha * self.load;
            jac[2 * n + 12 + np] = d_theta * alpha * self.load;
            volume
        } else {
            J
        };
        let s = x[9 + np];
        z.clear();
        z.extend([ib1, ib2, volume]);
        for (k, (p, scaled)) in x[9..9 + np].iter().zip(self.scaled).enumerate() {
            if *scaled {
                z.push(*p * s);
                jac[(3 + k) * n + 9 + k] = s;
                jac[(3 + k) * n + 9 + np] = *p;
            } else {
                z.push(*p);
                jac[(3 + k) * n + 9 + k] = D::one();
            }
        }
    }

    /// `(∇φ, D²φ[·, dx])`: the gradient of φ with respect to every input (its F part is the
    /// first Piola–Kirchhoff stress P) and its derivative along `dx` (the F part is `dP_iJ =
    /// D²φ[E_iJ, dx]`). Through the law's isochoric–volumetric form when it has one: with
    /// `z(x)` and its Jacobian along `dx` (ε), `∂φ/∂x_k = Σ_c ∂_c h ∂z_c/∂x_k` and
    /// `D²φ[e_k, dx] = Σ_c ∂_c h · (∂z_c/∂x_k)' + (∇²h Dz[dx])_c ∂z_c/∂x_k`, the gradient of
    /// `h` along `dx` once per point. Else [`PointInputs::derivatives_along_by_passes`].
    fn derivatives_along(&self, dx: &[f64]) -> (Inputs<f64>, Inputs<f64>) {
        let xd: Inputs<Dual64> = self.x.iter().zip(dx).map(|(&v, &d)| Dual64::new(v, d)).collect();
        let (mut z, mut jac) = (Inputs::new(), ArgumentJacobian::new());
        self.form_arguments(&xd, &mut z, &mut jac);
        let np = self.n_params();
        let Some(grad) = self.law.isochoric_form_gradient(z[0], z[1], z[2], &z[3..3 + np]) else {
            return self.derivatives_along_by_passes(dx);
        };
        let n = xd.len();
        let mut first: Inputs<f64> = SmallVec::from_elem(0.0, n);
        let mut second: Inputs<f64> = SmallVec::from_elem(0.0, n);
        for (row, g) in jac.chunks(n).zip(&grad) {
            for k in 0..n {
                first[k] += g.re * row[k].re;
                second[k] += g.re * row[k].eps + g.eps * row[k].re;
            }
        }
        (first, second)
    }

    /// [`PointInputs::derivatives_along`] by one [`HyperDual64`] pass of φ per input (any
    /// law).
    fn derivatives_along_by_passes(&self, dx: &[f64]) -> (Inputs<f64>, Inputs<f64>) {
        let n = self.x.len();
        let (mut first, mut second): (Inputs<f64>, Inputs<f64>) =
            (SmallVec::from_elem(0.0, n), SmallVec::from_elem(0.0, n));
        let mut xd: Inputs<HyperDual64> =
            self.x.iter().zip(dx).map(|(&v, &d)| HyperDual64::new(v, 0.0, d, 0.0)).collect();
        for k in 0..n {
            xd[k].eps1 = 1.0;
            let phi = self.energy(&xd);
            (first[k], second[k]) = (phi.eps1, phi.eps1eps2);
            xd[k].eps1 = 0.0;
        }
        (first, second)
    }

    /// `D²φ[·, a]` for a direction `a` along F alone (its other inputs held).
    fn second_derivative_along_f(&self, a: &Mat3<f64>) -> Inputs<f64> {
        let mut dx: Inputs<f64> = SmallVec::from_elem(0.0, self.x.len());
        dx[..9].copy_from_slice(a.as_flattened());
        self.derivatives_along(&dx).1
    }

    /// The inputs seeded with `a` (along F) in ε₁ and `dx` in ε₂.
    fn seeded_twice(&self, a: &Mat3<f64>, dx: &[f64]) -> Inputs<HyperHyperDual64> {
        self.x
            .iter()
            .zip(dx)
            .enumerate()
            .map(|(k, (&v, &d))| {
                let e1 = if k < 9 { a[k / 3][k % 3] } else { 0.0 };
                HyperHyperDual64::new(v, e1, d, 0.0, 0.0, 0.0, 0.0, 0.0)
            })
            .collect()
    }

    /// `∂/∂x_k D²φ[a, dx]` for the inputs `k` in `which` (`a` along F only); the others are
    /// left zero. Through the law's isochoric–volumetric form `h` when it has one: with the
    /// jets of `z(x)` along `a` (ε₁), `dx` (ε₂) and `e_k` (ε₃),
    /// `D³φ = Σ_c ∂_c h d₁₂₃ + (∇²h d₁)_c d₂₃ + (∇²h d₂)_c d₁₃ + (∇²h d₁₂ + ∇³h[d₁, d₂])_c d₃`
    /// (Faà di Bruno). The four vectors are one hyper-dual gradient of `h` (the spectrum is
    /// analysed 3 times per point instead of once per input), and the jets along `e_k` are the
    /// hyper-dual Jacobian of `z` (one evaluation for every `k`). Else
    /// [`PointInputs::third_derivative_by_passes`].
    fn third_derivative(&self, a: &Mat3<f64>, dx: &[f64], which: &[usize]) -> Inputs<f64> {
        let xd: Inputs<HyperDual64> = self
            .x
            .iter()
            .zip(dx)
            .enumerate()
            .map(|(k, (&v, &d))| {
                let e1 = if k < 9 { a[k / 3][k % 3] } else { 0.0 };
                HyperDual64::new(v, e1, d, 0.0)
            })
            .collect();
        let (mut z, mut jac) = (Inputs::new(), ArgumentJacobian::new());
        self.form_arguments(&xd, &mut z, &mut jac);
        let np = self.n_params();
        let Some(grad) = self.law.isochoric_form_gradient(z[0], z[1], z[2], &z[3..3 + np]) else {
            return self.third_derivative_by_passes(a, dx, which);
        };
        let mut out: Inputs<f64> = SmallVec::from_elem(0.0, self.x.len());
        for &k in which {
            out[k] = jac
                .chunks(xd.len())
                .zip(&grad)
                .map(|(row, g)| {
                    let d = row[k];
                    g.re * d.eps1eps2 + g.eps1 * d.eps2 + g.eps2 * d.eps1 + g.eps1eps2 * d.re
                })
                .sum();
        }
        out
    }

    /// [`PointInputs::third_derivative`] by one [`HyperHyperDual64`] pass of φ per input (any
    /// law).
    fn third_derivative_by_passes(
        &self,
        a: &Mat3<f64>,
        dx: &[f64],
        which: &[usize],
    ) -> Inputs<f64> {
        let mut xd = self.seeded_twice(a, dx);
        let mut out: Inputs<f64> = SmallVec::from_elem(0.0, self.x.len());
        for &k in which {
            xd[k].eps3 = 1.0;
            out[k] = self.energy(&xd).eps1eps2eps3;
            xd[k].eps3 = 0.0;
        }
        out
    }
}

/// One quadrature point of a volume element with the direction's tangents there.
struct PointFrame<'a> {
    inputs: PointInputs<'a>,
    /// The direction of the inputs: δF = ∇δu − H ∇δX (the second term with moving nodes), the
    /// parameters', element field's, thermal and temperature tangents.
    dx: Inputs<f64>,
    /// The point's weight w = w_q det J₀.
    w: f64,
    /// H = F − I = ∇u.
    H: Mat3<f64>,
    /// ∇δX, the gradient of the node coordinates' tangent (zero when they hold still).
    grad_dx: Mat3<f64>,
    /// Whether the direction moves a node of this element.
    moving: bool,
}

impl PointFrame<'_> {
    /// δw = w tr ∇δX, the weight's tangent.
    fn weight_tangent(&self) -> f64 {
        self.w * (self.grad_dx[0][0] + self.grad_dx[1][1] + self.grad_dx[2][2])
    }

    /// δ(∇N_b) = −(∇δX)ᵀ ∇N_b, the tangent of a physical shape gradient.
    fn gradient_tangent(&self, gb: [f64; 3]) -> [f64; 3] {
        let d = &self.grad_dx;
        [0, 1, 2].map(|j| -(d[0][j] * gb[0] + d[1][j] * gb[1] + d[2][j] * gb[2]))
    }
}

/// `A B` of 3×3 matrices.
fn mat_mul(a: &Mat3<f64>, b: &Mat3<f64>) -> Mat3<f64> {
    [0, 1, 2].map(|i| [0, 1, 2].map(|j| (0..3).map(|k| a[i][k] * b[k][j]).sum()))
}

/// `Aᵀ B` of 3×3 matrices.
fn mat_tmul(a: &Mat3<f64>, b: &Mat3<f64>) -> Mat3<f64> {
    [0, 1, 2].map(|i| [0, 1, 2].map(|j| (0..3).map(|k| a[k][i] * b[k][j]).sum()))
}

/// `A : B`.
fn mat_dot(a: &Mat3<f64>, b: &Mat3<f64>) -> f64 {
    (0..3).map(|i| dot3(a[i], b[i])).sum()
}

/// The first nine entries of `v` as a 3×3 matrix (row-major).
fn mat_of(v: &[f64]) -> Mat3<f64> {
    [0, 1, 2].map(|i| [v[3 * i], v[3 * i + 1], v[3 * i + 2]])
}

/// `A v`.
fn mat_vec(a: &Mat3<f64>, v: [f64; 3]) -> [f64; 3] {
    [dot3(a[0], v), dot3(a[1], v), dot3(a[2], v)]
}

impl FiniteStrainModel {
    /// The inputs of φ at quadrature point `q` of volume element `e` for the full
    /// displacement `u` and load factor `load`, with the point's weight, physical shape
    /// gradients (into `g`) and the direction of its inputs along `dir`.
    #[allow(clippy::too_many_arguments)]
    fn point_inputs<'a>(
        &'a self,
        e: usize,
        q: usize,
        u: &[f64],
        load: f64,
        dir: &FiniteDirection,
        laws: &'a RegionLaw,
        g: &mut [[f64; 3]; MAX_NODES],
    ) -> Result<PointFrame<'a>, FiniteStrainError> {
        let scaled = laws.scaled.as_slice();
        let r = self.element_region(e);
        let region = &self.regions[r];
        let tab = &self.tables[self.elem_table[e] as usize];
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let x = self.element_coords(e);
        let det0 = geometry::physical_gradients_into(3, tab.grad(q), &x[..nn], &mut g[..nn]);
        let w = tab.weights[q] * det0;
        let H = field_gradient(u, nodes, g);
        let mut F = H;
        for (i, row) in F.iter_mut().enumerate() {
            row[i] += 1.0;
        }
        let J = det(&F);
        if J.is_nan() || J <= 0.0 {
            return Err(self.inverted(e, J));
        }
        let shape = tab.shape(q);
        let params = &laws.params;
        let thermal = self.temperature.is_some();
        let (tq, dtq) = match &self.temperature {
            Some(t) => nodes.iter().zip(shape).fold((0.0, 0.0), |(v, d), (&n, s)| {
                (v + s * t[n], d + s * dir.temperature.get(n).copied().unwrap_or(0.0))
            }),
            None => (0.0, 0.0),
        };
        let mut xs: Inputs<f64> = SmallVec::new();
        xs.extend(F.iter().flatten().copied());
        xs.extend(params.iter().copied());
        xs.extend([self.element_scale[e], region.alpha, region.t_ref, tq]);
        let mut grad_dx = [[0.0; 3]; 3];
        let mut moving = false;
        if !dir.coordinates.is_empty() {
            for (a, &n) in nodes.iter().enumerate() {
                let d = dir.coordinates[n];
                moving |= d != [0.0; 3];
                for i in 0..3 {
                    for j in 0..3 {
                        grad_dx[i][j] += d[i] * g[a][j];
                    }
                }
            }
        }
        let mut dF = field_gradient(&dir.displacement, nodes, g);
        if moving {
            let hd = mat_mul(&H, &grad_dx);
            dF.iter_mut().flatten().zip(hd.iter().flatten()).for_each(|(d, h)| *d -= h);
        }
        let mut dx: Inputs<f64> = SmallVec::new();
        dx.extend(dF.iter().flatten().copied());
        dx.extend(dir.material[r].iter().copied());
        dx.extend([dir.element_scale[e], dir.alpha[r], dir.t_ref[r], dtq]);
        let inputs = PointInputs { law: &region.law, scaled, load, thermal, x: xs };
        Ok(PointFrame { inputs, dx, w, H, grad_dx, moving })
    }

    /// Whether `dir` moves a node of element `e`.
    fn moves(&self, e: usize, dir: &FiniteDirection) -> bool {
        !dir.coordinates.is_empty()
            && self.element_nodes(e).iter().any(|&n| dir.coordinates[n] != [0.0; 3])
    }

    /// The facet's node coordinates, traction and pressure in hyper-dual numbers with ε₁
    /// along `dir` (δX, δt, δp).
    fn facet_along(
        &self,
        e: usize,
        dir: &FiniteDirection,
    ) -> (Vec<[HyperDual64; 3]>, [HyperDual64; 3], HyperDual64) {
        let b = self.elem_tag[e] as usize;
        let (t, p) = self.facet_params(e);
        let nodes = self.element_nodes(e);
        let x = self.element_coords(e);
        let hd = |v: f64, d: f64| HyperDual64::new(v, d, 0.0, 0.0);
        let xd = nodes
            .iter()
            .zip(&x)
            .map(|(&n, xa)| {
                let d = dir.coordinates.get(n).copied().unwrap_or([0.0; 3]);
                [0, 1, 2].map(|k| hd(xa[k], d[k]))
            })
            .collect();
        let td = [0, 1, 2].map(|k| hd(t[k], dir.traction[b][k]));
        (xd, td, hd(p, dir.pressure[b]))
    }

    /// `dR_full/dε` along `dir` at the full displacement `u` and load factor `load`: `K_full δu`
    /// plus the residual's derivative along the parameter, load, temperature and node
    /// coordinate tangents, at every dof (constrained ones included). With moving nodes a
    /// point adds `δw P g_a + w P δg_a − s N_a δw b` to `w dP g_a` (δF = ∇δu − H∇δX in dP).
    /// Errors: an inverted element, a failing law.
    pub fn residual_jvp(
        &self,
        u: &[f64],
        load: f64,
        dir: &FiniteDirection,
    ) -> Result<Vec<f64>, FiniteStrainError> {
        let laws = self.region_laws();
        self.scatter_checked(3, |e, local| {
            let nodes = self.element_nodes(e);
            let nn = nodes.len();
            if e >= self.n_volume {
                let b = self.elem_tag[e] as usize;
                let tab = self.topology.element_table(e);
                if self.moves(e, dir) {
                    let (xd, td, pd) = self.facet_along(e, dir);
                    let mut r = vec![HyperDual64::from(0.0); 3 * nn];
                    facet_residual_generic(tab, &xd, td, pd, load, &mut r);
                    local[..3 * nn].iter_mut().zip(&r).for_each(|(l, v)| *l += v.eps1);
                    return Ok(());
                }
                let (t, p) = (dir.traction[b], dir.pressure[b]);
                if t != [0.0; 3] || p != 0.0 {
                    let x = self.element_coords(e);
                    facet_residual_generic(tab, &x[..nn], t, p, load, &mut local[..3 * nn]);
                }
                return Ok(());
            }
            let r = self.element_region(e);
            let tab = &self.tables[self.elem_table[e] as usize];
            let (b, db) = (self.regions[r].body_force, dir.body_force[r]);
            let mut g = [[0.0; 3]; MAX_NODES];
            for q in 0..tab.n_points() {
                let pt = self.point_inputs(e, q, u, load, dir, &laws[r], &mut g)?;
                let (first, second) = pt.inputs.derivatives_along(&pt.dx);
                let w = pt.w;
                let shape = tab.shape(q);
                let dw = pt.weight_tangent();
                // d(wP) = δw P + w dP.
                let dwp = [0, 1, 2]
                    .map(|i| [0, 1, 2].map(|j| dw * first[3 * i + j] + w * second[3 * i + j]));
                let P = mat_of(&first);
                for a in 0..nn {
                    let dga = pt.gradient_tangent(g[a]);
                    for i in 0..3 {
                        let mut v = dot3(dwp[i], g[a]) - load * shape[a] * (dw * b[i] + w * db[i]);
                        if pt.moving {
                            v += w * dot3(P[i], dga);
                        }
                        local[3 * a + i] += v;
                    }
                }
            }
            Ok(())
        })
    }

    /// `d/dε ∇_{(u,q,X)} (μᵀR_full)` along `dir` with the full-dof vector `mu` held, at the
    /// full displacement `u` and load factor `load` (module docs). `want` selects the
    /// parameter parts (material: law parameters and the element field; thermal: α, T_ref and
    /// the nodal temperature; loads: body forces, tractions and pressures, which have second
    /// derivatives only with moving nodes; coords: the node coordinates); the displacement
    /// part is always computed. Elements on which μ vanishes are skipped.
    pub fn second_order_vjp(
        &self,
        u: &[f64],
        load: f64,
        mu: &[f64],
        dir: &FiniteDirection,
        want: FiniteVjpRequest,
    ) -> Result<FiniteSecondOrder, FiniteStrainError> {
        use rayon::prelude::*;
        let laws = self.region_laws();
        let thermal = want.thermal && self.temperature.is_some();
        let n_par: Vec<usize> = laws.iter().map(|l| l.scaled.len()).collect();
        // Per volume element: the displacement part (3 per local node), the material parts
        // (n_p + 1: the law parameters and sₑ), α, T_ref, T per local node, the body force (3)
        // and the node coordinates (3 per local node).
        let per_elem: Vec<Result<Vec<f64>, FiniteStrainError>> = (0..self.n_volume)
            .into_par_iter()
            .map(|e| {
                if self.vanishes_on(e, mu) {
                    return Ok(Vec::new());
                }
                let r = self.element_region(e);
                let np = n_par[r];
                let nn = self.element_nodes(e).len();
                let mut which: Inputs<usize> = (0..9).collect();
                if want.material {
                    which.extend(9..10 + np);
                }
                if thermal {
                    which.extend(10 + np..13 + np);
                }
                let mut out = vec![0.0; 3 * nn + np + 3 + nn + 3 + 3 * nn];
                self.element_second_order(e, u, load, mu, dir, want, &laws[r], &which, &mut out)?;
                Ok(out)
            })
            .collect();
        let facets: Vec<Result<Vec<f64>, FiniteStrainError>> = (self.n_volume..self.n_elements())
            .into_par_iter()
            .map(|e| {
                let moving = self.moves(e, dir);
                if self.vanishes_on(e, mu) || !(want.coords || (moving && want.loads)) {
                    return Ok(Vec::new());
                }
                Ok(self.facet_second_order(e, load, mu, dir, want, moving))
            })
            .collect();
        let nr = self.regions.len();
        let nb = self.boundaries().len();
        let mut displacement = vec![0.0; 3 * self.n_nodes()];
        let mut params = FiniteParameterVjp {
            material: n_par.iter().map(|&n| vec![0.0; n]).collect(),
            element_scale: vec![0.0; self.n_volume],
            body_force: vec![[0.0; 3]; nr],
            alpha: vec![0.0; nr],
            t_ref: vec![0.0; nr],
            traction: vec![[0.0; 3]; nb],
            pressure: vec![0.0; nb],
            displacement: vec![[0.0; 3]; nb],
            temperature: thermal.then(|| vec![0.0; self.n_nodes()]),
            coords: want.coords.then(|| vec![[0.0; 3]; self.n_nodes()]),
        };
        let add_coords = |coords: &mut Option<Vec<[f64; 3]>>, nodes: &[usize], v: &[f64]| {
            if let Some(c) = coords {
                for (a, &n) in nodes.iter().enumerate() {
                    for k in 0..3 {
                        c[n][k] += v[3 * a + k];
                    }
                }
            }
        };
        // Summed in element order: the result does not depend on the thread count.
        for (e, out) in per_elem.into_iter().enumerate() {
            let out = out?;
            if out.is_empty() {
                continue;
            }
            let r = self.element_region(e);
            let np = n_par[r];
            let nodes = self.element_nodes(e);
            let nn = nodes.len();
            for (a, &n) in nodes.iter().enumerate() {
                for i in 0..3 {
                    displacement[3 * n + i] += out[3 * a + i];
                }
            }
            let rest = &out[3 * nn..];
            if want.material {
                params.material[r].iter_mut().zip(&rest[..np]).for_each(|(m, v)| *m += v);
                params.element_scale[e] += rest[np];
            }
            if let Some(t) = &mut params.temperature {
                params.alpha[r] += rest[np + 1];
                params.t_ref[r] += rest[np + 2];
                for (a, &n) in nodes.iter().enumerate() {
                    t[n] += rest[np + 3 + a];
                }
            }
            if want.loads {
                for i in 0..3 {
                    params.body_force[r][i] += rest[np + 3 + nn + i];
                }
            }
            add_coords(&mut params.coords, nodes, &rest[np + 6 + nn..]);
        }
        for (e, out) in (self.n_volume..).zip(facets) {
            let out = out?;
            if out.is_empty() {
                continue;
            }
            let b = self.elem_tag[e] as usize;
            for k in 0..3 {
                params.traction[b][k] += out[k];
            }
            params.pressure[b] += out[3];
            add_coords(&mut params.coords, self.element_nodes(e), &out[4..]);
        }
        Ok(FiniteSecondOrder { displacement, parameters: params })
    }

    /// Volume element `e`'s part of [`Self::second_order_vjp`] into `out` (its layout there).
    /// Per point, with `ℓ = w Dφ[G] − s w N μ·b` (G = ∇μ), the inputs' gradient moves by
    /// `w D³φ[G, δx, ·] + w D²φ[δG, ·] + δw D²φ[G, ·]` (δG = −G∇δX, δw = w tr ∇δX), mapped to
    /// the nodes by ∇N_b and its tangent; the coordinates' gradient `M ∇N_b`, with
    /// `M = ℓ I − Hᵀ(wA:G) − Gᵀ(wP)` (the first-order product's closed form), moves by
    /// `dM ∇N_b + M δ∇N_b`.
    #[allow(clippy::too_many_arguments)]
    fn element_second_order(
        &self,
        e: usize,
        u: &[f64],
        load: f64,
        mu: &[f64],
        dir: &FiniteDirection,
        want: FiniteVjpRequest,
        laws: &RegionLaw,
        which: &[usize],
        out: &mut [f64],
    ) -> Result<(), FiniteStrainError> {
        let r = self.element_region(e);
        let np = laws.scaled.len();
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let tab = &self.tables[self.elem_table[e] as usize];
        let (b, db) = (self.regions[r].body_force, dir.body_force[r]);
        let (o_body, o_coords) = (3 * nn + np + 3 + nn, 3 * nn + np + 6 + nn);
        let mut g = [[0.0; 3]; MAX_NODES];
        for q in 0..tab.n_points() {
            let pt = self.point_inputs(e, q, u, load, dir, laws, &mut g)?;
            let w = pt.w;
            let G = field_gradient(mu, nodes, &g);
            let t = pt.inputs.third_derivative(&G, &pt.dx, which);
            let mut dgrad: Inputs<f64> = t.iter().map(|v| w * v).collect();
            let shape = tab.shape(q);
            let mut mq = [0.0; 3];
            for a in 0..nn {
                for i in 0..3 {
                    mq[i] += shape[a] * mu[3 * nodes[a] + i];
                }
            }
            let first = (pt.moving || want.coords).then(|| {
                pt.inputs.derivatives_along(&{
                    let mut dg: Inputs<f64> = SmallVec::from_elem(0.0, pt.dx.len());
                    dg[..9].copy_from_slice(G.as_flattened());
                    dg
                })
            });
            let dw = pt.weight_tangent();
            let dG = mat_mul(&G, &pt.grad_dx).map(|row| row.map(|v| -v));
            if let (true, Some((_, hg))) = (pt.moving, &first) {
                let hdg = pt.inputs.second_derivative_along_f(&dG);
                dgrad.iter_mut().zip(hdg.iter().zip(hg)).for_each(|(d, (a, c))| {
                    *d += w * a + dw * c;
                });
            }
            let S = first.as_ref().map(|(_, hg)| mat_of(hg));
            for bn in 0..nn {
                let dgb = pt.gradient_tangent(g[bn]);
                for i in 0..3 {
                    let mut v = dot3([dgrad[3 * i], dgrad[3 * i + 1], dgrad[3 * i + 2]], g[bn]);
                    if let (true, Some(S)) = (pt.moving, &S) {
                        v += w * dot3(S[i], dgb);
                    }
                    out[3 * bn + i] += v;
                }
            }
            let rest = &mut out[3 * nn..];
            for k in 0..np + 3 {
                rest[k] += dgrad[9 + k];
            }
            for a in 0..nn {
                rest[np + 3 + a] += dgrad[12 + np] * shape[a];
            }
            if pt.moving && want.loads {
                for i in 0..3 {
                    out[o_body + i] -= dw * load * mq[i];
                }
            }
            let (Some((grad, hg)), true) = (&first, want.coords) else {
                continue;
            };
            let (P, S) = (mat_of(grad), mat_of(hg));
            let l0 = mat_dot(&P, &G) - load * dot3(mq, b);
            let d2: f64 = hg.iter().zip(&pt.dx).map(|(a, c)| a * c).sum();
            let dl = dw * l0 + w * (d2 + mat_dot(&P, &dG)) - w * load * dot3(mq, db);
            let dP = mat_of(&pt.inputs.derivatives_along(&pt.dx).1);
            let dF = mat_of(&pt.dx);
            let dS = mat_of(&dgrad);
            let hs = mat_tmul(&pt.H, &S);
            let gp = mat_tmul(&G, &P);
            let (dfs, hds, dgp) = (mat_tmul(&dF, &S), mat_tmul(&pt.H, &dS), mat_tmul(&dG, &P));
            let gdp = mat_tmul(&G, &dP);
            let mut M = [[0.0; 3]; 3];
            let mut dM = [[0.0; 3]; 3];
            for k in 0..3 {
                for l in 0..3 {
                    let id = if k == l { 1.0 } else { 0.0 };
                    M[k][l] = w * (l0 * id - hs[k][l] - gp[k][l]);
                    dM[k][l] = dl * id
                        - w * dfs[k][l]
                        - hds[k][l]
                        - w * dgp[k][l]
                        - gp[k][l] * dw
                        - w * gdp[k][l];
                }
            }
            for bn in 0..nn {
                let (a1, a2) = (mat_vec(&dM, g[bn]), mat_vec(&M, pt.gradient_tangent(g[bn])));
                for k in 0..3 {
                    out[o_coords + 3 * bn + k] += a1[k] + a2[k];
                }
            }
        }
        Ok(())
    }

    /// Facet `e`'s part of [`Self::second_order_vjp`]: `[traction (3), pressure, coordinates
    /// (3 per local node)]`, the derivatives of `μᵀ r_facet` along `dir` by hyper-dual passes
    /// (ε₁ along δX, δt, δp; ε₂ along each input). The traction and pressure parts are
    /// nonzero only with moving nodes (the facet residual is linear in them).
    fn facet_second_order(
        &self,
        e: usize,
        load: f64,
        mu: &[f64],
        dir: &FiniteDirection,
        want: FiniteVjpRequest,
        moving: bool,
    ) -> Vec<f64> {
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let tab = self.topology.element_table(e);
        let mut out = vec![0.0; 4 + 3 * nn];
        let (mut xd, mut td, mut pd) = self.facet_along(e, dir);
        let mut r = vec![HyperDual64::from(0.0); 3 * nn];
        let mut pass = |xd: &[[HyperDual64; 3]], td, pd| -> f64 {
            r.fill(HyperDual64::from(0.0));
            facet_residual_generic(tab, xd, td, pd, load, &mut r);
            (0..3 * nn).map(|k| r[k].eps1eps2 * mu[3 * nodes[k / 3] + k % 3]).sum()
        };
        if moving && want.loads {
            for k in 0..3 {
                td[k].eps2 = 1.0;
                out[k] = pass(&xd, td, pd);
                td[k].eps2 = 0.0;
            }
            pd.eps2 = 1.0;
            out[3] = pass(&xd, td, pd);
            pd.eps2 = 0.0;
        }
        if want.coords {
            for a in 0..nn {
                for i in 0..3 {
                    xd[a][i].eps2 = 1.0;
                    out[4 + 3 * a + i] = pass(&xd, td, pd);
                    xd[a][i].eps2 = 0.0;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finite::{FiniteRegionSpec, FiniteVjpRequest};
    use crate::hyperelastic::{Ogden, Volumetric};
    use crate::linear::{BcKind, BcSpec};
    use gradfem_mesh::generate::{BoxSpec, box_mesh};
    use gradfem_mesh::{CellType, Mesh};

    /// A 2×1×1 Tet4 block of a two-term Ogden rubber, clamped at x = 0, pulled by a traction
    /// at x = 1 and heated by a temperature field, with a non-uniform element field.
    fn model(cell: CellType) -> (FiniteStrainModel, Vec<f64>, f64) {
        let mesh: Mesh = box_mesh(&BoxSpec {
            origin: [0.0; 3],
            lengths: [2.0, 1.0, 1.0],
            divisions: [2, 1, 1],
            cell_type: cell,
        });
        let law = HyperelasticLaw::Ogden(
            Ogden::new(&[(0.6, 1.7), (0.05, -1.2)], 20.0).with_volumetric(Volumetric::default()),
        );
        let regions = vec![FiniteRegionSpec {
            group: "domain".into(),
            law,
            body_force: [0.0, 0.01, -0.02],
            alpha: 2e-3,
            t_ref: 300.0,
        }];
        let bcs = vec![
            BcSpec { group: "xmin".into(), kind: BcKind::Fixed },
            BcSpec { group: "xmax".into(), kind: BcKind::Traction { traction: [0.3, 0.05, -0.1] } },
            BcSpec { group: "ymax".into(), kind: BcKind::Pressure { pressure: 0.04 } },
        ];
        let mut m = FiniteStrainModel::new(&mesh, &regions, &bcs).expect("model");
        for (e, s) in m.element_scale.iter_mut().enumerate() {
            *s = 1.0 + 0.1 * (e as f64 * 0.7).sin();
        }
        let t: Vec<f64> = m.coords.iter().map(|x| 320.0 + 15.0 * x[0] - 5.0 * x[2]).collect();
        m.set_temperature(Some(t)).expect("temperature");
        // A deformed state (not an equilibrium: the products hold anywhere).
        let u: Vec<f64> = (0..3 * m.n_nodes())
            .map(|d| {
                let x = m.coords[d / 3];
                0.08 * x[0] * ((d % 3) as f64 + 1.0) * (0.3 + x[1]) - 0.03 * x[2]
            })
            .collect();
        (m, u, 0.7)
    }

    fn direction(m: &FiniteStrainModel, salt: f64) -> FiniteDirection {
        let mut d = FiniteDirection::zeros(m);
        let wave = |i: usize| ((i as f64 + 1.0) * (0.37 + salt)).sin();
        d.displacement.iter_mut().enumerate().for_each(|(i, v)| *v = 0.05 * wave(i));
        d.temperature.iter_mut().enumerate().for_each(|(i, v)| *v = 4.0 * wave(i + 7));
        for r in &mut d.material {
            r.iter_mut().enumerate().for_each(|(i, v)| *v = 0.1 * wave(i + 3));
        }
        d.element_scale.iter_mut().enumerate().for_each(|(i, v)| *v = 0.2 * wave(i + 11));
        d.alpha[0] = 1e-3 * wave(5);
        d.t_ref[0] = 3.0 * wave(9);
        d.body_force[0] = [0.01, -0.02, 0.03];
        for (b, bc) in m.boundaries().iter().enumerate() {
            match bc.kind {
                BcKind::Traction { .. } => d.traction[b] = [0.05, 0.02, -0.04],
                BcKind::Pressure { .. } => d.pressure[b] = -0.03,
                _ => {}
            }
        }
        d
    }

    /// `direction` with the node coordinates moving too (a smooth field, non-affine).
    fn moving_direction(m: &FiniteStrainModel, salt: f64) -> FiniteDirection {
        let mut d = direction(m, salt);
        d.coordinates = m
            .coords
            .iter()
            .map(|x| {
                let s = (1.3 * x[0] + 0.7 * x[1] - 0.4 * x[2] + salt).sin();
                [0.04 * s, -0.03 * x[0] * x[2], 0.05 * (x[1] * x[1] - s)]
            })
            .collect();
        d
    }

    /// The model moved by h along `d` (parameters, loads, temperature; not u).
    fn moved(m: &FiniteStrainModel, d: &FiniteDirection, h: f64) -> FiniteStrainModel {
        let mut m2 = m.clone();
        for r in 0..m.regions.len() {
            let p: Vec<f64> = m
                .region_parameters(r)
                .iter()
                .zip(&d.material[r])
                .map(|(p, dp)| p + h * dp)
                .collect();
            m2.set_region_parameters(r, &p).expect("parameters");
            m2.regions[r].alpha += h * d.alpha[r];
            m2.regions[r].t_ref += h * d.t_ref[r];
            for i in 0..3 {
                m2.regions[r].body_force[i] += h * d.body_force[r][i];
            }
        }
        for (s, ds) in m2.element_scale.iter_mut().zip(&d.element_scale) {
            *s += h * ds;
        }
        for (b, bc) in m.boundaries().iter().enumerate() {
            match bc.kind {
                BcKind::Traction { traction } => {
                    let t = [0, 1, 2].map(|i| traction[i] + h * d.traction[b][i]);
                    m2.set_boundary_kind(b, BcKind::Traction { traction: t });
                }
                BcKind::Pressure { pressure } => {
                    let p = pressure + h * d.pressure[b];
                    m2.set_boundary_kind(b, BcKind::Pressure { pressure: p });
                }
                _ => {}
            }
        }
        for (x, dx) in m2.coords.iter_mut().zip(&d.coordinates) {
            for k in 0..3 {
                x[k] += h * dx[k];
            }
        }
        let t: Vec<f64> = m
            .temperature()
            .expect("temperature")
            .iter()
            .zip(&d.temperature)
            .map(|(t, dt)| t + h * dt)
            .collect();
        m2.set_temperature(Some(t)).expect("temperature");
        m2
    }

    fn close(a: &[f64], b: &[f64], tol: f64) {
        let scale = b.iter().fold(0.0_f64, |m, v| m.max(v.abs())).max(1e-300);
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= tol * scale, "entry {i}: {x} vs {y} (scale {scale})");
        }
    }

    /// The invariant-form products equal one dual pass per input of φ, for every law with
    /// such a form, with and without the thermal stretch, on each branch of the spectrum:
    /// three close stretches, a close pair (uniaxial), three distinct.
    #[rstest::rstest]
    fn invariant_form_products_equal_the_passes_of_the_energy(
        #[values(0, 1, 2, 3)] law: usize,
        #[values(false, true)] thermal: bool,
        #[values(0, 1, 2)] branch: usize,
    ) {
        use crate::hyperelastic::{MooneyRivlin, NeoHookean};
        let law = match law {
            0 => HyperelasticLaw::Ogden(
                Ogden::new(&[(0.6, 1.7), (0.05, -1.2)], 20.0)
                    .with_volumetric(Volumetric::LogSquared),
            ),
            1 => HyperelasticLaw::Ogden(Ogden::new(&[(1.0, 3.0)], 10.0)),
            2 => HyperelasticLaw::NeoHookean(NeoHookean {
                mu: 0.8,
                kappa: 12.0,
                volumetric: Volumetric::SimoTaylor,
            }),
            _ => HyperelasticLaw::MooneyRivlin(MooneyRivlin {
                c10: 0.3,
                c01: 0.07,
                kappa: 9.0,
                volumetric: Volumetric::Quadratic,
            }),
        };
        let F: Mat3<f64> = match branch {
            0 => [[1.0 + 1e-3, 2e-4, 0.0], [-1e-4, 1.0, 3e-4], [0.0, 1e-4, 1.0 - 5e-4]],
            1 => [[1.3, 0.0, 0.0], [0.0, 0.9, 0.0], [0.0, 0.0, 0.9]],
            _ => [[1.2, 0.3, -0.1], [0.05, 0.85, 0.2], [-0.1, 0.15, 1.1]],
        };
        let scaled = law.scaled_parameters();
        let params = law.parameters();
        let np = params.len();
        let mut x: Vec<f64> = F.iter().flatten().copied().collect();
        x.extend(&params);
        x.extend([1.15, 2e-3, 300.0, 340.0]);
        let inputs = PointInputs { law: &law, scaled: &scaled, load: 0.7, thermal, x: x.into() };
        let wave = |i: usize, salt: f64| ((i as f64 + 1.0) * (0.37 + salt)).sin();
        let dx: Vec<f64> = (0..13 + np).map(|i| 0.1 * wave(i, 0.0)).collect();
        let mut dx = dx;
        dx[11 + np] *= 30.0; // T_ref and T_q move by kelvins
        dx[12 + np] *= 40.0;
        let a: Mat3<f64> = [0, 1, 2].map(|i| [0, 1, 2].map(|j| wave(3 * i + j, 0.21)));
        let which: Vec<usize> = (0..13 + np).collect();
        let fast = inputs.third_derivative(&a, &dx, &which);
        let passes = inputs.third_derivative_by_passes(&a, &dx, &which);
        let scale = passes.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
        for (k, (f, p)) in fast.iter().zip(&passes).enumerate() {
            assert!((f - p).abs() <= 1e-10 * scale, "input {k}: {f} vs {p} (scale {scale})");
        }
        let (fast, passes) =
            (inputs.derivatives_along(&dx), inputs.derivatives_along_by_passes(&dx));
        for (what, f, p) in [("∇φ", &fast.0, &passes.0), ("D²φ[·, dx]", &fast.1, &passes.1)] {
            let scale = p.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
            for (k, (f, p)) in f.iter().zip(p).enumerate() {
                assert!((f - p).abs() <= 1e-11 * scale, "{what}, input {k}: {f} vs {p}");
            }
        }
    }

    #[rstest::rstest]
    fn residual_jvp_is_the_derivative_of_the_residual(
        #[values(CellType::Tet4, CellType::Hex8, CellType::Tet10)] cell: CellType,
        #[values(false, true)] moving: bool,
    ) {
        {
            let (m, u, s) = model(cell);
            let d = if moving { moving_direction(&m, 0.0) } else { direction(&m, 0.0) };
            let jvp = m.residual_jvp(&u, s, &d).expect("jvp");
            let h = 1e-5;
            let at = |h: f64| {
                let u2: Vec<f64> = u.iter().zip(&d.displacement).map(|(a, b)| a + h * b).collect();
                moved(&m, &d, h).full_residual(&u2, s).expect("residual")
            };
            let (p, q) = (at(h), at(-h));
            let fd: Vec<f64> = p.iter().zip(&q).map(|(a, b)| (a - b) / (2.0 * h)).collect();
            close(&jvp, &fd, 1e-7);
        }
    }

    /// Also with moving nodes: then the loads' products move too (the weights and facet areas
    /// do), and the node coordinates' product has a derivative along every input.
    #[rstest::rstest]
    fn second_order_vjp_is_the_derivative_of_the_first_order_products(
        #[values(CellType::Tet4, CellType::Hex8, CellType::Tet10)] cell: CellType,
        #[values(false, true)] moving: bool,
    ) {
        {
            let (m, u, s) = model(cell);
            let d = if moving { moving_direction(&m, 0.0) } else { direction(&m, 0.0) };
            let mu: Vec<f64> = (0..u.len()).map(|i| ((i as f64) * 1.3).cos()).collect();
            let so = m.second_order_vjp(&u, s, &mu, &d, FiniteVjpRequest::ALL).expect("vjp");
            let h = 1e-5;
            let at = |h: f64| {
                let u2: Vec<f64> = u.iter().zip(&d.displacement).map(|(a, b)| a + h * b).collect();
                let m2 = moved(&m, &d, h);
                let ku = m2.tangent_transpose_product(&u2, s, &mu).expect("Kᵀμ");
                (ku, m2.parameter_vjp(&u2, s, &mu, FiniteVjpRequest::ALL).expect("vjp"))
            };
            let ((kp, vp), (kq, vq)) = (at(h), at(-h));
            let fd = |a: &[f64], b: &[f64]| -> Vec<f64> {
                a.iter().zip(b).map(|(a, b)| (a - b) / (2.0 * h)).collect()
            };
            close(&so.displacement, &fd(&kp, &kq), 1e-6);
            let got = &so.parameters;
            close(&got.material[0], &fd(&vp.material[0], &vq.material[0]), 1e-6);
            close(&got.element_scale, &fd(&vp.element_scale, &vq.element_scale), 1e-6);
            close(&got.alpha, &fd(&vp.alpha, &vq.alpha), 1e-6);
            close(&got.t_ref, &fd(&vp.t_ref, &vq.t_ref), 1e-6);
            close(
                got.temperature.as_ref().expect("T"),
                &fd(vp.temperature.as_ref().expect("T"), vq.temperature.as_ref().expect("T")),
                1e-6,
            );
            let flat = |v: &[[f64; 3]]| v.as_flattened().to_vec();
            let loads = |v: &FiniteParameterVjp| {
                let mut l = flat(&v.body_force);
                l.extend(flat(&v.traction));
                l.extend(&v.pressure);
                l
            };
            let fd_loads = fd(&loads(&vp), &loads(&vq));
            if moving {
                close(&loads(got), &fd_loads, 1e-6);
            } else {
                assert!(loads(got).iter().all(|v| *v == 0.0));
                assert!(fd_loads.iter().all(|v| v.abs() < 1e-6));
            }
            let coords = |v: &FiniteParameterVjp| flat(v.coords.as_ref().expect("X"));
            close(&coords(got), &fd(&coords(&vp), &coords(&vq)), 1e-6);
        }
    }
}
