//! Second-order products of the electrical residual and of the Joule heat, for tangent-linear
//! solves and Hessian-vector products by the second-order adjoint.
//!
//! On volume element e the residual r(φₑ, Tₑ, σ₀ₑ, α_R) and the Joule heat at its points
//! Q(φₑ, Tₑ, σ₀ₑ, α_R) depend on the element's nodal potentials and temperatures and on its
//! conductor's σ₀ and α_R. Along a direction δv of those variables:
//!
//! - [`ElectricalModel::residual_jvp`] and [`ElectricalModel::joule_jvp`] give dr/dε and dQ/dε
//!   (the right-hand side of a tangent-linear solve, and the tangent of the Joule heat handed
//!   to the thermal field);
//! - [`ElectricalModel::second_order_vjp`] gives d/dε of every vector-Jacobian product of the
//!   residual with a fixed λ (∂/∂v of λᵀ dr/dε), and
//!   [`ElectricalModel::joule_second_order_vjp`] the same for the Joule heat with a fixed seed
//!   Q̄ per point.
//!
//! The products are closed forms on the volume elements: with δσ = ∇σ·(δσ₀, δT, δα_R) at a
//! point, σ's first and second derivatives from the resistivity law's own
//! (`ResistivityLaw::multiplier_second_derivatives`), every law is differentiated exactly. The
//! tests hold them to dual numbers over the generic element kernels
//! ([`ElectricalModel::element_residual_generic`] and the Joule heat's: `Dual64` for the
//! tangents, `HyperDual64`, one pass per element variable, for the second-order products) and
//! to central differences of the first-order products.
//!
//! Node coordinates: a direction that moves the nodes (δX, with G = ∇δX at a point) stays in
//! closed form: the shape gradients change by −Gᵀ∇N and the volume by det J tr G, so ∇a·∇b
//! changes by −aᵀ(G + Gᵀ)b. The coordinates' own part ((∂·/∂X)ᵀλ differentiated along the
//! direction, per node or along a morph field D) is the mixed derivative along D and δ, in
//! closed form as well (G_D changes by −G_D G_δ). The dual-number path over the generic kernels
//! (the element's 3·nn coordinates as variables beside its potentials, temperatures, σ₀ and
//! α_R; the generic Jacobian makes ∇N and det J exact functions of X) is the reference the
//! tests hold all of these to.

use gradfem_kernel::{
    CoordinatePart, CoordinateRequest, element_motion, for_each_element_ordered, motion_gradient,
    symmetric_times,
};
use num_dual::{Dual64, DualNum};
use rayon::prelude::*;

use crate::model::{ElectricalModel, MAX_NODES as MAX};

/// σ at a point with its derivatives in (σ₀, T, α_R) (see `point_conductivity`).
#[derive(Clone, Copy, Debug, Default)]
struct PointSigma {
    sigma: f64,
    /// ∂σ/∂(σ₀, T, α_R).
    grad: [f64; 3],
    /// δσ along the direction.
    delta: f64,
    /// ∂δσ/∂(σ₀, T, α_R).
    delta_grad: [f64; 3],
}

fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// A direction in the electrical model's variables.
#[derive(Clone, Debug, PartialEq)]
pub struct ElectricalDirection {
    /// δφ at every node (the nodes of voltage terminals included: a terminal voltage that
    /// changes moves them).
    pub phi: Vec<f64>,
    /// δT at every node (zero without a temperature field).
    pub temperature: Vec<f64>,
    /// δσ₀ per volume element.
    pub sigma_elem: Vec<f64>,
    /// δα_R per conductor (read for conductors with the linear law only).
    pub alpha_r: Vec<f64>,
    /// δX at every node (empty: the nodes hold still).
    pub coords: Vec<[f64; 3]>,
}

impl ElectricalDirection {
    /// The zero direction of `model`.
    pub fn zeros(model: &ElectricalModel) -> Self {
        ElectricalDirection {
            phi: vec![0.0; model.n_nodes()],
            temperature: vec![0.0; model.n_nodes()],
            sigma_elem: vec![0.0; model.n_volume_elements()],
            alpha_r: vec![0.0; model.conductors.len()],
            coords: Vec::new(),
        }
    }
}

/// d/dε of the vector-Jacobian products of the residual (or of the Joule heat) with a fixed
/// seed: per node for φ and T, per volume element for σ₀, per conductor for α_R.
#[derive(Clone, Debug, PartialEq)]
pub struct ElectricalSecondOrder {
    /// d/dε (∂·/∂φ)ᵀ λ at every node.
    pub phi: Vec<f64>,
    /// d/dε (∂·/∂T)ᵀ λ at every node (zero without a temperature field).
    pub temperature: Vec<f64>,
    /// d/dε λᵀ ∂·/∂σ₀ per volume element.
    pub sigma_elem: Vec<f64>,
    /// d/dε λᵀ ∂·/∂α_R per conductor.
    pub alpha_r: Vec<f64>,
    /// d/dε (∂·/∂X)ᵀ λ as requested.
    pub coords: CoordinatePart,
}

/// What an element's scalar is made of: the residual weighted by λ at its nodes, or the Joule
/// heat weighted by Q̄ at its points.
#[derive(Clone, Copy)]
enum Weighted<'a> {
    Residual(&'a [f64]),
    Joule(&'a [f64]),
}

#[cfg(test)]
impl Weighted<'_> {
    fn is_joule(&self) -> bool {
        matches!(self, Weighted::Joule(_))
    }
}

impl ElectricalModel {
    fn n_points(&self, e: usize) -> usize {
        self.qp_offsets()[e + 1] - self.qp_offsets()[e]
    }

    /// d/dε of the residual's vector-Jacobian products with `lambda` (every node; the current
    /// terminals' nodes carry their unknown's value) held fixed, along `dir`.
    /// The coordinates' part d/dε (∂r/∂X)ᵀλ as `coords` requests.
    pub fn second_order_vjp(
        &self,
        phi: &[f64],
        t: Option<&[f64]>,
        lambda: &[f64],
        dir: &ElectricalDirection,
        coords: CoordinateRequest,
    ) -> ElectricalSecondOrder {
        self.products(phi, t, Weighted::Residual(lambda), dir, coords)
    }

    /// d/dε of the Joule heat's vector-Jacobian products with the seed `q_bar` (one value per
    /// point) held fixed, along `dir`.
    /// The coordinates' part as `coords` requests.
    pub fn joule_second_order_vjp(
        &self,
        phi: &[f64],
        t: Option<&[f64]>,
        q_bar: &[f64],
        dir: &ElectricalDirection,
        coords: CoordinateRequest,
    ) -> ElectricalSecondOrder {
        self.products(phi, t, Weighted::Joule(q_bar), dir, coords)
    }

    /// The closed forms, and the coordinates' part by dual numbers when `coords` asks for it.
    fn products(
        &self,
        phi: &[f64],
        t: Option<&[f64]>,
        weights: Weighted,
        dir: &ElectricalDirection,
        coords: CoordinateRequest,
    ) -> ElectricalSecondOrder {
        let mut res = self.closed_form_products(phi, t, weights, dir);
        if !coords.is_none() {
            res.coords = self.coordinate_products(phi, t, weights, dir, coords);
        }
        res
    }

    /// The coordinates' part in closed form: for each pick D of `coords` (a node coordinate,
    /// or a morph field on an element's nodes) the mixed derivative of L along D (X alone)
    /// and along the direction δ. With G_D, G_δ the motions' gradients at a point: along D the
    /// residual's L = ∫ σ ∇λ·∇φ changes by w (tr G_D σ S + σ S_D), S = ∇λ·∇φ,
    /// S_D = −∇λᵀ(G_D + G_Dᵀ)∇φ, and the Joule heat's Q̄ σ|∇φ|² by −Q̄ σ ∇φᵀ(G_D + G_Dᵀ)∇φ;
    /// along δ, w changes by w tr G_δ, G_D by −G_D G_δ, ∇λ by −G_δᵀ∇λ, ∇φ by ∇δφ − G_δᵀ∇φ
    /// and σ by δσ.
    fn coordinate_products(
        &self,
        phi: &[f64],
        t: Option<&[f64]>,
        weights: Weighted,
        dir: &ElectricalDirection,
        coords: CoordinateRequest,
    ) -> CoordinatePart {
        let compute = |e: usize| {
            let nodes = self.element_nodes(e);
            let nn = nodes.len();
            let mut picks = vec![0.0; coords.n_picks(nodes)];
            let lam: Option<Vec<f64>> = match weights {
                Weighted::Residual(l) => {
                    let v: Vec<f64> = nodes.iter().map(|&n| l[n]).collect();
                    if v.iter().all(|&x| x == 0.0) {
                        return picks;
                    }
                    Some(v)
                }
                Weighted::Joule(_) => None,
            };
            let moving = coords.moving_picks(nodes);
            if moving.is_empty() {
                return picks;
            }
            let o = self.qp_offsets()[e];
            let dx = element_motion(nodes, &dir.coords);
            self.for_direction_points(e, phi, t, dir, |q, _, g, s, ps, gd| {
                let (sigma, d_sigma) = (ps.sigma, ps.delta);
                let gp = s.grad_phi;
                let g_delta = dx.as_ref().map_or([[0.0; 3]; 3], |dx| motion_gradient(g, &dx[..nn]));
                let tr_delta = gradfem_kernel::trace(&g_delta);
                let gdt = |v: &[f64; 3]| -> [f64; 3] {
                    std::array::from_fn(|j| (0..3).map(|i| g_delta[i][j] * v[i]).sum())
                };
                let d_gp: [f64; 3] = {
                    let x = gdt(&gp);
                    std::array::from_fn(|i| gd[i] - x[i])
                };
                // The pairing's left vector (∇λ, or ∇φ for the Joule heat) and its change.
                let (wq, left, d_left, volume) = match (&lam, weights) {
                    (Some(l), _) => {
                        let mut gl = [0.0; 3];
                        for a in 0..nn {
                            for k in 0..3 {
                                gl[k] += g[a][k] * l[a];
                            }
                        }
                        (s.w, gl, gdt(&gl).map(|v| -v), true)
                    }
                    (None, Weighted::Joule(qb)) => (qb[o + q], gp, d_gp, false),
                    (None, Weighted::Residual(_)) => unreachable!("λ gathered above"),
                };
                if wq == 0.0 {
                    return;
                }
                let pair = dot(left, gp);
                let d_pair = dot(d_left, gp) + dot(left, d_gp);
                for (k, d) in &moving {
                    let g_d = motion_gradient(g, d);
                    let m_gp = symmetric_times(&g_d, &gp);
                    let s_d = -dot(left, m_gp);
                    let gdg = gradfem_kernel::mat_mul(&g_d, &g_delta);
                    let d_s_d = -dot(d_left, m_gp) + dot(left, symmetric_times(&gdg, &gp))
                        - dot(left, symmetric_times(&g_d, &d_gp));
                    picks[*k] += wq
                        * if volume {
                            let tr_d = gradfem_kernel::trace(&g_d);
                            let tr_gdg = gradfem_kernel::trace(&gdg);
                            tr_delta * (tr_d * sigma * pair + sigma * s_d) - tr_gdg * sigma * pair
                                + tr_d * (d_sigma * pair + sigma * d_pair)
                                + d_sigma * s_d
                                + sigma * d_s_d
                        } else {
                            d_sigma * s_d + sigma * d_s_d
                        };
                }
            });
            picks
        };
        let mut part = CoordinatePart::zeros(coords, self.n_nodes());
        for_each_element_ordered(self.n_volume_elements(), compute, |e, picks| {
            part.add_element(self.element_nodes(e), picks);
        });
        part
    }

    /// Loop over the points of volume element `e` with σ's derivatives along `dir` there
    /// (see [`point_conductivity`](Self::point_conductivity)) and ∇δφ.
    fn for_direction_points(
        &self,
        e: usize,
        phi: &[f64],
        t: Option<&[f64]>,
        dir: &ElectricalDirection,
        mut f: impl FnMut(usize, &[f64], &[[f64; 3]], &crate::model::PointState, &PointSigma, [f64; 3]),
    ) {
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let c = self.element_conductor(e);
        let d_alpha = if self.conductors[c].law.alpha_r().is_some() { dir.alpha_r[c] } else { 0.0 };
        self.for_points(e, phi, t, |q, n, g, s| {
            let (tq, dtq) = match t {
                Some(t) => (
                    (0..nn).map(|a| n[a] * t[nodes[a]]).sum(),
                    (0..nn).map(|a| n[a] * dir.temperature[nodes[a]]).sum(),
                ),
                None => (self.conductors[c].t_ref, 0.0),
            };
            let ps = self.point_conductivity(e, tq, t.is_some(), [dir.sigma_elem[e], dtq, d_alpha]);
            let mut gd = [0.0; 3];
            for a in 0..nn {
                for k in 0..3 {
                    gd[k] += g[a][k] * dir.phi[nodes[a]];
                }
            }
            f(q, n, g, s, &ps, gd);
        });
    }

    /// σ = σ₀/m(T, α_R) at a point of element `e` with its derivatives in (σ₀, T, α_R): the
    /// gradient, the directional derivative δσ along `d3` and that derivative's gradient,
    /// from the law's own second derivatives of m
    /// ([`ResistivityLaw::multiplier_second_derivatives`](crate::law::ResistivityLaw::multiplier_second_derivatives)).
    fn point_conductivity(&self, e: usize, tq: f64, with_t: bool, d3: [f64; 3]) -> PointSigma {
        let cond = &self.conductors[self.element_conductor(e)];
        let s0 = self.sigma_elem[e];
        let [m, m_t, m_a, m_tt, m_ta, m_aa] =
            cond.law.multiplier_second_derivatives(cond.t_ref, tq);
        // T is the reference, not a variable, without a temperature field.
        let (m_t, m_tt, m_ta) = if with_t { (m_t, m_tt, m_ta) } else { (0.0, 0.0, 0.0) };
        let (i1, i2, i3) = (1.0 / m, 1.0 / (m * m), 1.0 / (m * m * m));
        let grad = [i1, -s0 * m_t * i2, -s0 * m_a * i2];
        // Hessian of σ in (σ₀, T, α_R).
        let h = [
            [0.0, -m_t * i2, -m_a * i2],
            [
                -m_t * i2,
                s0 * (2.0 * m_t * m_t * i3 - m_tt * i2),
                s0 * (2.0 * m_t * m_a * i3 - m_ta * i2),
            ],
            [
                -m_a * i2,
                s0 * (2.0 * m_t * m_a * i3 - m_ta * i2),
                s0 * (2.0 * m_a * m_a * i3 - m_aa * i2),
            ],
        ];
        PointSigma {
            sigma: s0 * i1,
            grad,
            delta: dot(grad, d3),
            delta_grad: std::array::from_fn(|k| dot(h[k], d3)),
        }
    }

    /// The closed forms of the second-order products on the volume elements. With
    /// δσ = ∇σ·(δσ₀, δT, δα) at a point and ∇δφ, ∇λ, ∇φ there, for the residual
    /// (L = ∫ σ ∇λ·∇φ): ∂dL/∂φ_b = ∫ δσ ∇λ·∇N_b, ∂dL/∂T_b = ∫ (∂δσ/∂T ∇λ·∇φ + σ_T ∇λ·∇δφ) N_b,
    /// and ∂dL/∂s = ∫ ∂δσ/∂s ∇λ·∇φ + σ_s ∇λ·∇δφ for s = σ₀, α_R; for the Joule heat
    /// (L = Σ_q Q̄_q σ|∇φ|²) the same with 2∇φ in place of ∇λ and the φ terms
    /// 2 Q̄ (δσ ∇φ + σ ∇δφ)·∇N_b. Moving nodes add tr G σ ∇λ·∇φ (the residual's volume) and
    /// −σ ∇λᵀ(G + Gᵀ)∇φ (the Joule heat: −σ ∇φᵀ(G + Gᵀ)∇φ, no volume) to dL.
    fn closed_form_products(
        &self,
        phi: &[f64],
        t: Option<&[f64]>,
        weights: Weighted,
        dir: &ElectricalDirection,
    ) -> ElectricalSecondOrder {
        let with_t = t.is_some();
        let mut res = ElectricalSecondOrder {
            phi: vec![0.0; self.n_nodes()],
            temperature: vec![0.0; self.n_nodes()],
            sigma_elem: vec![0.0; self.n_volume_elements()],
            alpha_r: vec![0.0; self.conductors.len()],
            coords: CoordinatePart::None,
        };
        let compute = |e: usize| {
            let mut out = [0.0; 2 * MAX + 2];
            let nodes = self.element_nodes(e);
            let nn = nodes.len();
            let lam: Option<Vec<f64>> = match weights {
                Weighted::Residual(l) => {
                    let v: Vec<f64> = nodes.iter().map(|&n| l[n]).collect();
                    if v.iter().all(|&x| x == 0.0) {
                        return out;
                    }
                    Some(v)
                }
                Weighted::Joule(_) => None,
            };
            let o = self.qp_offsets()[e];
            let (mut d_sigma0, mut d_alpha_r) = (0.0, 0.0);
            let dx = element_motion(nodes, &dir.coords);
            self.for_direction_points(e, phi, t, dir, |q, n, g, s, ps, gd| {
                let gp = s.grad_phi;
                // (weight, the vector paired with ∇N_b in the φ rows, the scalar the
                // conductivity multiplies, its derivative along the direction)
                let motion = dx.as_ref().map(|dx| motion_gradient(g, &dx[..nn]));
                let tr = motion.map_or(0.0, |m| gradfem_kernel::trace(&m));
                let (wq, row, base, dbase) = match (&lam, weights) {
                    (Some(l), _) => {
                        let mut gl = [0.0; 3];
                        for a in 0..nn {
                            for k in 0..3 {
                                gl[k] += g[a][k] * l[a];
                            }
                        }
                        let base = dot(gl, gp);
                        let mgl = motion.map_or([0.0; 3], |m| symmetric_times(&m, &gl));
                        let row: [f64; 3] = std::array::from_fn(|k| {
                            ps.delta * gl[k] + ps.sigma * (tr * gl[k] - mgl[k])
                        });
                        (s.w, row, base, dot(gl, gd) + tr * base - dot(mgl, gp))
                    }
                    (None, Weighted::Joule(qb)) => {
                        let mgp = motion.map_or([0.0; 3], |m| symmetric_times(&m, &gp));
                        let row: [f64; 3] = std::array::from_fn(|k| {
                            2.0 * (ps.delta * gp[k] + ps.sigma * (gd[k] - mgp[k]))
                        });
                        (qb[o + q], row, dot(gp, gp), 2.0 * dot(gp, gd) - dot(mgp, gp))
                    }
                    (None, Weighted::Residual(_)) => unreachable!("λ gathered above"),
                };
                if wq == 0.0 {
                    return;
                }
                for b in 0..nn {
                    out[b] += wq * dot(row, g[b]);
                    if with_t {
                        out[MAX + b] += wq * (ps.delta_grad[1] * base + ps.grad[1] * dbase) * n[b];
                    }
                }
                d_sigma0 += wq * (ps.delta_grad[0] * base + ps.grad[0] * dbase);
                d_alpha_r += wq * (ps.delta_grad[2] * base + ps.grad[2] * dbase);
            });
            out[2 * MAX] = d_sigma0;
            out[2 * MAX + 1] = d_alpha_r;
            out
        };
        for_each_element_ordered(self.n_volume_elements(), compute, |e, local| {
            for (a, &n) in self.element_nodes(e).iter().enumerate() {
                res.phi[n] += local[a];
                res.temperature[n] += local[MAX + a];
            }
            res.sigma_elem[e] += local[2 * MAX];
            res.alpha_r[self.element_conductor(e)] += local[2 * MAX + 1];
        });
        res
    }

    /// dr/dε at every node: the residual's directional derivative
    /// dr_a = ∫ δσ ∇N_a·∇φ + σ ∇N_a·∇δφ (rows of the terminals' nodes included; the caller
    /// keeps the rows it solves for). Volume elements only: a current terminal's −I row is the
    /// caller's.
    pub fn residual_jvp(
        &self,
        phi: &[f64],
        t: Option<&[f64]>,
        dir: &ElectricalDirection,
    ) -> Vec<f64> {
        let mut total = vec![0.0; self.n_nodes()];
        let compute = |e: usize| {
            let mut out = [0.0; MAX];
            let dx = element_motion(self.element_nodes(e), &dir.coords);
            self.point_tangents(e, phi, t, dir, |_, _, g, s, delta, gd| {
                let gp = s.grad_phi;
                // Moving nodes: σ (tr G ∇φ − (G + Gᵀ)∇φ), the volume's and the gradients' change.
                let moving = match &dx {
                    Some(dx) => {
                        let m = motion_gradient(g, &dx[..g.len()]);
                        let (tr, mgp) = (gradfem_kernel::trace(&m), symmetric_times(&m, &gp));
                        std::array::from_fn(|k| s.sigma * (tr * gp[k] - mgp[k]))
                    }
                    None => [0.0; 3],
                };
                let j: [f64; 3] =
                    std::array::from_fn(|k| delta * gp[k] + s.sigma * gd[k] + moving[k]);
                for (o, gb) in out.iter_mut().zip(g) {
                    *o += s.w * dot(j, *gb);
                }
            });
            out
        };
        for_each_element_ordered(self.n_volume_elements(), compute, |e, l| {
            for (a, &n) in self.element_nodes(e).iter().enumerate() {
                total[n] += l[a];
            }
        });
        total
    }

    /// dQ/dε = δσ|∇φ|² + 2σ∇φ·∇δφ at every quadrature point (the layout of
    /// [`joule_heat_qp`](Self::joule_heat_qp)).
    pub fn joule_jvp(&self, phi: &[f64], t: Option<&[f64]>, dir: &ElectricalDirection) -> Vec<f64> {
        let per_element: Vec<Vec<f64>> = (0..self.n_volume_elements())
            .into_par_iter()
            .map(|e| {
                let mut out = vec![0.0; self.n_points(e)];
                let dx = element_motion(self.element_nodes(e), &dir.coords);
                self.point_tangents(e, phi, t, dir, |q, _, g, s, delta, gd| {
                    let gp = s.grad_phi;
                    // Moving nodes: −σ ∇φᵀ(G + Gᵀ)∇φ.
                    let moving = dx.as_ref().map_or(0.0, |dx| {
                        let m = motion_gradient(g, &dx[..g.len()]);
                        -s.sigma * dot(symmetric_times(&m, &gp), gp)
                    });
                    out[q] = delta * dot(gp, gp) + 2.0 * s.sigma * dot(gp, gd) + moving;
                });
                out
            })
            .collect();
        per_element.concat()
    }

    /// Loop over the points of volume element `e` with δσ and ∇δφ along `dir`.
    fn point_tangents(
        &self,
        e: usize,
        phi: &[f64],
        t: Option<&[f64]>,
        dir: &ElectricalDirection,
        mut f: impl FnMut(usize, &[f64], &[[f64; 3]], &crate::model::PointState, f64, [f64; 3]),
    ) {
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let c = self.element_conductor(e);
        let law = &self.conductors[c].law;
        let d_alpha = if law.alpha_r().is_some() { dir.alpha_r[c] } else { 0.0 };
        let d_sigma0 = dir.sigma_elem[e];
        self.for_points(e, phi, t, |q, n, g, s| {
            let dtq: f64 = if t.is_some() {
                (0..nn).map(|a| n[a] * dir.temperature[nodes[a]]).sum()
            } else {
                0.0
            };
            let delta = s.inv_m * d_sigma0 + s.dsigma_dt * dtq + s.dsigma_da * d_alpha;
            let mut gd = [0.0; 3];
            for a in 0..nn {
                for k in 0..3 {
                    gd[k] += g[a][k] * dir.phi[nodes[a]];
                }
            }
            f(q, n, g, s, delta, gd);
        });
    }
}

/// The element variables (value, direction): nodal φ, nodal T (when present), σ₀, α_R, and
/// the nodal coordinates (when present, three per node).
struct ElementVariables {
    values: Vec<f64>,
    direction: Vec<f64>,
    nn: usize,
    with_t: bool,
    with_x: bool,
}

impl ElementVariables {
    /// Where σ₀ sits; α_R follows, then the coordinates.
    fn sigma_at(&self) -> usize {
        if self.with_t { 2 * self.nn } else { self.nn }
    }
}

/// The dual-number path: dual numbers over the generic element kernels (`Dual64` for the
/// tangents, `HyperDual64`, one pass per element variable, for the second-order products).
/// The reference the closed forms are tested against.
impl ElectricalModel {
    fn element_variables(
        &self,
        e: usize,
        phi: &[f64],
        t: Option<&[f64]>,
        dir: &ElectricalDirection,
        with_x: bool,
    ) -> ElementVariables {
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let c = self.element_conductor(e);
        let law = &self.conductors[c].law;
        let mut values = Vec::with_capacity(5 * nn + 2);
        let mut direction = Vec::with_capacity(5 * nn + 2);
        for &n in nodes {
            values.push(phi[n]);
            direction.push(dir.phi[n]);
        }
        if let Some(t) = t {
            for &n in nodes {
                values.push(t[n]);
                direction.push(dir.temperature[n]);
            }
        }
        values.push(self.sigma_elem[e]);
        direction.push(dir.sigma_elem[e]);
        let alpha = law.alpha_r();
        values.push(alpha.unwrap_or(0.0));
        direction.push(if alpha.is_some() { dir.alpha_r[c] } else { 0.0 });
        if with_x {
            for &n in nodes {
                let dx = dir.coords.get(n).copied().unwrap_or([0.0; 3]);
                values.extend_from_slice(&self.coords[n]);
                direction.extend_from_slice(&dx);
            }
        }
        ElementVariables { values, direction, nn, with_t: t.is_some(), with_x }
    }

    /// The element's residual (nn values) or Joule heat (one per point) at variables `v`.
    fn element_outputs<D: DualNum<Primitive = f64> + Copy>(
        &self,
        e: usize,
        v: &[D],
        ev: &ElementVariables,
        joule: bool,
        out: &mut [D],
    ) {
        let nn = ev.nn;
        let at = ev.sigma_at();
        let x: Vec<[D; 3]> = if ev.with_x {
            (0..nn).map(|a| std::array::from_fn(|i| v[at + 2 + 3 * a + i])).collect()
        } else {
            self.element_nodes(e).iter().map(|&n| self.coords[n].map(D::from)).collect()
        };
        let phi_e = &v[..nn];
        let t_e = ev.with_t.then(|| &v[nn..2 * nn]);
        let (sigma0, alpha_r) = (v[at], v[at + 1]);
        if joule {
            self.joule_heat_generic(e, &x, phi_e, t_e, sigma0, alpha_r, out);
        } else {
            self.element_residual_generic(e, &x, phi_e, t_e, sigma0, alpha_r, out);
        }
    }

    /// The element's outputs in `Dual64` along the direction: their tangents.
    fn element_tangents(
        &self,
        e: usize,
        phi: &[f64],
        t: Option<&[f64]>,
        dir: &ElectricalDirection,
        n_out: usize,
        joule: bool,
    ) -> Vec<f64> {
        let ev = self.element_variables(e, phi, t, dir, !dir.coords.is_empty());
        let v: Vec<Dual64> =
            ev.values.iter().zip(&ev.direction).map(|(&a, &d)| Dual64::new(a, d)).collect();
        let mut r = vec![Dual64::from(0.0); n_out];
        self.element_outputs(e, &v, &ev, joule, &mut r);
        r.iter().map(|r| r.eps).collect()
    }

    /// [`residual_jvp`](Self::residual_jvp) by dual numbers over the generic kernel.
    pub fn residual_jvp_dual(
        &self,
        phi: &[f64],
        t: Option<&[f64]>,
        dir: &ElectricalDirection,
    ) -> Vec<f64> {
        let mut out = vec![0.0; self.n_nodes()];
        let compute =
            |e: usize| self.element_tangents(e, phi, t, dir, self.element_nodes(e).len(), false);
        for_each_element_ordered(self.n_volume_elements(), compute, |e, local| {
            for (&n, v) in self.element_nodes(e).iter().zip(local) {
                out[n] += v;
            }
        });
        out
    }

    /// [`joule_jvp`](Self::joule_jvp) by dual numbers over the generic kernel.
    pub fn joule_jvp_dual(
        &self,
        phi: &[f64],
        t: Option<&[f64]>,
        dir: &ElectricalDirection,
    ) -> Vec<f64> {
        let per_element: Vec<Vec<f64>> = (0..self.n_volume_elements())
            .into_par_iter()
            .map(|e| self.element_tangents(e, phi, t, dir, self.n_points(e), true))
            .collect();
        per_element.concat()
    }

    /// The second-order products by `HyperDual64`, one pass per element variable other than
    /// the coordinates, then one per coordinate pick of
    /// `coords` (the coordinates are variables whenever the nodes move or their part is wanted):
    /// the reference of the closed forms, in the tests.
    #[cfg(test)]
    fn second_order_products(
        &self,
        phi: &[f64],
        t: Option<&[f64]>,
        weights: Weighted,
        dir: &ElectricalDirection,
        coords: CoordinateRequest,
    ) -> ElectricalSecondOrder {
        use gradfem_kernel::seed_pick;
        use num_dual::HyperDual64;
        let with_x = !coords.is_none() || !dir.coords.is_empty();
        let compute = |e: usize| {
            let ev = self.element_variables(e, phi, t, dir, with_x);
            let w: Vec<f64> = match weights {
                Weighted::Residual(l) => self.element_nodes(e).iter().map(|&n| l[n]).collect(),
                Weighted::Joule(q) => {
                    let o = self.qp_offsets()[e];
                    q[o..o + self.n_points(e)].to_vec()
                }
            };
            let m = ev.values.len();
            let nodes = self.element_nodes(e);
            // The variables picked one at a time (the coordinates are picked by `coords`).
            let m_base = if ev.with_x { m - 3 * ev.nn } else { m };
            let mut out = vec![0.0; m_base + coords.n_picks(nodes)];
            if w.iter().all(|&v| v == 0.0) {
                return (ev, out);
            }
            let mut buf = vec![HyperDual64::from(0.0); w.len()];
            let mut v: Vec<HyperDual64> =
                (0..m).map(|j| HyperDual64::new(ev.values[j], ev.direction[j], 0.0, 0.0)).collect();
            for (i, o) in out.iter_mut().enumerate() {
                if !seed_pick(&mut v, i, m_base, coords, nodes) {
                    continue;
                }
                self.element_outputs(e, &v, &ev, weights.is_joule(), &mut buf);
                *o = w.iter().zip(&buf).map(|(w, r)| w * r.eps1eps2).sum();
            }
            (ev, out)
        };
        let mut res = ElectricalSecondOrder {
            phi: vec![0.0; self.n_nodes()],
            temperature: vec![0.0; self.n_nodes()],
            sigma_elem: vec![0.0; self.n_volume_elements()],
            alpha_r: vec![0.0; self.conductors.len()],
            coords: CoordinatePart::zeros(coords, self.n_nodes()),
        };
        // Summed in element order: the result does not depend on the thread count.
        for_each_element_ordered(self.n_volume_elements(), compute, |e, (ev, local)| {
            let nodes = self.element_nodes(e);
            let nn = nodes.len();
            let at = ev.sigma_at();
            for (a, &n) in nodes.iter().enumerate() {
                res.phi[n] += local[a];
                if ev.with_t {
                    res.temperature[n] += local[nn + a];
                }
            }
            res.coords.add_element(nodes, &local[at + 2..]);
            res.sigma_elem[e] += local[at];
            res.alpha_r[self.element_conductor(e)] += local[at + 1];
        });
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::law::ResistivityLaw;
    use crate::model::{ConductorSpec, TerminalKind, TerminalSpec};
    use gradfem_mesh::CellType;
    use gradfem_mesh::generate::{BoxSpec, box_mesh};

    /// A bar with a linear ρ(T), 0.3 V across it, and a non-uniform temperature.
    fn bar() -> (ElectricalModel, Vec<f64>, Vec<f64>) {
        let mesh = box_mesh(&BoxSpec {
            origin: [0.0; 3],
            lengths: [1e-3, 2e-4, 1e-4],
            divisions: [4, 2, 1],
            cell_type: CellType::Tet4,
        });
        let law = ResistivityLaw::Linear { alpha_r: 1.2e-3 };
        let conductor = ConductorSpec::with_resistivity("domain", 2e-5, law, 300.0);
        let terminals = [
            TerminalSpec { group: "xmin".into(), kind: TerminalKind::Voltage { value: 0.3 } },
            TerminalSpec { group: "xmax".into(), kind: TerminalKind::Ground },
        ];
        let model = ElectricalModel::new(&mesh, &[conductor], &terminals).unwrap();
        let phi: Vec<f64> = model.coords.iter().map(|p| 0.3 * (1.0 - p[0] / 1e-3)).collect();
        let t: Vec<f64> =
            model.coords.iter().map(|p| 300.0 + 5e4 * p[0] + 2e5 * p[1] * p[0]).collect();
        (model, phi, t)
    }

    fn direction(model: &ElectricalModel) -> ElectricalDirection {
        let mut d = ElectricalDirection::zeros(model);
        for (n, p) in model.coords.iter().enumerate() {
            d.phi[n] = 0.01 * (p[1] / 2e-4 - 0.3 * (n % 3) as f64);
            d.temperature[n] = 2.0 * (p[0] / 1e-3) + 0.5 * (n % 2) as f64;
        }
        for (e, s) in d.sigma_elem.iter_mut().enumerate() {
            *s = 1e3 * (1.0 + (e % 5) as f64);
        }
        d.alpha_r[0] = 2e-4;
        d
    }

    fn moved(
        model: &ElectricalModel,
        phi: &[f64],
        t: &[f64],
        d: &ElectricalDirection,
        h: f64,
    ) -> (ElectricalModel, Vec<f64>, Vec<f64>) {
        let mut m = model.clone();
        for (s, ds) in m.sigma_elem.iter_mut().zip(&d.sigma_elem) {
            *s += h * ds;
        }
        let a = m.conductors[0].law.alpha_r().unwrap();
        m.set_alpha_r(0, a + h * d.alpha_r[0]);
        let p: Vec<f64> = phi.iter().zip(&d.phi).map(|(a, b)| a + h * b).collect();
        let tt: Vec<f64> = t.iter().zip(&d.temperature).map(|(a, b)| a + h * b).collect();
        (m, p, tt)
    }

    /// The closed forms against the dual-number products, with and without a temperature
    /// field, for the residual and the Joule heat, with the nodes still and moving, and with
    /// the coordinates' part per node and along a field.
    #[test]
    fn closed_forms_match_dual_numbers() {
        let (model, phi, t) = bar();
        let still = direction(&model);
        let mut moving = still.clone();
        moving.coords = model
            .coords
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let f = i as f64;
                [
                    2e-5 * (f * 0.7).sin(),
                    1e-5 * (f * 1.3 + p[0] * 1e3).cos(),
                    1.5e-5 * (f * 0.4).sin(),
                ]
            })
            .collect();
        let fields = vec![moving.coords.clone()];
        let lambda: Vec<f64> = (0..model.n_nodes()).map(|n| ((n as f64) * 0.7).sin()).collect();
        let q_bar: Vec<f64> =
            (0..*model.qp_offsets().last().unwrap()).map(|q| ((q as f64) * 0.3).cos()).collect();
        let close = |what: &str, a: &[f64], b: &[f64]| {
            let scale = b.iter().fold(1e-300f64, |m, v| m.max(v.abs()));
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert!((x - y).abs() <= 1e-11 * scale, "{what}[{i}]: {x} vs {y}");
            }
        };
        // The motion matters: moving the nodes changes the tangents.
        let (a, b) = (model.joule_jvp(&phi, None, &still), model.joule_jvp(&phi, None, &moving));
        assert!(a.iter().zip(&b).any(|(x, y)| (x - y).abs() > 1e-6 * x.abs()));
        let requests =
            [CoordinateRequest::None, CoordinateRequest::Every, CoordinateRequest::Along(&fields)];
        for (d, temp, coords) in [&still, &moving]
            .into_iter()
            .flat_map(|d| [Some(t.as_slice()), None].map(move |temp| (d, temp)))
            .flat_map(|(d, temp)| requests.iter().map(move |&c| (d, temp, c)))
        {
            close(
                "jvp",
                &model.residual_jvp(&phi, temp, d),
                &model.residual_jvp_dual(&phi, temp, d),
            );
            close(
                "joule jvp",
                &model.joule_jvp(&phi, temp, d),
                &model.joule_jvp_dual(&phi, temp, d),
            );
            let dual = |w| model.second_order_products(&phi, temp, w, d, coords);
            let pairs = [
                (
                    model.second_order_vjp(&phi, temp, &lambda, d, coords),
                    dual(Weighted::Residual(&lambda)),
                ),
                (
                    model.joule_second_order_vjp(&phi, temp, &q_bar, d, coords),
                    dual(Weighted::Joule(&q_bar)),
                ),
            ];
            for (a, b) in &pairs {
                close("phi", &a.phi, &b.phi);
                close("temperature", &a.temperature, &b.temperature);
                close("sigma", &a.sigma_elem, &b.sigma_elem);
                close("alpha", &a.alpha_r, &b.alpha_r);
                match (&a.coords, &b.coords) {
                    (CoordinatePart::None, CoordinatePart::None) => {}
                    (CoordinatePart::Every(x), CoordinatePart::Every(y)) => {
                        let flat = |v: &[[f64; 3]]| v.iter().flatten().copied().collect::<Vec<_>>();
                        close("coords", &flat(x), &flat(y));
                    }
                    (CoordinatePart::Along(x), CoordinatePart::Along(y)) => close("along", x, y),
                    _ => panic!("the same kind of coordinate part"),
                }
            }
        }
    }

    #[test]
    fn directional_derivatives_match_central_differences() {
        let (model, phi, t) = bar();
        let d = direction(&model);
        let jvp = model.residual_jvp(&phi, Some(&t), &d);
        let qjvp = model.joule_jvp(&phi, Some(&t), &d);
        let h = 1e-6;
        let (mp, pp, tp) = moved(&model, &phi, &t, &d, h);
        let (mm, pm, tm) = moved(&model, &phi, &t, &d, -h);
        let rp = mp.interior_residual(&pp, Some(&tp));
        let rm = mm.interior_residual(&pm, Some(&tm));
        let scale = jvp.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        for (n, v) in jvp.iter().enumerate() {
            let fd = (rp[n] - rm[n]) / (2.0 * h);
            assert!((v - fd).abs() <= 1e-6 * scale, "node {n}: {v} vs {fd}");
        }
        let qp = mp.joule_heat_qp(&pp, Some(&tp));
        let qm = mm.joule_heat_qp(&pm, Some(&tm));
        let scale = qjvp.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        for (q, v) in qjvp.iter().enumerate() {
            let fd = (qp[q] - qm[q]) / (2.0 * h);
            assert!((v - fd).abs() <= 1e-6 * scale, "point {q}: {v} vs {fd}");
        }
    }

    #[test]
    fn second_order_products_are_derivatives_of_the_first_order_ones() {
        let (model, phi, t) = bar();
        let d = direction(&model);
        let lambda: Vec<f64> = model
            .coords
            .iter()
            .enumerate()
            .map(|(n, p)| if model.unknown_of_node()[n].is_some() { p[0] * 1e3 - 0.2 } else { 0.0 })
            .collect();
        let so = model.second_order_vjp(&phi, Some(&t), &lambda, &d, CoordinateRequest::None);
        let want = crate::model::VjpRequest {
            conductivity: true,
            terminals: false,
            temperature: true,
            coords: false,
        };
        let h = 1e-5;
        let (mp, pp, tp) = moved(&model, &phi, &t, &d, h);
        let (mm, pm, tm) = moved(&model, &phi, &t, &d, -h);
        let vp = mp.parameter_vjp(&pp, Some(&tp), &lambda, want);
        let vm = mm.parameter_vjp(&pm, Some(&tm), &lambda, want);
        let kp = mp.tangent_transpose_product(&pp, Some(&tp), &lambda);
        let km = mm.tangent_transpose_product(&pm, Some(&tm), &lambda);
        let check = |what: &str, got: &[f64], plus: &[f64], minus: &[f64]| {
            let fd: Vec<f64> = plus.iter().zip(minus).map(|(a, b)| (a - b) / (2.0 * h)).collect();
            let scale = fd.iter().fold(1e-300f64, |a, v| a.max(v.abs()));
            for (i, (g, f)) in got.iter().zip(&fd).enumerate() {
                assert!((g - f).abs() <= 1e-5 * scale, "{what}[{i}]: {g} vs {f}");
            }
        };
        check("phi", &so.phi, &kp, &km);
        check("temperature", &so.temperature, &vp.temperature, &vm.temperature);
        check("sigma", &so.sigma_elem, &vp.sigma_elem, &vm.sigma_elem);
        check("alpha", &so.alpha_r, &vp.alpha_r, &vm.alpha_r);

        let q_bar: Vec<f64> = (0..model.qp_offsets().last().copied().unwrap())
            .map(|q| 1.0 + (q % 7) as f64 * 0.1)
            .collect();
        let js = model.joule_second_order_vjp(&phi, Some(&t), &q_bar, &d, CoordinateRequest::None);
        let jp = mp.joule_vjp(&pp, Some(&tp), &q_bar, false);
        let jm = mm.joule_vjp(&pm, Some(&tm), &q_bar, false);
        check("joule phi", &js.phi, &jp.phi, &jm.phi);
        check("joule temperature", &js.temperature, &jp.temperature, &jm.temperature);
        check("joule sigma", &js.sigma_elem, &jp.sigma_elem, &jm.sigma_elem);
        check("joule alpha", &js.alpha_r, &jp.alpha_r, &jm.alpha_r);
    }

    /// With a direction that moves the nodes, the residual's and the Joule heat's tangents
    /// and the derivatives of their vector-Jacobian products (potential, temperature, σ₀,
    /// α_R and coordinates) match central differences of the first-order products.
    #[test]
    fn coordinate_directions_match_central_differences() {
        let (model, phi, t) = bar();
        let mut d = direction(&model);
        d.coords = model
            .coords
            .iter()
            .enumerate()
            .map(|(n, p)| {
                let f = n as f64;
                [
                    2e-5 * (0.7 * f).sin(),
                    1e-5 * (1.3 * f + p[0] * 1e3).cos(),
                    5e-6 * (0.4 * f).sin(),
                ]
            })
            .collect();
        let h = 1e-4;
        let at = |s: f64| {
            let (mut m, p, tt) = moved(&model, &phi, &t, &d, s);
            for (x, dx) in m.coords.iter_mut().zip(&d.coords) {
                for i in 0..3 {
                    x[i] += s * dx[i];
                }
            }
            (m, p, tt)
        };
        let (mp, pp, tp) = at(h);
        let (mm, pm, tm) = at(-h);
        let check = |what: &str, got: &[f64], plus: &[f64], minus: &[f64]| {
            let fd: Vec<f64> = plus.iter().zip(minus).map(|(a, b)| (a - b) / (2.0 * h)).collect();
            let scale = fd.iter().fold(1e-300f64, |a, v| a.max(v.abs()));
            for (i, (g, f)) in got.iter().zip(&fd).enumerate() {
                assert!((g - f).abs() <= 1e-6 * scale, "{what}[{i}]: {g} vs {f}");
            }
        };
        let flat = |c: &Option<Vec<[f64; 3]>>| -> Vec<f64> {
            c.as_ref().expect("coordinates").iter().flatten().copied().collect()
        };
        let every = |c: &CoordinatePart| Some(c.every().expect("per node").to_vec());
        check(
            "residual",
            &model.residual_jvp(&phi, Some(&t), &d),
            &mp.interior_residual(&pp, Some(&tp)),
            &mm.interior_residual(&pm, Some(&tm)),
        );
        check(
            "joule",
            &model.joule_jvp(&phi, Some(&t), &d),
            &mp.joule_heat_qp(&pp, Some(&tp)),
            &mm.joule_heat_qp(&pm, Some(&tm)),
        );
        let lambda: Vec<f64> = (0..model.n_nodes()).map(|n| ((n as f64) * 0.7).sin()).collect();
        let want = crate::model::VjpRequest {
            conductivity: true,
            terminals: false,
            temperature: true,
            coords: true,
        };
        let so = model.second_order_vjp(&phi, Some(&t), &lambda, &d, CoordinateRequest::Every);
        let (vp, vm) = (
            mp.parameter_vjp(&pp, Some(&tp), &lambda, want),
            mm.parameter_vjp(&pm, Some(&tm), &lambda, want),
        );
        check(
            "phi",
            &so.phi,
            &mp.tangent_transpose_product(&pp, Some(&tp), &lambda),
            &mm.tangent_transpose_product(&pm, Some(&tm), &lambda),
        );
        check("temperature", &so.temperature, &vp.temperature, &vm.temperature);
        check("sigma", &so.sigma_elem, &vp.sigma_elem, &vm.sigma_elem);
        check("alpha", &so.alpha_r, &vp.alpha_r, &vm.alpha_r);
        check("coords", &flat(&every(&so.coords)), &flat(&vp.coords), &flat(&vm.coords));
        let q_bar: Vec<f64> = (0..model.qp_offsets().last().copied().unwrap())
            .map(|q| 1.0 + (q % 7) as f64 * 0.1)
            .collect();
        let js = model.joule_second_order_vjp(&phi, Some(&t), &q_bar, &d, CoordinateRequest::Every);
        let jp = mp.joule_vjp(&pp, Some(&tp), &q_bar, true);
        let jm = mm.joule_vjp(&pm, Some(&tm), &q_bar, true);
        check("joule phi", &js.phi, &jp.phi, &jm.phi);
        check("joule temperature", &js.temperature, &jp.temperature, &jm.temperature);
        check("joule sigma", &js.sigma_elem, &jp.sigma_elem, &jm.sigma_elem);
        check("joule coords", &flat(&every(&js.coords)), &flat(&jp.coords), &flat(&jm.coords));
        // Along a node field: the per-node part contracted with it.
        let fields = vec![d.coords.clone()];
        let along =
            model.second_order_vjp(&phi, Some(&t), &lambda, &d, CoordinateRequest::Along(&fields));
        let CoordinatePart::Along(along) = along.coords else { panic!("a part along the field") };
        let c: f64 = so
            .coords
            .every()
            .unwrap()
            .iter()
            .zip(&fields[0])
            .map(|(a, b)| a[0] * b[0] + a[1] * b[1] + a[2] * b[2])
            .sum();
        assert!((along[0] - c).abs() <= 1e-12 * c.abs(), "{} vs {c}", along[0]);
    }
}
