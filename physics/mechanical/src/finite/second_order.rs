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
//!   `dR = K δu + ∂R/∂q δq`: per point `dP_iJ = D²φ[E_iJ, δx]`, 9 [`HyperDual64`] passes; body
//!   forces, tractions and pressures enter linearly (the facet residual at the load
//!   direction);
//! - [`FiniteStrainModel::second_order_vjp`], `d/dε ∇_{(u,q)} (μᵀR_full)` with μ held: the
//!   gradient of `D²φ[Gμ, δx]` with respect to every input, one [`HyperHyperDual64`] pass per
//!   input (ε₁ along Gμ, ε₂ along δx, ε₃ the input), mapped to the nodes by
//!   `∂F/∂u_b = e_i ⊗ ∇N_b` and `∂T_q/∂T_b = N_b`. Loads have no second derivatives
//!   (dead loads, linear in their values) and are left out.
//!
//! Node coordinates are not a direction here. Both products are tested against central
//! differences of the first-order products they differentiate.

#![allow(non_snake_case)] // F, P: the names of continuum mechanics.

use num_dual::{DualNum, HyperDual64, HyperHyperDual64};

use super::{
    FiniteParameterVjp, FiniteStrainError, FiniteStrainModel, FiniteVjpRequest, HyperelasticLaw,
    MAX_NODES, dot3, facet_residual_generic, field_gradient,
};
use crate::hyperelastic::{Mat3, StrainEnergy, det};
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

    /// `dP_iJ = D²φ[E_iJ, dx]`, the derivative of the first Piola–Kirchhoff stress along `dx`.
    fn stress_derivative(&self, dx: &[f64]) -> Mat3<f64> {
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

    /// `∂/∂x_k D²φ[a, dx]` for the inputs `k` in `which` (`a` along F only); the others are
    /// left zero.
    fn third_derivative(&self, a: &Mat3<f64>, dx: &[f64], which: &[usize]) -> Vec<f64> {
        let mut xd: Vec<HyperHyperDual64> = self
            .x
            .iter()
            .zip(dx)
            .enumerate()
            .map(|(k, (&v, &d))| {
                let e1 = if k < 9 { a[k / 3][k % 3] } else { 0.0 };
                HyperHyperDual64::new(v, e1, d, 0.0, 0.0, 0.0, 0.0, 0.0)
            })
            .collect();
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
