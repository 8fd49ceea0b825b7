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
//! Node coordinates are not a direction here. Both products are tested against central
//! differences of the first-order products they differentiate.

#![allow(non_snake_case)] // F, P: the names of continuum mechanics.

use num_dual::{Dual64, DualNum, HyperDual64, HyperHyperDual64};

use super::{
    FiniteParameterVjp, FiniteStrainError, FiniteStrainModel, FiniteVjpRequest, HyperelasticLaw,
    MAX_NODES, dot3, facet_residual_generic, field_gradient,
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
struct PointInputs<'a> {
    law: &'a HyperelasticLaw,
    scaled: &'a [bool],
    /// Load factor s (the thermal ramp).
    load: f64,
    /// Whether θ depends on the temperature (a temperature field is set).
    thermal: bool,
    /// `x` in the layout F (9), p (n_p), sₑ, α, T_ref, T_q.
    x: Vec<f64>,
}

impl PointInputs<'_> {
    fn n_params(&self) -> usize {
        self.scaled.len()
    }

    /// φ(x) in any dual type.
    fn energy<D: DualNum<Primitive = f64> + Copy>(&self, x: &[D]) -> D {
        let np = self.n_params();
        let s = x[9 + np];
        let m: Vec<D> = x[9..9 + np]
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
    fn form_arguments<D: DualNum<Primitive = f64> + Copy>(&self, x: &[D]) -> (Vec<D>, Vec<D>) {
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
        let mut jac = vec![D::zero(); n * (3 + np)];
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
        let mut z = Vec::with_capacity(3 + np);
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
        (z, jac)
    }

    /// `dP_iJ = D²φ[E_iJ, dx]`, the derivative of the first Piola–Kirchhoff stress along `dx`.
    /// Through the law's isochoric–volumetric form when it has one: with `z(x)` and its
    /// Jacobian along `dx` (ε), `D²φ[e_k, dx] = Σ_c ∂_c h · (∂z_c/∂x_k)' + (∇²h Dz[dx])_c ∂z_c/∂x_k`,
    /// the gradient of `h` along `dx` once per point. Else
    /// [`PointInputs::stress_derivative_by_passes`].
    fn stress_derivative(&self, dx: &[f64]) -> Mat3<f64> {
        let xd: Vec<Dual64> = self.x.iter().zip(dx).map(|(&v, &d)| Dual64::new(v, d)).collect();
        let (z, jac) = self.form_arguments(&xd);
        let np = self.n_params();
        let Some(grad) = self.law.isochoric_form_gradient(z[0], z[1], z[2], &z[3..3 + np]) else {
            return self.stress_derivative_by_passes(dx);
        };
        let mut dP = [[0.0; 3]; 3];
        for k in 0..9 {
            dP[k / 3][k % 3] = jac
                .chunks(xd.len())
                .zip(&grad)
                .map(|(row, g)| g.re * row[k].eps + g.eps * row[k].re)
                .sum();
        }
        dP
    }

    /// [`PointInputs::stress_derivative`] by 9 [`HyperDual64`] passes of φ (any law).
    fn stress_derivative_by_passes(&self, dx: &[f64]) -> Mat3<f64> {
        let mut dP = [[0.0; 3]; 3];
        let mut xd: Vec<HyperDual64> =
            self.x.iter().zip(dx).map(|(&v, &d)| HyperDual64::new(v, 0.0, d, 0.0)).collect();
        for ij in 0..9 {
            xd[ij].eps1 = 1.0;
            dP[ij / 3][ij % 3] = self.energy(&xd).eps1eps2;
            xd[ij].eps1 = 0.0;
        }
        dP
    }

    /// The inputs seeded with `a` (along F) in ε₁ and `dx` in ε₂.
    fn seeded_twice(&self, a: &Mat3<f64>, dx: &[f64]) -> Vec<HyperHyperDual64> {
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
    fn third_derivative(&self, a: &Mat3<f64>, dx: &[f64], which: &[usize]) -> Vec<f64> {
        let xd: Vec<HyperDual64> = self
            .x
            .iter()
            .zip(dx)
            .enumerate()
            .map(|(k, (&v, &d))| {
                let e1 = if k < 9 { a[k / 3][k % 3] } else { 0.0 };
                HyperDual64::new(v, e1, d, 0.0)
            })
            .collect();
        let (z, jac) = self.form_arguments(&xd);
        let np = self.n_params();
        let Some(grad) = self.law.isochoric_form_gradient(z[0], z[1], z[2], &z[3..3 + np]) else {
            return self.third_derivative_by_passes(a, dx, which);
        };
        let mut out = vec![0.0; self.x.len()];
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
    fn third_derivative_by_passes(&self, a: &Mat3<f64>, dx: &[f64], which: &[usize]) -> Vec<f64> {
        let mut xd = self.seeded_twice(a, dx);
        let mut out = vec![0.0; self.x.len()];
        for &k in which {
            xd[k].eps3 = 1.0;
            out[k] = self.energy(&xd).eps1eps2eps3;
            xd[k].eps3 = 0.0;
        }
        out
    }
}

impl FiniteStrainModel {
    /// The inputs of φ at quadrature point `q` of volume element `e` for the full
    /// displacement `u` and load factor `load`, with the point's weight, physical shape
    /// gradients and shape values, and the direction of its inputs along `dir`.
    #[allow(clippy::type_complexity)]
    fn point_inputs<'a>(
        &'a self,
        e: usize,
        q: usize,
        u: &[f64],
        load: f64,
        dir: &FiniteDirection,
        scaled: &'a [bool],
        g: &mut [[f64; 3]; MAX_NODES],
    ) -> Result<(PointInputs<'a>, Vec<f64>, f64), FiniteStrainError> {
        let r = self.element_region(e);
        let region = &self.regions[r];
        let tab = &self.tables[self.elem_table[e] as usize];
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let x = self.element_coords(e);
        let det0 = geometry::physical_gradients_into(3, tab.grad(q), &x[..nn], &mut g[..nn]);
        let w = tab.weights[q] * det0;
        let Gu = field_gradient(u, nodes, g);
        let mut F = Gu;
        for (i, row) in F.iter_mut().enumerate() {
            row[i] += 1.0;
        }
        let J = det(&F);
        if J.is_nan() || J <= 0.0 {
            return Err(self.inverted(e, J));
        }
        let shape = tab.shape(q);
        let params = region.law.parameters();
        let np = params.len();
        let thermal = self.temperature.is_some();
        let (tq, dtq) = match &self.temperature {
            Some(t) => nodes.iter().zip(shape).fold((0.0, 0.0), |(v, d), (&n, s)| {
                (v + s * t[n], d + s * dir.temperature.get(n).copied().unwrap_or(0.0))
            }),
            None => (0.0, 0.0),
        };
        let mut xs = Vec::with_capacity(13 + np);
        xs.extend(F.iter().flatten());
        xs.extend(&params);
        xs.extend([self.element_scale[e], region.alpha, region.t_ref, tq]);
        let dF = field_gradient(&dir.displacement, nodes, g);
        let mut dx = Vec::with_capacity(13 + np);
        dx.extend(dF.iter().flatten());
        dx.extend(&dir.material[r]);
        dx.extend([dir.element_scale[e], dir.alpha[r], dir.t_ref[r], dtq]);
        let inputs = PointInputs { law: &region.law, scaled, load, thermal, x: xs };
        Ok((inputs, dx, w))
    }

    /// `dR_full/dε` along `dir` at the full displacement `u` and load factor `load`: `K_full δu`
    /// plus the residual's derivative along the parameter, load and temperature tangents, at
    /// every dof (constrained ones included). Errors: an inverted element, a failing law.
    pub fn residual_jvp(
        &self,
        u: &[f64],
        load: f64,
        dir: &FiniteDirection,
    ) -> Result<Vec<f64>, FiniteStrainError> {
        let scaled: Vec<Vec<bool>> =
            self.regions.iter().map(|r| r.law.scaled_parameters()).collect();
        self.scatter_checked(3, |e, local| {
            let nodes = self.element_nodes(e);
            let nn = nodes.len();
            if e >= self.n_volume {
                let b = self.elem_tag[e] as usize;
                let (t, p) = (dir.traction[b], dir.pressure[b]);
                if t != [0.0; 3] || p != 0.0 {
                    let x = self.element_coords(e);
                    let tab = self.topology.element_table(e);
                    facet_residual_generic(tab, &x[..nn], t, p, load, &mut local[..3 * nn]);
                }
                return Ok(());
            }
            let r = self.element_region(e);
            let tab = &self.tables[self.elem_table[e] as usize];
            let db = dir.body_force[r];
            let mut g = [[0.0; 3]; MAX_NODES];
            for q in 0..tab.n_points() {
                let (inputs, dx, w) = self.point_inputs(e, q, u, load, dir, &scaled[r], &mut g)?;
                let dP = inputs.stress_derivative(&dx);
                let shape = tab.shape(q);
                for a in 0..nn {
                    for i in 0..3 {
                        local[3 * a + i] += w * (dot3(dP[i], g[a]) - load * shape[a] * db[i]);
                    }
                }
            }
            Ok(())
        })
    }

    /// `d/dε ∇_{(u,q)} (μᵀR_full)` along `dir` with the full-dof vector `mu` held, at the full
    /// displacement `u` and load factor `load` (module docs). `want` selects the parameter
    /// parts (material: law parameters and the element field; thermal: α, T_ref and the
    /// nodal temperature); the displacement part is always computed. Elements on which μ
    /// vanishes are skipped.
    pub fn second_order_vjp(
        &self,
        u: &[f64],
        load: f64,
        mu: &[f64],
        dir: &FiniteDirection,
        want: FiniteVjpRequest,
    ) -> Result<FiniteSecondOrder, FiniteStrainError> {
        let scaled: Vec<Vec<bool>> =
            self.regions.iter().map(|r| r.law.scaled_parameters()).collect();
        let thermal = want.thermal && self.temperature.is_some();
        let n_par: Vec<usize> = scaled.iter().map(Vec::len).collect();
        // Per element: the displacement part (3 per local node), then the material parts
        // (n_p + 1: the law parameters and sₑ), then α, T_ref and T per local node.
        let per_elem: Vec<Result<Vec<f64>, FiniteStrainError>> = {
            use rayon::prelude::*;
            (0..self.n_volume)
                .into_par_iter()
                .map(|e| {
                    if self.vanishes_on(e, mu) {
                        return Ok(Vec::new());
                    }
                    let r = self.element_region(e);
                    let np = n_par[r];
                    let nodes = self.element_nodes(e);
                    let nn = nodes.len();
                    let tab = &self.tables[self.elem_table[e] as usize];
                    let mut which: Vec<usize> = (0..9).collect();
                    if want.material {
                        which.extend(9..10 + np);
                    }
                    if thermal {
                        which.extend(10 + np..13 + np);
                    }
                    let mut out = vec![0.0; 3 * nn + np + 3 + nn];
                    let mut g = [[0.0; 3]; MAX_NODES];
                    for q in 0..tab.n_points() {
                        let (inputs, dx, w) =
                            self.point_inputs(e, q, u, load, dir, &scaled[r], &mut g)?;
                        let Gmu = field_gradient(mu, nodes, &g);
                        let t = inputs.third_derivative(&Gmu, &dx, &which);
                        for b in 0..nn {
                            for i in 0..3 {
                                out[3 * b + i] +=
                                    w * dot3([t[3 * i], t[3 * i + 1], t[3 * i + 2]], g[b]);
                            }
                        }
                        let rest = &mut out[3 * nn..];
                        for k in 0..np + 3 {
                            rest[k] += w * t[9 + k];
                        }
                        let shape = tab.shape(q);
                        for a in 0..nn {
                            rest[np + 3 + a] += w * t[12 + np] * shape[a];
                        }
                    }
                    Ok(out)
                })
                .collect()
        };
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
            coords: None,
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
        }
        Ok(FiniteSecondOrder { displacement, parameters: params })
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
            if matches!(bc.kind, BcKind::Traction { .. }) {
                d.traction[b] = [0.05, 0.02, -0.04];
            }
        }
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
            if let BcKind::Traction { traction } = bc.kind {
                let t = [0, 1, 2].map(|i| traction[i] + h * d.traction[b][i]);
                m2.set_boundary_kind(b, BcKind::Traction { traction: t });
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
        let inputs = PointInputs { law: &law, scaled: &scaled, load: 0.7, thermal, x };
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
        let fast = inputs.stress_derivative(&dx);
        let passes = inputs.stress_derivative_by_passes(&dx);
        let scale = passes.iter().flatten().fold(0.0_f64, |m, v| m.max(v.abs()));
        for (f, p) in fast.iter().flatten().zip(passes.iter().flatten()) {
            assert!((f - p).abs() <= 1e-11 * scale, "dP: {f} vs {p} (scale {scale})");
        }
    }

    #[test]
    fn residual_jvp_is_the_derivative_of_the_residual() {
        for cell in [CellType::Tet4, CellType::Hex8] {
            let (m, u, s) = model(cell);
            let d = direction(&m, 0.0);
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

    #[test]
    fn second_order_vjp_is_the_derivative_of_the_first_order_products() {
        for cell in [CellType::Tet4, CellType::Hex8] {
            let (m, u, s) = model(cell);
            let d = direction(&m, 0.0);
            let mu: Vec<f64> = (0..u.len()).map(|i| ((i as f64) * 1.3).cos()).collect();
            let so = m.second_order_vjp(&u, s, &mu, &d, FiniteVjpRequest::ALL).expect("vjp");
            let h = 1e-5;
            let at = |h: f64| {
                let u2: Vec<f64> = u.iter().zip(&d.displacement).map(|(a, b)| a + h * b).collect();
                let m2 = moved(&m, &d, h);
                let ku = m2.tangent_transpose_product(&u2, s, &mu).expect("Kᵀμ");
                let want = FiniteVjpRequest { coords: false, ..FiniteVjpRequest::ALL };
                (ku, m2.parameter_vjp(&u2, s, &mu, want).expect("vjp"))
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
        }
    }
}
