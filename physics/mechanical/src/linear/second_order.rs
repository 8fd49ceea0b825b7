//! Second-order products of the linear thermo-elastic residual, for tangent-linear solves and
//! Hessian-vector products by the second-order adjoint.
//!
//! On a volume element, with ε(v) = sym ∇v, θ = α (T − T_ref), κ = 2μ + 3λ and an adjoint
//! displacement Λ, the residual weighted by Λ is
//!
//! L = ∫ 2μ ε(u):ε(Λ) + λ tr ε(u) tr ε(Λ) − κ θ tr ε(Λ) − b·Λ dΩ,
//!
//! bilinear in (u, Lamé constants), (θ, κ) and (α, T − T_ref). Along a direction (δu, δT, δE,
//! δν, δα, δT_ref) its derivative dL has the gradient
//!
//! - ∂dL/∂u_b = ∫ 2δμ ε(Λ)∇N_b + δλ tr ε(Λ) ∇N_b,
//! - ∂dL/∂T_b = −∫ (δκ α + κ δα) tr ε(Λ) N_b,
//! - ∂dL/∂s = ∫ 2 ∂δμ/∂s A + 2 μ_s δA + ∂δλ/∂s B + λ_s δB − ∂δκ/∂s θ C − κ_s δθ C for s = E, ν
//!   (A = ε(u):ε(Λ), B = tr ε(u) tr ε(Λ), C = tr ε(Λ), δA and δB with δu),
//! - ∂dL/∂α = −∫ (δκ (T − T_ref) + κ (δT − δT_ref)) C and ∂dL/∂T_ref = ∫ (δκ α + κ δα) C,
//!
//! the Lamé constants' first and second derivatives in (E, ν) by hyper-dual numbers. Loads
//! (body force, traction, pressure) enter linearly with constant coefficients and have no
//! second-order terms. [`LinearElasticModel::residual_jvp`] (the tangent's right-hand side)
//! uses `Dual64` over the generic element residual, facets included;
//! [`LinearElasticModel::second_order_vjp_dual`] is the hyper-dual reference the closed form
//! is tested against.
//!
//! Node coordinates: a direction that moves the nodes (δX, G = ∇δX at a point) keeps the
//! volume elements in closed form: ∇v changes by −(∇v)G, so ε(v) by ε_X(v) = −sym((∇v)G),
//! and the volume by det J tr G; dL gains tr G times L's integrand and
//! 2μ δ_X A + λ δ_X B − κθ δ_X C − that is, ∂dL/∂u_b gains
//! tr G (2μ ε(Λ)∇N_b + λ C ∇N_b) + 2μ (ε_X(Λ)∇N_b − ε(Λ)Gᵀ∇N_b) + λ (C_X ∇N_b − C Gᵀ∇N_b)
//! and every parameter's product the same way, the body force −∫ tr G Λ. The coordinates' own
//! part (per node or along a morph field D) is the mixed derivative along D and the direction,
//! in closed form as well (G_D changes by −G_D G_δ). The facets (whose loads then have
//! second-order terms: tractions through the facet area, pressures through area and normal)
//! take a hyper-dual path over the generic element residual, one pass per element variable
//! and coordinate pick, returned per region and boundary condition; over every element it is
//! the reference the closed forms are tested against. The
//! compliance fᵀu = −Σₑ uₑᵀ rₑ(0, T_ref, loads) is differentiated on the same path
//! ([`LinearElasticModel::compliance_hessian`]).

use gradfem_kernel::{
    CoordinatePart, CoordinateRequest, element_motion, hyper_dual_coordinates, mat_mul,
    motion_gradient, seed_pick, trace,
};
use num_dual::{Dual64, DualNum, HyperDual64};
use rayon::prelude::*;

use crate::linear::{BcKind, ElementParams, LinearElasticModel, MAX_NODES, lame};

/// A direction in the linear elastic model's variables.
#[derive(Clone, Debug, PartialEq)]
pub struct MechanicalDirection {
    /// δu, three per node (constrained components included: a prescribed displacement that
    /// changes moves them).
    pub displacement: Vec<f64>,
    /// δT per node (read when the model has a temperature field).
    pub temperature: Vec<f64>,
    /// δE per volume element.
    pub young_elem: Vec<f64>,
    /// δν per volume element.
    pub poisson_elem: Vec<f64>,
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
    /// δX at every node (empty: the nodes hold still).
    pub coords: Vec<[f64; 3]>,
}

impl MechanicalDirection {
    /// The zero direction of `model`.
    pub fn zeros(model: &LinearElasticModel) -> Self {
        let (nr, nb) = (model.regions.len(), model.boundaries.len());
        MechanicalDirection {
            displacement: vec![0.0; 3 * model.n_nodes()],
            temperature: vec![0.0; model.n_nodes()],
            young_elem: vec![0.0; model.n_volume_elements()],
            poisson_elem: vec![0.0; model.n_volume_elements()],
            alpha: vec![0.0; nr],
            t_ref: vec![0.0; nr],
            body_force: vec![[0.0; 3]; nr],
            traction: vec![[0.0; 3]; nb],
            pressure: vec![0.0; nb],
            coords: Vec::new(),
        }
    }
}

/// d/dε of the residual's vector-Jacobian products with a fixed λ (the loads' parts are zero
/// unless the nodes move or coordinates are wanted: with X held they enter linearly with
/// constant coefficients).
#[derive(Clone, Debug, PartialEq)]
pub struct MechanicalSecondOrder {
    /// d/dε (∂R/∂u)ᵀλ, three per node.
    pub displacement: Vec<f64>,
    /// d/dε (∂R/∂T)ᵀλ per node (zero without a temperature field).
    pub temperature: Vec<f64>,
    /// d/dε λᵀ∂R/∂E per volume element.
    pub young_elem: Vec<f64>,
    /// d/dε λᵀ∂R/∂ν per volume element.
    pub poisson_elem: Vec<f64>,
    /// d/dε λᵀ∂R/∂α per region.
    pub alpha: Vec<f64>,
    /// d/dε λᵀ∂R/∂T_ref per region.
    pub t_ref: Vec<f64>,
    /// d/dε λᵀ∂R/∂b per region.
    pub body_force: Vec<[f64; 3]>,
    /// d/dε λᵀ∂R/∂(traction) per boundary condition.
    pub traction: Vec<[f64; 3]>,
    /// d/dε λᵀ∂R/∂(pressure) per boundary condition.
    pub pressure: Vec<f64>,
    /// d/dε (∂R/∂X)ᵀλ as requested.
    pub coords: CoordinatePart,
}

impl MechanicalSecondOrder {
    /// Add `other`'s products (of the same model; its coordinates' part replaces a `None`).
    fn add(&mut self, other: &MechanicalSecondOrder) {
        let add = |a: &mut [f64], b: &[f64]| a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
        let add3 = |a: &mut [[f64; 3]], b: &[[f64; 3]]| {
            a.iter_mut().zip(b).for_each(|(x, y)| (0..3).for_each(|k| x[k] += y[k]))
        };
        add(&mut self.displacement, &other.displacement);
        add(&mut self.temperature, &other.temperature);
        add(&mut self.young_elem, &other.young_elem);
        add(&mut self.poisson_elem, &other.poisson_elem);
        add(&mut self.alpha, &other.alpha);
        add(&mut self.t_ref, &other.t_ref);
        add3(&mut self.body_force, &other.body_force);
        add3(&mut self.traction, &other.traction);
        add(&mut self.pressure, &other.pressure);
        match &mut self.coords {
            CoordinatePart::None => self.coords = other.coords.clone(),
            mine => mine.add_scaled(&other.coords, 1.0),
        }
    }

    /// The zero products of `model`, the coordinates' part as `coords` requests.
    fn zeros(model: &LinearElasticModel, coords: CoordinateRequest) -> Self {
        let (nr, nb) = (model.regions.len(), model.boundaries.len());
        MechanicalSecondOrder {
            displacement: vec![0.0; 3 * model.n_nodes()],
            temperature: vec![0.0; model.n_nodes()],
            young_elem: vec![0.0; model.n_volume_elements()],
            poisson_elem: vec![0.0; model.n_volume_elements()],
            alpha: vec![0.0; nr],
            t_ref: vec![0.0; nr],
            body_force: vec![[0.0; 3]; nr],
            traction: vec![[0.0; 3]; nb],
            pressure: vec![0.0; nb],
            coords: CoordinatePart::zeros(coords, model.n_nodes()),
        }
    }
}

/// The quantities of one quadrature point that the nodes' motion changes (module docs):
/// G, tr G, ε(Λ) and its change ε_X(Λ), C = tr ε(Λ), C_X, A = ε(u):ε(Λ), B = tr ε(u) C and
/// their changes A_X, B_X.
struct PointMotion {
    motion: [[f64; 3]; 3],
    tr: f64,
    el: [[f64; 3]; 3],
    el_x: [[f64; 3]; 3],
    c: f64,
    c_x: f64,
    a: f64,
    a_x: f64,
    b: f64,
    b_x: f64,
}

impl PointMotion {
    fn new(g: &[[f64; 3]], dx: &[[f64; 3]], le: &[f64], ue: &[f64]) -> Self {
        let nn = g.len();
        let motion = motion_gradient(g, dx);
        let (hl, hu) = (full_grad(g, le, nn), full_grad(g, ue, nn));
        let (el, eu) = (sym_grad(g, le, nn), sym_grad(g, ue, nn));
        let (el_x, eu_x) = (strain_motion(&hl, &motion), strain_motion(&hu, &motion));
        let (c, c_x) = (trace(&el), trace(&el_x));
        PointMotion {
            motion,
            tr: trace(&motion),
            el,
            el_x,
            c,
            c_x,
            a: ddot(&eu, &el),
            a_x: ddot(&eu_x, &el) + ddot(&eu, &el_x),
            b: trace(&eu) * c,
            b_x: trace(&eu_x) * c + trace(&eu) * c_x,
        }
    }

    /// Gᵀ v.
    fn gt_times(&self, v: &[f64; 3]) -> [f64; 3] {
        let m = &self.motion;
        std::array::from_fn(|j| m[0][j] * v[0] + m[1][j] * v[1] + m[2][j] * v[2])
    }
}

/// One quadrature point of a volume element along a direction: the shape functions, their
/// physical gradients, w = weight · det J, and T and δT there (δT zero without a temperature
/// field).
struct ElasticPoint<'a> {
    g: &'a [[f64; 3]],
    n: &'a [f64],
    w: f64,
    tq: f64,
    dtq: f64,
}

/// Lamé's μ and λ with their derivatives in (E, ν) along a direction (δE, δν).
#[derive(Clone, Copy, Debug, Default)]
struct LameDerivatives {
    mu: f64,
    lambda: f64,
    /// ∂(μ, λ)/∂(E, ν): [μ_E, μ_ν], [λ_E, λ_ν].
    d_mu: [f64; 2],
    d_lambda: [f64; 2],
    /// δμ, δλ.
    delta_mu: f64,
    delta_lambda: f64,
    /// ∂δμ/∂(E, ν), ∂δλ/∂(E, ν).
    delta_mu_grad: [f64; 2],
    delta_lambda_grad: [f64; 2],
}

fn lame_derivatives(e: f64, nu: f64, de: f64, dnu: f64) -> LameDerivatives {
    let mut out = LameDerivatives::default();
    for k in 0..2 {
        let unit = |j: usize| if j == k { 1.0 } else { 0.0 };
        let (l, m) =
            lame(HyperDual64::new(e, de, unit(0), 0.0), HyperDual64::new(nu, dnu, unit(1), 0.0));
        out.mu = m.re;
        out.lambda = l.re;
        out.d_mu[k] = m.eps2;
        out.d_lambda[k] = l.eps2;
        out.delta_mu = m.eps1;
        out.delta_lambda = l.eps1;
        out.delta_mu_grad[k] = m.eps1eps2;
        out.delta_lambda_grad[k] = l.eps1eps2;
    }
    out
}

/// ε(v) = sym ∇v of a nodal vector field `v` (three per node).
fn sym_grad(g: &[[f64; 3]], v: &[f64], nodes: usize) -> [[f64; 3]; 3] {
    sym(&full_grad(g, v, nodes))
}

/// The symmetric part of a 3×3 matrix.
fn sym(h: &[[f64; 3]; 3]) -> [[f64; 3]; 3] {
    std::array::from_fn(|i| std::array::from_fn(|j| 0.5 * (h[i][j] + h[j][i])))
}

fn ddot(a: &[[f64; 3]; 3], b: &[[f64; 3]; 3]) -> f64 {
    (0..3).map(|i| (0..3).map(|j| a[i][j] * b[i][j]).sum::<f64>()).sum()
}

/// Per volume element: the local displacement part (3·nn), temperature part (nn), then E, ν,
/// α, T_ref and the body force's three components.
const LOCAL: usize = 4 * MAX_NODES + 7;

/// −sym(H G): the change of ε = sym H with the nodes' motion, for H = ∇v.
fn strain_motion(h: &[[f64; 3]; 3], g: &[[f64; 3]; 3]) -> [[f64; 3]; 3] {
    sym(&mat_mul(h, g)).map(|row| row.map(|v| -v))
}

/// ∇v of a nodal vector field `v` (three per node): Hᵢⱼ = Σ_a v_a,i ∂ⱼN_a.
fn full_grad(g: &[[f64; 3]], v: &[f64], nodes: usize) -> [[f64; 3]; 3] {
    let mut h = [[0.0; 3]; 3];
    for a in 0..nodes {
        for i in 0..3 {
            for j in 0..3 {
                h[i][j] += v[3 * a + i] * g[a][j];
            }
        }
    }
    h
}

fn mat_vec(m: &[[f64; 3]; 3], v: &[f64; 3]) -> [f64; 3] {
    std::array::from_fn(|i| m[i][0] * v[0] + m[i][1] * v[1] + m[i][2] * v[2])
}

impl LinearElasticModel {
    /// The element's values of a nodal vector with `width` components per node.
    fn gather_element(&self, e: usize, nodal: &[f64], width: usize) -> Vec<f64> {
        let mut out = Vec::with_capacity(width * MAX_NODES);
        for &n in self.element_nodes(e) {
            out.extend_from_slice(&nodal[width * n..width * n + width]);
        }
        out
    }

    /// The nodal temperatures of element `e` the residual sees and whether they are a
    /// variable (a temperature field is set).
    fn element_temperature_values(&self, e: usize, t_ref: f64) -> (Vec<f64>, bool) {
        match self.temperature() {
            Some(t) => (self.element_nodes(e).iter().map(|&n| t[n]).collect(), true),
            None => (vec![t_ref; self.element_nodes(e).len()], false),
        }
    }

    /// Element `e`'s parameters lifted to dual numbers along `dir`.
    fn dual_params(&self, e: usize, dir: &MechanicalDirection) -> ElementParams<Dual64> {
        let p = self.element_params(e);
        let mut d = p.lift::<Dual64>();
        if e < self.n_volume_elements() {
            let r = self.element_region(e);
            let (l, m) = lame(
                Dual64::new(self.young_elem[e], dir.young_elem[e]),
                Dual64::new(self.poisson_elem[e], dir.poisson_elem[e]),
            );
            d.lambda = l;
            d.mu = m;
            d.alpha = Dual64::new(p.alpha, dir.alpha[r]);
            d.t_ref = Dual64::new(p.t_ref, dir.t_ref[r]);
            d.body = std::array::from_fn(|k| Dual64::new(p.body[k], dir.body_force[r][k]));
        } else {
            let b = self.elem_tag[e] as usize; // the facet's boundary condition
            d.traction = std::array::from_fn(|k| Dual64::new(p.traction[k], dir.traction[b][k]));
            d.pressure = Dual64::new(p.pressure, dir.pressure[b]);
        }
        d
    }

    /// dR/dε at every dof (three per node, constrained components included) along `dir`:
    /// the right-hand side of a tangent-linear solve, facets' loads included. Volume elements
    /// in closed form, dR_ai = ∫ δσ_ij ∂_j N_a − δb_i N_a with
    /// δσ = 2δμ (ε − θI) + 2μ (ε(δu) − δθ I) + (δλ (tr ε − 3θ) + λ (tr ε(δu) − 3δθ)) I.
    pub fn residual_jvp(&self, u: &[f64], dir: &MechanicalDirection) -> Vec<f64> {
        self.element_jvp(u, dir, false, true)
    }

    /// [`residual_jvp`](Self::residual_jvp) with every element through dual numbers (the
    /// reference of the closed form).
    pub fn residual_jvp_dual(&self, u: &[f64], dir: &MechanicalDirection) -> Vec<f64> {
        self.element_jvp(u, dir, false, false)
    }

    /// `f` at every quadrature point of volume element `e` along `dir` (see
    /// [`ElasticPoint`]).
    fn for_elastic_points(
        &self,
        e: usize,
        dir: &MechanicalDirection,
        mut f: impl FnMut(&ElasticPoint),
    ) {
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let p = self.element_params(e);
        let (te, is_field) = self.element_temperature_values(e, p.t_ref);
        let table = self.element_table(e);
        let x = self.element_coordinates(e);
        let mut g = [[0.0; 3]; MAX_NODES];
        for q in 0..table.n_points() {
            let det = gradfem_mesh::geometry::physical_gradients_into(
                3,
                table.grad(q),
                &x[..nn],
                &mut g[..nn],
            );
            let n = table.shape(q);
            let tq: f64 = (0..nn).map(|a| n[a] * te[a]).sum();
            let dtq: f64 = if is_field {
                (0..nn).map(|a| n[a] * dir.temperature[nodes[a]]).sum()
            } else {
                0.0
            };
            f(&ElasticPoint { g: &g[..nn], n, w: table.weights[q] * det, tq, dtq });
        }
    }

    /// Volume element `e`'s residual tangent along `dir`, into `local` (3·nn).
    fn volume_jvp(&self, e: usize, u: &[f64], dir: &MechanicalDirection, local: &mut [f64]) {
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let r = self.element_region(e);
        let p = self.element_params(e);
        let ue = self.gather_element(e, u, 3);
        let de = self.gather_element(e, &dir.displacement, 3);
        let ld = lame_derivatives(
            self.young_elem[e],
            self.poisson_elem[e],
            dir.young_elem[e],
            dir.poisson_elem[e],
        );
        let (dalpha, dtref, db) = (dir.alpha[r], dir.t_ref[r], dir.body_force[r]);
        self.for_elastic_points(e, dir, |pt| {
            let (g, n, w, tq, dtq) = (pt.g, pt.n, pt.w, pt.tq, pt.dtq);
            let theta = p.alpha * (tq - p.t_ref);
            let d_theta = dalpha * (tq - p.t_ref) + p.alpha * (dtq - dtref);
            let eu = sym_grad(g, &ue, nn);
            let ed = sym_grad(g, &de, nn);
            let iso = ld.delta_lambda * (trace(&eu) - 3.0 * theta)
                + ld.lambda * (trace(&ed) - 3.0 * d_theta)
                - 2.0 * ld.delta_mu * theta
                - 2.0 * ld.mu * d_theta;
            let mut ds = [[0.0; 3]; 3];
            for i in 0..3 {
                for j in 0..3 {
                    ds[i][j] = 2.0 * ld.delta_mu * eu[i][j] + 2.0 * ld.mu * ed[i][j];
                }
                ds[i][i] += iso;
            }
            for a in 0..nn {
                for i in 0..3 {
                    let sg = ds[i][0] * g[a][0] + ds[i][1] * g[a][1] + ds[i][2] * g[a][2];
                    local[3 * a + i] += w * (sg - db[i] * n[a]);
                }
            }
        });
    }

    /// (∂f/∂p) δp: the change of the consistent load vector (body forces, tractions,
    /// pressures; no thermal part) along `dir`, three per node.
    pub fn load_vector_jvp(&self, dir: &MechanicalDirection) -> Vec<f64> {
        let r = self.element_jvp(&vec![0.0; 3 * self.n_nodes()], dir, true, false);
        r.into_iter().map(|v| -v).collect()
    }

    fn element_jvp(
        &self,
        u: &[f64],
        dir: &MechanicalDirection,
        loads_only: bool,
        closed_form: bool,
    ) -> Vec<f64> {
        let mut out = vec![0.0; 3 * self.n_nodes()];
        let closed_form = closed_form && dir.coords.is_empty();
        self.scatter(&mut out, 3, |e, local| {
            if closed_form && e < self.n_volume_elements() {
                self.volume_jvp(e, u, dir, local);
                return;
            }
            let nodes = self.element_nodes(e);
            let nn = nodes.len();
            let c = Dual64::from;
            let x = gradfem_kernel::dual_coordinates(&self.coords, nodes, &dir.coords);
            let mut p = self.dual_params(e, dir);
            let (ue, te): (Vec<Dual64>, Vec<Dual64>) = if loads_only {
                // u = 0 and T = T_ref: the loads alone.
                p.lambda = c(p.lambda.re);
                p.mu = c(p.mu.re);
                p.alpha = c(0.0);
                p.t_ref = c(p.t_ref.re);
                (vec![c(0.0); 3 * nn], vec![p.t_ref; nn])
            } else {
                let (t, is_field) = self.element_temperature_values(e, p.t_ref.re);
                let ue = nodes
                    .iter()
                    .flat_map(|&n| (0..3).map(move |k| (n, k)))
                    .map(|(n, k)| Dual64::new(u[3 * n + k], dir.displacement[3 * n + k]))
                    .collect();
                let te = nodes
                    .iter()
                    .zip(t)
                    .map(|(&n, tv)| {
                        Dual64::new(tv, if is_field { dir.temperature[n] } else { 0.0 })
                    })
                    .collect();
                (ue, te)
            };
            let mut r = vec![c(0.0); 3 * nn];
            self.element_residual_generic(e, &x, &ue, &te, &p, &mut r);
            for (l, ri) in local.iter_mut().zip(&r) {
                *l = ri.eps;
            }
        });
        out
    }

    /// d/dε of the residual's vector-Jacobian products with `lambda` (three per node, zero at
    /// constrained components for an adjoint) held fixed, along `dir`: closed forms on the
    /// volume elements (module docs).
    /// With a coordinate request, or a direction that moves the nodes, the facets' products
    /// (the loads') and the coordinates' part come from the hyper-dual path (module docs), the
    /// volume elements' other products stay in closed form.
    pub fn second_order_vjp(
        &self,
        u: &[f64],
        lambda: &[f64],
        dir: &MechanicalDirection,
        coords: CoordinateRequest,
    ) -> MechanicalSecondOrder {
        let locals: Vec<[f64; LOCAL]> = (0..self.n_volume_elements())
            .into_par_iter()
            .map(|e| self.volume_second_order(e, u, lambda, dir))
            .collect();
        let mut res = self.collect_second_order(&locals);
        if !coords.is_none() {
            let mut part = CoordinatePart::zeros(coords, self.n_nodes());
            let compute = |e| self.volume_coordinate_products(e, u, lambda, dir, coords);
            gradfem_kernel::for_each_element_ordered(self.n_volume_elements(), compute, |e, p| {
                part.add_element(self.element_nodes(e), p)
            });
            res.coords = part;
        }
        if !coords.is_none() || !dir.coords.is_empty() {
            let weighting = Weighting::Residual(lambda);
            let facets = self.moving_second_order_with(u, weighting, dir, coords, true);
            res.add(&facets);
        }
        res
    }

    fn volume_second_order(
        &self,
        e: usize,
        u: &[f64],
        lambda: &[f64],
        dir: &MechanicalDirection,
    ) -> [f64; LOCAL] {
        let mut out = [0.0; LOCAL];
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let le = self.gather_element(e, lambda, 3);
        if le.iter().all(|&v| v == 0.0) {
            return out;
        }
        let ue = self.gather_element(e, u, 3);
        let de = self.gather_element(e, &dir.displacement, 3);
        let r = self.element_region(e);
        let p = self.element_params(e);
        let is_field = self.temperature().is_some();
        let (dalpha, dtref) = (dir.alpha[r], dir.t_ref[r]);
        let ld = lame_derivatives(
            self.young_elem[e],
            self.poisson_elem[e],
            dir.young_elem[e],
            dir.poisson_elem[e],
        );
        let kappa = 2.0 * ld.mu + 3.0 * ld.lambda;
        let d_kappa = 2.0 * ld.delta_mu + 3.0 * ld.delta_lambda;
        let kappa_s: [f64; 2] = std::array::from_fn(|k| 2.0 * ld.d_mu[k] + 3.0 * ld.d_lambda[k]);
        let d_kappa_s: [f64; 2] =
            std::array::from_fn(|k| 2.0 * ld.delta_mu_grad[k] + 3.0 * ld.delta_lambda_grad[k]);
        let dx = element_motion(nodes, &dir.coords);
        self.for_elastic_points(e, dir, |pt| {
            let (g, n, w, tq, dtq) = (pt.g, pt.n, pt.w, pt.tq, pt.dtq);
            if let Some(dx) = &dx {
                let moving = PointMotion::new(g, &dx[..nn], &le, &ue);
                let theta = p.alpha * (tq - p.t_ref);
                self.moving_point_products(
                    &moving, g, n, w, theta, tq, &ld, &p, is_field, &le, &mut out,
                );
            }
            let el = sym_grad(g, &le, nn);
            let eu = sym_grad(g, &ue, nn);
            let ed = sym_grad(g, &de, nn);
            let c = trace(&el);
            let a_ = ddot(&eu, &el);
            let b_ = trace(&eu) * c;
            let da = ddot(&ed, &el);
            let db = trace(&ed) * c;
            let theta = p.alpha * (tq - p.t_ref);
            let d_theta = dalpha * (tq - p.t_ref) + p.alpha * (dtq - dtref);
            for b in 0..nn {
                for i in 0..3 {
                    let eg = el[i][0] * g[b][0] + el[i][1] * g[b][1] + el[i][2] * g[b][2];
                    out[3 * b + i] += w * (2.0 * ld.delta_mu * eg + ld.delta_lambda * c * g[b][i]);
                }
                if is_field {
                    out[3 * MAX_NODES + b] -= w * (d_kappa * p.alpha + kappa * dalpha) * c * n[b];
                }
            }
            for k in 0..2 {
                out[4 * MAX_NODES + k] += w
                    * (2.0 * ld.delta_mu_grad[k] * a_
                        + 2.0 * ld.d_mu[k] * da
                        + ld.delta_lambda_grad[k] * b_
                        + ld.d_lambda[k] * db
                        - d_kappa_s[k] * theta * c
                        - kappa_s[k] * d_theta * c);
            }
            out[4 * MAX_NODES + 2] -= w * (d_kappa * (tq - p.t_ref) + kappa * (dtq - dtref)) * c;
            out[4 * MAX_NODES + 3] += w * (d_kappa * p.alpha + kappa * dalpha) * c;
        });
        out
    }

    /// The coordinates' part of volume element `e`'s second-order products in closed form: for
    /// each pick D of `coords`, the mixed derivative of L along D (X alone) and the direction δ
    /// (module docs). Along D, L changes by w (tr G_D P + Q_D) with P L's integrand and
    /// Q_D = 2μ A_D + λ B_D − κθ C_D (A_D, B_D, C_D from ε_D(v) = −sym(∇v G_D)); along δ,
    /// ∇u changes by ∇δu − ∇u G_δ, ∇Λ by −∇Λ G_δ, G_D by −G_D G_δ and w by w tr G_δ.
    fn volume_coordinate_products(
        &self,
        e: usize,
        u: &[f64],
        lambda: &[f64],
        dir: &MechanicalDirection,
        coords: CoordinateRequest,
    ) -> Vec<f64> {
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let mut picks = vec![0.0; coords.n_picks(nodes)];
        let le = self.gather_element(e, lambda, 3);
        let moving = coords.moving_picks(nodes);
        if moving.is_empty() || le.iter().all(|&v| v == 0.0) {
            return picks;
        }
        let ue = self.gather_element(e, u, 3);
        let de = self.gather_element(e, &dir.displacement, 3);
        let r = self.element_region(e);
        let p = self.element_params(e);
        let ld = lame_derivatives(
            self.young_elem[e],
            self.poisson_elem[e],
            dir.young_elem[e],
            dir.poisson_elem[e],
        );
        let (mu, lam, d_mu, d_lam) = (ld.mu, ld.lambda, ld.delta_mu, ld.delta_lambda);
        let (kappa, d_kappa) = (2.0 * mu + 3.0 * lam, 2.0 * d_mu + 3.0 * d_lam);
        let (d_alpha, d_tref, d_body) = (dir.alpha[r], dir.t_ref[r], dir.body_force[r]);
        let dx = element_motion(nodes, &dir.coords);
        let add = |a: &[[f64; 3]; 3], b: &[[f64; 3]; 3], s: f64| -> [[f64; 3]; 3] {
            std::array::from_fn(|i| std::array::from_fn(|j| a[i][j] + s * b[i][j]))
        };
        self.for_elastic_points(e, dir, |pt| {
            let (g, n, w, tq, dtq) = (pt.g, pt.n, pt.w, pt.tq, pt.dtq);
            let theta = p.alpha * (tq - p.t_ref);
            let d_theta = d_alpha * (tq - p.t_ref) + p.alpha * (dtq - d_tref);
            let lq: [f64; 3] = std::array::from_fn(|i| (0..nn).map(|a| n[a] * le[3 * a + i]).sum());
            let (hl, hu, hd) =
                (full_grad(g, &le, nn), full_grad(g, &ue, nn), full_grad(g, &de, nn));
            let g_delta = dx.as_ref().map_or([[0.0; 3]; 3], |dx| motion_gradient(g, &dx[..nn]));
            let tr_delta = trace(&g_delta);
            let (el, eu, ed) = (sym(&hl), sym(&hu), sym(&hd));
            let c = trace(&el);
            let a_ = ddot(&eu, &el);
            let b_ = trace(&eu) * c;
            let body: f64 = (0..3).map(|i| p.body[i] * lq[i]).sum();
            let integrand = 2.0 * mu * a_ + lam * b_ - kappa * theta * c - body;
            // Along δ: ε(u) by ε(δu) + ε_δ(u), ε(Λ) by ε_δ(Λ).
            let (eu_delta, el_delta) = (strain_motion(&hu, &g_delta), strain_motion(&hl, &g_delta));
            let d_eu = add(&ed, &eu_delta, 1.0);
            let d_c = trace(&el_delta);
            let d_a = ddot(&d_eu, &el) + ddot(&eu, &el_delta);
            let d_b = trace(&d_eu) * c + trace(&eu) * d_c;
            let d_body: f64 = (0..3).map(|i| d_body[i] * lq[i]).sum();
            let d_integrand = 2.0 * d_mu * a_ + 2.0 * mu * d_a + d_lam * b_ + lam * d_b
                - d_kappa * theta * c
                - kappa * d_theta * c
                - kappa * theta * d_c
                - d_body;
            // ∇δu − ∇u G_δ, the change of ∇u along δ.
            let d_hu = add(&hd, &mat_mul(&hu, &g_delta), -1.0);
            for (k, d) in &moving {
                let g_d = motion_gradient(g, d);
                let tr_d = trace(&g_d);
                let (eu_d, el_d) = (strain_motion(&hu, &g_d), strain_motion(&hl, &g_d));
                let c_d = trace(&el_d);
                let a_d = ddot(&eu_d, &el) + ddot(&eu, &el_d);
                let b_d = trace(&eu_d) * c + trace(&eu) * c_d;
                let q_d = 2.0 * mu * a_d + lam * b_d - kappa * theta * c_d;
                // Along δ: G_D by −G_D G_δ, so ε_D(u) by −sym(d∇u G_D − ∇u G_D G_δ) and
                // ε_D(Λ) by sym(∇Λ (G_δ G_D + G_D G_δ)).
                let gdg = mat_mul(&g_d, &g_delta);
                let tr_gdg = trace(&gdg);
                let d_eu_d = {
                    let a = mat_mul(&d_hu, &g_d);
                    let b = mat_mul(&hu, &gdg);
                    sym(&add(&b, &a, -1.0))
                };
                let d_el_d = {
                    let s = add(&mat_mul(&g_delta, &g_d), &gdg, 1.0);
                    sym(&mat_mul(&hl, &s))
                };
                let d_c_d = trace(&d_el_d);
                let d_a_d = ddot(&d_eu_d, &el)
                    + ddot(&eu_d, &el_delta)
                    + ddot(&d_eu, &el_d)
                    + ddot(&eu, &d_el_d);
                let d_b_d = trace(&d_eu_d) * c
                    + trace(&eu_d) * d_c
                    + trace(&d_eu) * c_d
                    + trace(&eu) * d_c_d;
                let d_q_d = 2.0 * d_mu * a_d + 2.0 * mu * d_a_d + d_lam * b_d + lam * d_b_d
                    - d_kappa * theta * c_d
                    - kappa * d_theta * c_d
                    - kappa * theta * d_c_d;
                picks[*k] += w
                    * (tr_delta * (tr_d * integrand + q_d) - tr_gdg * integrand
                        + tr_d * d_integrand
                        + d_q_d);
            }
        });
        picks
    }

    /// One point's products from the nodes' motion alone (module docs), added to `out` (the
    /// layout of [`LOCAL`]): the parts of ∂dL/∂z that δX brings, for z the displacements,
    /// temperatures, E, ν, α, T_ref and the body force.
    #[allow(clippy::too_many_arguments)]
    fn moving_point_products(
        &self,
        m: &PointMotion,
        g: &[[f64; 3]],
        n: &[f64],
        w: f64,
        theta: f64,
        tq: f64,
        ld: &LameDerivatives,
        p: &ElementParams<f64>,
        is_field: bool,
        le: &[f64],
        out: &mut [f64; LOCAL],
    ) {
        let nn = g.len();
        let (mu, lam) = (ld.mu, ld.lambda);
        let kappa = 2.0 * mu + 3.0 * lam;
        let (tr, c, c_x) = (m.tr, m.c, m.c_x);
        for b in 0..nn {
            let hb = m.gt_times(&g[b]);
            let el_g = mat_vec(&m.el, &g[b]);
            let el_h = mat_vec(&m.el, &hb);
            let elx_g = mat_vec(&m.el_x, &g[b]);
            for i in 0..3 {
                out[3 * b + i] += w
                    * (tr * (2.0 * mu * el_g[i] + lam * c * g[b][i])
                        + 2.0 * mu * (elx_g[i] - el_h[i])
                        + lam * (c_x * g[b][i] - c * hb[i]));
            }
            if is_field {
                out[3 * MAX_NODES + b] -= w * kappa * p.alpha * (tr * c + c_x) * n[b];
            }
        }
        for k in 0..2 {
            let kappa_s = 2.0 * ld.d_mu[k] + 3.0 * ld.d_lambda[k];
            out[4 * MAX_NODES + k] += w
                * (tr * (2.0 * ld.d_mu[k] * m.a + ld.d_lambda[k] * m.b - kappa_s * theta * c)
                    + 2.0 * ld.d_mu[k] * m.a_x
                    + ld.d_lambda[k] * m.b_x
                    - kappa_s * theta * c_x);
        }
        out[4 * MAX_NODES + 2] -= w * kappa * (tq - p.t_ref) * (tr * c + c_x);
        out[4 * MAX_NODES + 3] += w * kappa * p.alpha * (tr * c + c_x);
        for i in 0..3 {
            let lq: f64 = (0..nn).map(|a| n[a] * le[3 * a + i]).sum();
            out[4 * MAX_NODES + 4 + i] -= w * tr * lq;
        }
    }

    /// [`second_order_vjp`](Self::second_order_vjp) by hyper-dual numbers over the generic
    /// element residual, one pass per element variable (the reference of the closed form).
    pub fn second_order_vjp_dual(
        &self,
        u: &[f64],
        lambda: &[f64],
        dir: &MechanicalDirection,
    ) -> MechanicalSecondOrder {
        let locals: Vec<[f64; LOCAL]> = (0..self.n_volume_elements())
            .into_par_iter()
            .map(|e| {
                let mut out = [0.0; LOCAL];
                let nodes = self.element_nodes(e);
                let nn = nodes.len();
                let r = self.element_region(e);
                let p = self.element_params(e);
                let (te, is_field) = self.element_temperature_values(e, p.t_ref);
                // Variables: u (3nn), T (nn), E, ν, α, T_ref.
                let mut v: Vec<f64> = self.gather_element(e, u, 3);
                let mut d: Vec<f64> = self.gather_element(e, &dir.displacement, 3);
                v.extend(&te);
                d.extend(nodes.iter().map(|&n| if is_field { dir.temperature[n] } else { 0.0 }));
                v.extend([self.young_elem[e], self.poisson_elem[e], p.alpha, p.t_ref]);
                d.extend([dir.young_elem[e], dir.poisson_elem[e], dir.alpha[r], dir.t_ref[r]]);
                let le = self.gather_element(e, lambda, 3);
                let x: Vec<[HyperDual64; 3]> =
                    nodes.iter().map(|&n| self.coords[n].map(HyperDual64::from)).collect();
                let m = v.len();
                let mut res = vec![HyperDual64::from(0.0); 3 * nn];
                for i in 0..m {
                    let h: Vec<HyperDual64> = (0..m)
                        .map(|j| HyperDual64::new(v[j], d[j], if i == j { 1.0 } else { 0.0 }, 0.0))
                        .collect();
                    let (l, mu) = lame(h[4 * nn], h[4 * nn + 1]);
                    let mut hp = p.lift::<HyperDual64>();
                    hp.lambda = l;
                    hp.mu = mu;
                    hp.alpha = h[4 * nn + 2];
                    hp.t_ref = h[4 * nn + 3];
                    self.element_residual_generic(
                        e,
                        &x,
                        &h[..3 * nn],
                        &h[3 * nn..4 * nn],
                        &hp,
                        &mut res,
                    );
                    let s: f64 = le.iter().zip(&res).map(|(l, r)| l * r.eps1eps2).sum();
                    let slot = if i < 3 * nn {
                        i
                    } else if i < 4 * nn {
                        3 * MAX_NODES + (i - 3 * nn)
                    } else {
                        4 * MAX_NODES + (i - 4 * nn)
                    };
                    out[slot] = s;
                }
                if !is_field {
                    out[3 * MAX_NODES..4 * MAX_NODES].iter_mut().for_each(|o| *o = 0.0);
                }
                out
            })
            .collect();
        self.collect_second_order(&locals)
    }

    fn collect_second_order(&self, locals: &[[f64; LOCAL]]) -> MechanicalSecondOrder {
        let mut res = MechanicalSecondOrder::zeros(self, CoordinateRequest::None);
        for (e, l) in locals.iter().enumerate() {
            for (a, &n) in self.element_nodes(e).iter().enumerate() {
                for i in 0..3 {
                    res.displacement[3 * n + i] += l[3 * a + i];
                }
                res.temperature[n] += l[3 * MAX_NODES + a];
            }
            let r = self.element_region(e);
            res.young_elem[e] += l[4 * MAX_NODES];
            res.poisson_elem[e] += l[4 * MAX_NODES + 1];
            res.alpha[r] += l[4 * MAX_NODES + 2];
            res.t_ref[r] += l[4 * MAX_NODES + 3];
            for k in 0..3 {
                res.body_force[r][k] += l[4 * MAX_NODES + 4 + k];
            }
        }
        res
    }

    /// The von Mises p-norm J = (S/V)^{1/p}, S = ∫_g σ_vm^p over the volume elements `els`,
    /// differentiated twice: along `dir` (δu, δE, δν) the derivative of ∂J/∂u (three per
    /// node) and of ∂J/∂E, ∂J/∂ν (per volume element), with the coordinates held. With
    /// σ_vm² = 6μ² Q, Q = dev ε : dev ε, each point adds φ = w (6μ²Q)^{p/2}, a function of
    /// (μ, Q) whose second derivatives are closed forms; J″ = F′(S) S″ + F″(S) S′S′ᵀ with
    /// F(S) = (S/V)^{1/p}. Points with σ_vm = 0 contribute nothing (p ≥ 2 keeps J smooth there
    /// to first order).
    pub fn von_mises_pnorm_hessian(
        &self,
        els: &[usize],
        p: f64,
        u: &[f64],
        dir: &MechanicalDirection,
    ) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        struct Local {
            s: f64,
            vol: f64,
            /// ∂S_e/∂u (3nn) and its derivative along the direction without the F″ part.
            g_u: Vec<f64>,
            h_u: Vec<f64>,
            /// ∂S_e/∂μ and its derivative along the direction.
            g_mu: f64,
            h_mu: f64,
            /// ∇S_e · direction.
            ds: f64,
        }
        let locals: Vec<Local> = els
            .par_iter()
            .map(|&e| {
                let nodes = self.element_nodes(e);
                let nn = nodes.len();
                let ue = self.gather_element(e, u, 3);
                let de = self.gather_element(e, &dir.displacement, 3);
                let ld = lame_derivatives(
                    self.young_elem[e],
                    self.poisson_elem[e],
                    dir.young_elem[e],
                    dir.poisson_elem[e],
                );
                let (mu, dmu) = (ld.mu, ld.delta_mu);
                let table = self.element_table(e);
                let x = self.element_coordinates(e);
                let mut g = [[0.0; 3]; MAX_NODES];
                let mut l = Local {
                    s: 0.0,
                    vol: 0.0,
                    g_u: vec![0.0; 3 * nn],
                    h_u: vec![0.0; 3 * nn],
                    g_mu: 0.0,
                    h_mu: 0.0,
                    ds: 0.0,
                };
                for q in 0..table.n_points() {
                    let det = gradfem_mesh::geometry::physical_gradients_into(
                        3,
                        table.grad(q),
                        &x[..nn],
                        &mut g[..nn],
                    );
                    let w = table.weights[q] * det;
                    l.vol += w;
                    let dev = |mut m: [[f64; 3]; 3]| {
                        let t = trace(&m) / 3.0;
                        (0..3).for_each(|i| m[i][i] -= t);
                        m
                    };
                    let eu = dev(sym_grad(&g, &ue, nn));
                    let ed = dev(sym_grad(&g, &de, nn));
                    let qv = ddot(&eu, &eu);
                    if qv <= 0.0 {
                        continue;
                    }
                    let phi = w * (6.0 * mu * mu * qv).powf(0.5 * p);
                    let dq = 2.0 * ddot(&eu, &ed);
                    let (f_m, f_q) = (p * phi / mu, 0.5 * p * phi / qv);
                    let f_mm = p * (p - 1.0) * phi / (mu * mu);
                    let f_mq = p * 0.5 * p * phi / (mu * qv);
                    let f_qq = 0.5 * p * (0.5 * p - 1.0) * phi / (qv * qv);
                    l.s += phi;
                    l.g_mu += f_m;
                    l.h_mu += f_mm * dmu + f_mq * dq;
                    l.ds += f_q * dq + f_m * dmu;
                    let c_dir = f_qq * dq + f_mq * dmu;
                    for b in 0..nn {
                        for i in 0..3 {
                            let eg = eu[i][0] * g[b][0] + eu[i][1] * g[b][1] + eu[i][2] * g[b][2];
                            let dg = ed[i][0] * g[b][0] + ed[i][1] * g[b][1] + ed[i][2] * g[b][2];
                            l.g_u[3 * b + i] += f_q * 2.0 * eg;
                            l.h_u[3 * b + i] += c_dir * 2.0 * eg + f_q * 2.0 * dg;
                        }
                    }
                }
                l
            })
            .collect();
        let s: f64 = locals.iter().map(|l| l.s).sum();
        let vol: f64 = locals.iter().map(|l| l.vol).sum();
        let ds: f64 = locals.iter().map(|l| l.ds).sum();
        let n_v = self.n_volume_elements();
        let (mut du, mut d_young, mut d_poisson) =
            (vec![0.0; 3 * self.n_nodes()], vec![0.0; n_v], vec![0.0; n_v]);
        if s <= 0.0 {
            return (du, d_young, d_poisson);
        }
        let j = (s / vol).powf(1.0 / p);
        let f1 = j / (p * s);
        let f2 = f1 * (1.0 / p - 1.0) / s;
        for (l, &e) in locals.iter().zip(els) {
            for (a, &n) in self.element_nodes(e).iter().enumerate() {
                for i in 0..3 {
                    du[3 * n + i] += f1 * l.h_u[3 * a + i] + f2 * ds * l.g_u[3 * a + i];
                }
            }
            let ld = lame_derivatives(
                self.young_elem[e],
                self.poisson_elem[e],
                dir.young_elem[e],
                dir.poisson_elem[e],
            );
            // d/dε (F′ g_μ μ_s) = (F″ δS g_μ + F′ h_μ) μ_s + F′ g_μ ∂δμ/∂s.
            let outer = f2 * ds * l.g_mu + f1 * l.h_mu;
            d_young[e] += outer * ld.d_mu[0] + f1 * l.g_mu * ld.delta_mu_grad[0];
            d_poisson[e] += outer * ld.d_mu[1] + f1 * l.g_mu * ld.delta_mu_grad[1];
        }
        (du, d_young, d_poisson)
    }
}

impl LinearElasticModel {
    /// [`LinearElasticModel::von_mises_pnorm_hessian`] with the nodes moving along `dir.coords`:
    /// also the derivative of ∂J/∂X (as `coords` requests). Per element, S_e = Σ_q w σ_vm^p and
    /// V_e = Σ_q w are evaluated in hyper-dual numbers (ε₁ along (δu, δE, δν, δX), ε₂ one pick
    /// of u_e, E_e, ν_e or the coordinates at a time) through the generic Jacobian; then
    /// J = F(S, V) = (S/V)^{1/p} and
    /// d/dε ∂J/∂z = F_S S_zε + F_V V_zε + (F_SS δS + F_SV δV) S_z + (F_SV δS + F_VV δV) V_z.
    /// Points with σ_vm = 0 contribute nothing, as in the closed form.
    #[allow(clippy::type_complexity)]
    pub fn von_mises_pnorm_hessian_moving(
        &self,
        els: &[usize],
        p: f64,
        u: &[f64],
        dir: &MechanicalDirection,
        coords: CoordinateRequest,
    ) -> (Vec<f64>, Vec<f64>, Vec<f64>, CoordinatePart) {
        /// Per element: S and V with their direction parts; per pick (3·nn displacements, E,
        /// ν, then the coordinate picks) [S_z, S_zε, V_z, V_zε].
        struct Local {
            s: [f64; 2],
            v: [f64; 2],
            grad: Vec<[f64; 4]>,
        }
        let locals: Vec<Local> = els
            .par_iter()
            .map(|&e| {
                let nodes = self.element_nodes(e);
                let nn = nodes.len();
                let table = self.element_table(e);
                let mut g = vec![[HyperDual64::from(0.0); 3]; nn];
                let pass = |pick: usize, g: &mut [[HyperDual64; 3]]| {
                    let seed = |var: usize| if var == pick { 1.0 } else { 0.0 };
                    let x = hyper_dual_coordinates(
                        &self.coords,
                        nodes,
                        &dir.coords,
                        coords,
                        pick.checked_sub(3 * nn + 2),
                    );
                    let ue: Vec<HyperDual64> = (0..3 * nn)
                        .map(|k| {
                            let d = 3 * nodes[k / 3] + k % 3;
                            HyperDual64::new(u[d], dir.displacement[d], seed(k), 0.0)
                        })
                        .collect();
                    let young =
                        HyperDual64::new(self.young_elem[e], dir.young_elem[e], seed(3 * nn), 0.0);
                    let poisson = HyperDual64::new(
                        self.poisson_elem[e],
                        dir.poisson_elem[e],
                        seed(3 * nn + 1),
                        0.0,
                    );
                    let (_, mu) = lame(young, poisson);
                    let (mut s, mut v) = (HyperDual64::from(0.0), HyperDual64::from(0.0));
                    for q in 0..table.n_points() {
                        let det = gradfem_kernel::generic::physical_gradients(table.grad(q), &x, g);
                        let w = det * table.weights[q];
                        v += w;
                        // dev ε : dev ε with ε = sym ∇u.
                        let mut eps = [[HyperDual64::from(0.0); 3]; 3];
                        for (a, ga) in g.iter().enumerate() {
                            for i in 0..3 {
                                for j in 0..3 {
                                    eps[i][j] +=
                                        (ue[3 * a + i] * ga[j] + ue[3 * a + j] * ga[i]) * 0.5;
                                }
                            }
                        }
                        let tr = (eps[0][0] + eps[1][1] + eps[2][2]) * (1.0 / 3.0);
                        (0..3).for_each(|i| eps[i][i] -= tr);
                        let mut q2 = HyperDual64::from(0.0);
                        for row in &eps {
                            for x in row {
                                q2 += *x * *x;
                            }
                        }
                        if q2.re <= 0.0 {
                            continue;
                        }
                        s += w * (mu * mu * q2 * 6.0).powf(0.5 * p);
                    }
                    (s, v)
                };
                let n_picks = 3 * nn + 2 + coords.n_picks(nodes);
                let mut local =
                    Local { s: [0.0; 2], v: [0.0; 2], grad: Vec::with_capacity(n_picks) };
                for pick in 0..n_picks {
                    // (The displacement picks come first and set S and V.)
                    if pick >= 3 * nn + 2 && coords.is_still(pick - 3 * nn - 2, nodes) {
                        local.grad.push([0.0; 4]);
                        continue;
                    }
                    let (s, v) = pass(pick, &mut g);
                    local.s = [s.re, s.eps1];
                    local.v = [v.re, v.eps1];
                    local.grad.push([s.eps2, s.eps1eps2, v.eps2, v.eps1eps2]);
                }
                local
            })
            .collect();
        let (mut s, mut v) = ([0.0; 2], [0.0; 2]);
        for l in &locals {
            for k in 0..2 {
                s[k] += l.s[k];
                v[k] += l.v[k];
            }
        }
        let n_v = self.n_volume_elements();
        let mut du = vec![0.0; 3 * self.n_nodes()];
        let (mut d_young, mut d_poisson) = (vec![0.0; n_v], vec![0.0; n_v]);
        let mut dx = CoordinatePart::zeros(coords, self.n_nodes());
        if s[0] <= 0.0 {
            return (du, d_young, d_poisson, dx);
        }
        // F(S, V) = (S/V)^{1/p}: its gradient and Hessian by three hyper-dual passes.
        let f = |a: usize, b: usize| {
            let sv = [0, 1].map(|k| {
                let mut x = HyperDual64::from([s[0], v[0]][k]);
                x.eps1 = if k == a { 1.0 } else { 0.0 };
                x.eps2 = if k == b { 1.0 } else { 0.0 };
                x
            });
            (sv[0] / sv[1]).powf(1.0 / p)
        };
        let (fss, fsv, fvv) = (f(0, 0), f(0, 1), f(1, 1));
        let (f_s, f_v) = (fss.eps1, fvv.eps1);
        let c_s = fss.eps1eps2 * s[1] + fsv.eps1eps2 * v[1];
        let c_v = fsv.eps1eps2 * s[1] + fvv.eps1eps2 * v[1];
        let combine = |g: [f64; 4]| f_s * g[1] + f_v * g[3] + c_s * g[0] + c_v * g[2];
        // Summed in element order: the result does not depend on the thread count.
        for (l, &e) in locals.iter().zip(els) {
            let nodes = self.element_nodes(e);
            let nn = nodes.len();
            for (a, &n) in nodes.iter().enumerate() {
                for i in 0..3 {
                    du[3 * n + i] += combine(l.grad[3 * a + i]);
                }
            }
            d_young[e] += combine(l.grad[3 * nn]);
            d_poisson[e] += combine(l.grad[3 * nn + 1]);
            let picks: Vec<f64> = l.grad[3 * nn + 2..].iter().map(|&g| combine(g)).collect();
            dx.add_element(nodes, &picks);
        }
        (du, d_young, d_poisson, dx)
    }
}

/// What the hyper-dual path differentiates: the residual weighted by a fixed λ, or the
/// compliance fᵀu = −Σₑ uₑᵀ rₑ(0, T_ref, loads).
#[derive(Clone, Copy)]
enum Weighting<'a> {
    Residual(&'a [f64]),
    Compliance,
}

/// The scalar parameters of an element on the hyper-dual path: E, ν, α, T_ref, b (3), the
/// traction (3) and the pressure; a volume element reads the first seven, a facet the last
/// four.
const N_PARAMS: usize = 11;

/// An element's variables on the hyper-dual path, with their direction: u (3·nn), T (nn),
/// the [`N_PARAMS`] parameters, and the coordinates (3·nn) when they are variables.
struct MovingVariables {
    values: Vec<f64>,
    direction: Vec<f64>,
    nn: usize,
    /// The temperature is a field (else T is the reference and not differentiated).
    is_field: bool,
    with_x: bool,
}

impl LinearElasticModel {
    fn moving_variables(
        &self,
        e: usize,
        u: &[f64],
        dir: &MechanicalDirection,
        with_x: bool,
    ) -> MovingVariables {
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let p = self.element_params(e);
        let (te, is_field) = self.element_temperature_values(e, p.t_ref);
        let mut values = self.gather_element(e, u, 3);
        let mut direction = self.gather_element(e, &dir.displacement, 3);
        values.extend(&te);
        direction.extend(nodes.iter().map(|&n| if is_field { dir.temperature[n] } else { 0.0 }));
        if e < self.n_volume_elements() {
            let r = self.element_region(e);
            values.extend([self.young_elem[e], self.poisson_elem[e], p.alpha, p.t_ref]);
            values.extend(p.body);
            values.extend([0.0; 4]);
            direction.extend([dir.young_elem[e], dir.poisson_elem[e], dir.alpha[r], dir.t_ref[r]]);
            direction.extend(dir.body_force[r]);
            direction.extend([0.0; 4]);
        } else {
            let b = self.elem_tag[e] as usize;
            values.extend([0.0; 7]);
            values.extend(p.traction);
            values.push(p.pressure);
            direction.extend([0.0; 7]);
            direction.extend(dir.traction[b]);
            direction.push(dir.pressure[b]);
        }
        if with_x {
            for &n in nodes {
                values.extend_from_slice(&self.coords[n]);
                direction.extend_from_slice(&dir.coords.get(n).copied().unwrap_or([0.0; 3]));
            }
        }
        MovingVariables { values, direction, nn, is_field, with_x }
    }

    /// Element `e`'s residual at the variables `v` (with `loads_only`, at u = 0, T = T_ref and
    /// no stiffness: −f, the loads alone).
    fn moving_residual(
        &self,
        e: usize,
        v: &[HyperDual64],
        mv: &MovingVariables,
        loads_only: bool,
        out: &mut [HyperDual64],
    ) {
        let nn = mv.nn;
        let at = 4 * nn;
        let zero = HyperDual64::from(0.0);
        let x: Vec<[HyperDual64; 3]> = if mv.with_x {
            let x0 = at + N_PARAMS;
            (0..nn).map(|a| std::array::from_fn(|i| v[x0 + 3 * a + i])).collect()
        } else {
            self.element_nodes(e).iter().map(|&n| self.coords[n].map(HyperDual64::from)).collect()
        };
        let mut hp = self.element_params(e).lift::<HyperDual64>();
        if e < self.n_volume_elements() {
            let (l, m) = lame(v[at], v[at + 1]);
            hp.lambda = l;
            hp.mu = m;
            hp.alpha = v[at + 2];
            hp.t_ref = v[at + 3];
            hp.body = [v[at + 4], v[at + 5], v[at + 6]];
        } else {
            hp.traction = [v[at + 7], v[at + 8], v[at + 9]];
            hp.pressure = v[at + 10];
        }
        if loads_only {
            hp.lambda = zero;
            hp.mu = zero;
            hp.alpha = zero;
            let t_ref = vec![hp.t_ref; nn];
            self.element_residual_generic(e, &x, &vec![zero; 3 * nn], &t_ref, &hp, out);
        } else {
            self.element_residual_generic(e, &x, &v[..3 * nn], &v[3 * nn..4 * nn], &hp, out);
        }
    }

    /// The hyper-dual path: one pass per element variable other than the coordinates (ε₁ the
    /// direction, ε₂ the variable), then one per coordinate pick of `coords`, every element,
    /// facets included.
    fn moving_second_order(
        &self,
        u: &[f64],
        weighting: Weighting,
        dir: &MechanicalDirection,
        coords: CoordinateRequest,
    ) -> MechanicalSecondOrder {
        self.moving_second_order_with(u, weighting, dir, coords, false)
    }

    /// [`moving_second_order`](Self::moving_second_order); with `volume_closed`, the facets
    /// alone (the volume elements' products are the closed forms').
    fn moving_second_order_with(
        &self,
        u: &[f64],
        weighting: Weighting,
        dir: &MechanicalDirection,
        coords: CoordinateRequest,
        volume_closed: bool,
    ) -> MechanicalSecondOrder {
        let with_x = !coords.is_none() || !dir.coords.is_empty();
        let compute = |e: usize| {
            if volume_closed && e < self.n_volume_elements() {
                return None;
            }
            let mv = self.moving_variables(e, u, dir, with_x);
            let nn = mv.nn;
            let lambda_e = match weighting {
                Weighting::Residual(l) => {
                    let le = self.gather_element(e, l, 3);
                    if le.iter().all(|&v| v == 0.0) {
                        return None;
                    }
                    Some(le)
                }
                Weighting::Compliance => None,
            };
            let m = mv.values.len();
            let nodes = self.element_nodes(e);
            // The variables picked one at a time (the coordinates are picked by `coords`).
            let m_base = 4 * nn + N_PARAMS;
            let mut out = vec![0.0; m_base + coords.n_picks(nodes)];
            let mut r = vec![HyperDual64::from(0.0); 3 * nn];
            let mut v: Vec<HyperDual64> =
                (0..m).map(|j| HyperDual64::new(mv.values[j], mv.direction[j], 0.0, 0.0)).collect();
            for (i, o) in out.iter_mut().enumerate() {
                if !seed_pick(&mut v, i, m_base, coords, nodes) {
                    continue;
                }
                *o = match &lambda_e {
                    Some(le) => {
                        self.moving_residual(e, &v, &mv, false, &mut r);
                        le.iter().zip(&r).map(|(l, r)| l * r.eps1eps2).sum()
                    }
                    None => {
                        self.moving_residual(e, &v, &mv, true, &mut r);
                        let c = v[..3 * nn]
                            .iter()
                            .zip(&r)
                            .fold(HyperDual64::from(0.0), |acc, (ui, ri)| acc - *ui * *ri);
                        c.eps1eps2
                    }
                };
            }
            Some((mv, out))
        };
        let mut res = MechanicalSecondOrder::zeros(self, coords);
        // Summed in element order: the result does not depend on the thread count.
        gradfem_kernel::for_each_element_ordered(self.n_elements(), compute, |e, local| {
            let Some((mv, l)) = local else { return };
            let nn = mv.nn;
            let at = 4 * nn;
            let nodes = self.element_nodes(e);
            for (a, &n) in nodes.iter().enumerate() {
                for i in 0..3 {
                    res.displacement[3 * n + i] += l[3 * a + i];
                }
                if mv.is_field {
                    res.temperature[n] += l[3 * nn + a];
                }
            }
            res.coords.add_element(nodes, &l[at + N_PARAMS..]);
            if e < self.n_volume_elements() {
                let r = self.element_region(e);
                res.young_elem[e] += l[at];
                res.poisson_elem[e] += l[at + 1];
                res.alpha[r] += l[at + 2];
                res.t_ref[r] += l[at + 3];
                for k in 0..3 {
                    res.body_force[r][k] += l[at + 4 + k];
                }
            } else {
                // A facet's condition is a traction or a pressure (the other is no parameter).
                let b = self.elem_tag[e] as usize;
                match self.boundaries[b].kind {
                    BcKind::Traction { .. } => {
                        (0..3).for_each(|k| res.traction[b][k] += l[at + 7 + k])
                    }
                    BcKind::Pressure { .. } => res.pressure[b] += l[at + 10],
                    _ => {}
                }
            }
        });
        res
    }

    /// The compliance C = fᵀu differentiated twice along `dir` (δu, the loads' δp and, when
    /// the nodes move, δX): `displacement` holds d/dε ∂C/∂u = δf, the loads' parts
    /// d/dε ∂C/∂p, and the coordinates' d/dε ∂C/∂X as `coords` requests (the material parts
    /// are zero: f holds no stiffness).
    pub fn compliance_hessian(
        &self,
        u: &[f64],
        dir: &MechanicalDirection,
        coords: CoordinateRequest,
    ) -> MechanicalSecondOrder {
        self.moving_second_order(u, Weighting::Compliance, dir, coords)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::linear::{BcSpec, RegionSpec};
    use gradfem_mesh::CellType;
    use gradfem_mesh::generate::{BoxSpec, box_mesh};

    fn model(cell: CellType, with_t: bool) -> (LinearElasticModel, Vec<f64>) {
        block(cell, &[clamped()], with_t)
    }

    /// x = 0 held.
    fn clamped() -> BcSpec {
        BcSpec {
            group: "xmin".into(),
            kind: BcKind::Displacement { value: [Some(0.0), Some(0.0), Some(0.0)] },
        }
    }

    /// A polysilicon-like block with the conditions `bcs`, a body force, a temperature field
    /// when `with_t`, and a smooth displacement.
    pub(crate) fn block(
        cell: CellType,
        bcs: &[BcSpec],
        with_t: bool,
    ) -> (LinearElasticModel, Vec<f64>) {
        let mesh = box_mesh(&BoxSpec {
            origin: [0.0; 3],
            lengths: [1e-3, 2e-4, 1e-4],
            divisions: [3, 2, 1],
            cell_type: cell,
        });
        let region = RegionSpec {
            group: "domain".into(),
            young: 1.6e11,
            poisson: 0.22,
            alpha: 2.6e-6,
            t_ref: 293.0,
            body_force: [0.0, -1e4, 0.0],
        };
        let mut m = LinearElasticModel::new(&mesh, &[region], bcs).unwrap();
        if with_t {
            let t = m.coords.iter().map(|p| 300.0 + 4e5 * p[0] + 1e6 * p[1]).collect();
            m.set_temperature(Some(t)).unwrap();
        }
        let u =
            m.coords.iter().flat_map(|p| [1e-2 * p[0] * p[1], -3e-3 * p[0], 5e-3 * p[2]]).collect();
        (m, u)
    }

    fn direction(m: &LinearElasticModel) -> MechanicalDirection {
        let mut d = MechanicalDirection::zeros(m);
        for (i, v) in d.displacement.iter_mut().enumerate() {
            *v = 1e-7 * ((i as f64) * 0.37).sin();
        }
        for (i, v) in d.temperature.iter_mut().enumerate() {
            *v = 3.0 * ((i as f64) * 0.71).cos();
        }
        for (e, v) in d.young_elem.iter_mut().enumerate() {
            *v = 1e10 * (1.0 + (e % 3) as f64);
        }
        for (e, v) in d.poisson_elem.iter_mut().enumerate() {
            *v = 0.01 * (1.0 - (e % 2) as f64);
        }
        d.alpha[0] = 4e-7;
        d.t_ref[0] = 2.0;
        d.body_force[0] = [1e3, 0.0, -2e3];
        d
    }

    #[test]
    fn closed_form_matches_hyper_dual_numbers() {
        for (cell, with_t) in
            [(CellType::Tet4, true), (CellType::Hex8, true), (CellType::Tet10, false)]
        {
            let (m, u) = model(cell, with_t);
            let d = direction(&m);
            let lambda: Vec<f64> = (0..3 * m.n_nodes())
                .map(|i| {
                    if m.dofs.unknown_of_node[i].is_some() {
                        ((i as f64) * 0.13).cos()
                    } else {
                        0.0
                    }
                })
                .collect();
            let a = m.second_order_vjp(&u, &lambda, &d, CoordinateRequest::None);
            let b = m.second_order_vjp_dual(&u, &lambda, &d);
            let close = |what: &str, x: &[f64], y: &[f64]| {
                let scale = y.iter().fold(1e-300f64, |s, v| s.max(v.abs()));
                for (i, (p, q)) in x.iter().zip(y).enumerate() {
                    assert!((p - q).abs() <= 1e-10 * scale, "{cell:?} {what}[{i}]: {p} vs {q}");
                }
            };
            close("u", &a.displacement, &b.displacement);
            close("T", &a.temperature, &b.temperature);
            close("E", &a.young_elem, &b.young_elem);
            close("nu", &a.poisson_elem, &b.poisson_elem);
            close("alpha", &a.alpha, &b.alpha);
            close("t_ref", &a.t_ref, &b.t_ref);
        }
    }

    /// With moving nodes the closed form (volume elements) plus the hyper-dual facets and
    /// coordinate picks equal the hyper-dual path over every element, for the coordinates'
    /// part per node, along a field, and not requested.
    #[rstest::rstest]
    #[case(CellType::Tet4)]
    #[case(CellType::Hex8)]
    #[case(CellType::Tet10)]
    fn moving_closed_form_matches_hyper_dual_numbers(#[case] cell: CellType) {
        let (m, u, mut d) = loaded(cell);
        d.body_force[0] = [1e3, -2e3, 5e2];
        let lambda: Vec<f64> =
            (0..3 * m.n_nodes())
                .map(|i| {
                    if m.dofs.unknown_of_node[i].is_some() {
                        ((i as f64) * 0.13).cos()
                    } else {
                        0.0
                    }
                })
                .collect();
        let fields = vec![d.coords.clone()];
        let close = |what: &str, x: &[f64], y: &[f64]| {
            let scale = y.iter().fold(1e-300f64, |s, v| s.max(v.abs()));
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                assert!((p - q).abs() <= 1e-10 * scale, "{cell:?} {what}[{i}]: {p} vs {q}");
            }
        };
        let flat = |v: &[[f64; 3]]| v.iter().flatten().copied().collect::<Vec<_>>();
        for request in
            [CoordinateRequest::None, CoordinateRequest::Every, CoordinateRequest::Along(&fields)]
        {
            let a = m.second_order_vjp(&u, &lambda, &d, request);
            let b = m.moving_second_order(&u, Weighting::Residual(&lambda), &d, request);
            close("u", &a.displacement, &b.displacement);
            close("T", &a.temperature, &b.temperature);
            close("E", &a.young_elem, &b.young_elem);
            close("nu", &a.poisson_elem, &b.poisson_elem);
            close("alpha", &a.alpha, &b.alpha);
            close("t_ref", &a.t_ref, &b.t_ref);
            close("body", &flat(&a.body_force), &flat(&b.body_force));
            close("traction", &flat(&a.traction), &flat(&b.traction));
            close("pressure", &a.pressure, &b.pressure);
            assert!(a.body_force[0].iter().any(|v| *v != 0.0), "the motion reaches the body force");
            match (&a.coords, &b.coords) {
                (CoordinatePart::None, CoordinatePart::None) => {}
                (CoordinatePart::Every(x), CoordinatePart::Every(y)) => {
                    close("X", &flat(x), &flat(y))
                }
                (CoordinatePart::Along(x), CoordinatePart::Along(y)) => close("along", x, y),
                _ => panic!("the same kind of coordinate part"),
            }
        }
    }

    #[test]
    fn residual_jvp_closed_form_matches_dual_numbers() {
        for (cell, with_t) in [(CellType::Tet4, true), (CellType::Hex8, false)] {
            let (m, u) = model(cell, with_t);
            let d = direction(&m);
            let a = m.residual_jvp(&u, &d);
            let b = m.residual_jvp_dual(&u, &d);
            let scale = b.iter().fold(0.0f64, |s, v| s.max(v.abs()));
            for i in 0..a.len() {
                assert!(
                    (a[i] - b[i]).abs() <= 1e-12 * scale,
                    "{cell:?} dof {i}: {} vs {}",
                    a[i],
                    b[i]
                );
            }
        }
    }

    /// The von Mises p-norm's Hessian product against central differences of its gradient.
    /// The von Mises p-norm term of `model(…)`'s tests.
    fn von_mises_term(p: f64) -> [crate::linear::objective::ObjectiveTerm; 1] {
        use crate::linear::objective::{ObjectiveKind, ObjectiveTerm};
        [ObjectiveTerm {
            weight: 1.0,
            kind: ObjectiveKind::VonMisesPNorm { group: "domain".into(), p },
        }]
    }

    /// The von Mises p-norm's first-order derivatives with the model moved by `s` along `d`
    /// (E, ν, u, and the nodes by `d.coords` when it is not empty), for central differences.
    fn von_mises_gradient_at(
        m: &LinearElasticModel,
        u: &[f64],
        d: &MechanicalDirection,
        p: f64,
        s: f64,
    ) -> crate::linear::objective::ObjectiveEval {
        let mut mm = m.clone();
        for (e, v) in mm.young_elem.iter_mut().enumerate() {
            *v += s * d.young_elem[e];
        }
        for (e, v) in mm.poisson_elem.iter_mut().enumerate() {
            *v += s * d.poisson_elem[e];
        }
        for (x, c) in mm.coords.iter_mut().zip(&d.coords) {
            (0..3).for_each(|k| x[k] += s * c[k]);
        }
        let uu: Vec<f64> = u.iter().zip(&d.displacement).map(|(a, b)| a + s * b).collect();
        let with_coords = !d.coords.is_empty();
        crate::linear::objective::evaluate(&mm, &von_mises_term(p), &uu, with_coords).unwrap()
    }

    /// `got` against the central difference of `plus` and `minus` (step `h`), to 1e-5 of the
    /// largest difference.
    fn assert_central(what: &str, got: &[f64], plus: &[f64], minus: &[f64], h: f64) {
        let fd: Vec<f64> = plus.iter().zip(minus).map(|(a, b)| (a - b) / (2.0 * h)).collect();
        let scale = fd.iter().fold(1e-300f64, |a, v| a.max(v.abs()));
        for (i, (g, f)) in got.iter().zip(&fd).enumerate() {
            assert!((g - f).abs() <= 1e-5 * scale, "{what}[{i}]: {g} vs {f}");
        }
    }

    #[test]
    fn von_mises_hessian_matches_differences_of_the_gradient() {
        for (cell, p) in [(CellType::Tet4, 4.0), (CellType::Hex8, 2.5)] {
            let (m, u) = model(cell, true);
            let d = direction(&m);
            let els = m.group_elements("domain").unwrap().to_vec();
            let (du, de, dn) = m.von_mises_pnorm_hessian(&els, p, &u, &d);
            let h = 1e-5;
            let (ep, em) =
                (von_mises_gradient_at(&m, &u, &d, p, h), von_mises_gradient_at(&m, &u, &d, p, -h));
            assert_central(&format!("{cell:?} u"), &du, &ep.d_displacement, &em.d_displacement, h);
            assert_central(&format!("{cell:?} E"), &de, &ep.d_young_elem, &em.d_young_elem, h);
            assert_central(&format!("{cell:?} nu"), &dn, &ep.d_poisson_elem, &em.d_poisson_elem, h);
        }
    }

    /// The von Mises p-norm's Hessian product with the nodes moving, against central
    /// differences of its first-order derivatives (u, E, ν and X); with the nodes still it
    /// equals the closed form.
    #[test]
    fn von_mises_hessian_with_moving_nodes_matches_differences_of_the_gradient() {
        for (cell, p) in [(CellType::Tet4, 4.0), (CellType::Hex8, 2.5), (CellType::Tet10, 6.0)] {
            let (m, u) = model(cell, true);
            let mut d = direction(&m);
            let els = m.group_elements("domain").unwrap().to_vec();
            let still = m.von_mises_pnorm_hessian_moving(&els, p, &u, &d, CoordinateRequest::None);
            let closed = m.von_mises_pnorm_hessian(&els, p, &u, &d);
            for (a, b) in [(&still.0, &closed.0), (&still.1, &closed.1), (&still.2, &closed.2)] {
                let scale = b.iter().fold(1e-300f64, |m, v| m.max(v.abs()));
                for (x, y) in a.iter().zip(b) {
                    assert!((x - y).abs() <= 1e-10 * scale, "{cell:?}: {x} vs {y} (still)");
                }
            }
            d.coords = (0..m.n_nodes())
                .map(|i| {
                    let f = i as f64;
                    [2e-5 * (0.7 * f).sin(), 1e-5 * (1.3 * f).cos(), 5e-6 * (0.4 * f).sin()]
                })
                .collect();
            let (du, de, dn, dx) =
                m.von_mises_pnorm_hessian_moving(&els, p, &u, &d, CoordinateRequest::Every);
            let dx: Vec<f64> = dx.every().unwrap().iter().flatten().copied().collect();
            let h = 1e-5;
            let (ep, em) =
                (von_mises_gradient_at(&m, &u, &d, p, h), von_mises_gradient_at(&m, &u, &d, p, -h));
            assert_central(&format!("{cell:?} u"), &du, &ep.d_displacement, &em.d_displacement, h);
            assert_central(&format!("{cell:?} E"), &de, &ep.d_young_elem, &em.d_young_elem, h);
            assert_central(&format!("{cell:?} nu"), &dn, &ep.d_poisson_elem, &em.d_poisson_elem, h);
            let flat = |v: &Option<Vec<[f64; 3]>>| -> Vec<f64> {
                v.as_ref().unwrap().iter().flatten().copied().collect()
            };
            assert_central(
                &format!("{cell:?} X"),
                &dx,
                &flat(&ep.d_coords),
                &flat(&em.d_coords),
                h,
            );
        }
    }

    #[test]
    fn residual_jvp_matches_central_differences() {
        let (m, u) = model(CellType::Tet4, true);
        let d = direction(&m);
        let jvp = m.residual_jvp(&u, &d);
        let h = 1e-6;
        let moved = |s: f64| {
            let (mm, uu) = moved_along(&m, &u, &d, s);
            mm.full_residual(&uu)
        };
        let (rp, rm) = (moved(h), moved(-h));
        let scale = jvp.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        for i in 0..jvp.len() {
            let fd = (rp[i] - rm[i]) / (2.0 * h);
            assert!((jvp[i] - fd).abs() <= 1e-6 * scale, "dof {i}: {} vs {fd}", jvp[i]);
        }
    }

    /// A loaded block (traction on x = L, pressure on y = W, body force, a temperature field)
    /// and a direction that moves every node too.
    fn loaded(cell: CellType) -> (LinearElasticModel, Vec<f64>, MechanicalDirection) {
        let bcs = [
            clamped(),
            BcSpec { group: "xmax".into(), kind: BcKind::Traction { traction: [1e5, 3e5, -2e5] } },
            BcSpec { group: "ymax".into(), kind: BcKind::Pressure { pressure: 4e5 } },
        ];
        let (m, u) = block(cell, &bcs, true);
        let mut d = direction(&m);
        d.traction[1] = [2e4, -1e4, 5e4];
        d.pressure[2] = 3e4;
        d.coords = m
            .coords
            .iter()
            .enumerate()
            .map(|(n, _)| {
                let f = n as f64;
                [2e-5 * (0.7 * f).sin(), 1e-5 * (1.3 * f).cos(), 5e-6 * (0.4 * f).sin()]
            })
            .collect();
        (m, u, d)
    }

    /// The model and state moved by `s` along every part of `d`.
    fn moved_along(
        m: &LinearElasticModel,
        u: &[f64],
        d: &MechanicalDirection,
        s: f64,
    ) -> (LinearElasticModel, Vec<f64>) {
        let mut mm = m.clone();
        for (e, v) in mm.young_elem.iter_mut().enumerate() {
            *v += s * d.young_elem[e];
        }
        for (e, v) in mm.poisson_elem.iter_mut().enumerate() {
            *v += s * d.poisson_elem[e];
        }
        mm.regions[0].alpha += s * d.alpha[0];
        mm.regions[0].t_ref += s * d.t_ref[0];
        for k in 0..3 {
            mm.regions[0].body_force[k] += s * d.body_force[0][k];
        }
        for (b, bc) in mm.boundaries.iter_mut().enumerate() {
            match &mut bc.kind {
                BcKind::Traction { traction } => {
                    (0..3).for_each(|k| traction[k] += s * d.traction[b][k])
                }
                BcKind::Pressure { pressure } => *pressure += s * d.pressure[b],
                _ => {}
            }
        }
        for (x, dx) in mm.coords.iter_mut().zip(&d.coords) {
            (0..3).for_each(|k| x[k] += s * dx[k]);
        }
        let t: Vec<f64> =
            m.temperature().unwrap().iter().zip(&d.temperature).map(|(a, b)| a + s * b).collect();
        mm.set_temperature(Some(t)).unwrap();
        let uu: Vec<f64> = u.iter().zip(&d.displacement).map(|(a, b)| a + s * b).collect();
        (mm, uu)
    }

    /// With a direction that moves the nodes, the residual's tangent, the derivatives of every
    /// vector-Jacobian product of the residual (loads and coordinates included) and the
    /// compliance's Hessian product match central differences of the first-order products.
    #[rstest::rstest]
    #[case(CellType::Tet4)]
    #[case(CellType::Hex8)]
    fn coordinate_directions_match_central_differences(#[case] cell: CellType) {
        use crate::linear::VjpRequest;
        use crate::linear::objective::{ObjectiveKind, ObjectiveTerm, evaluate};
        let (m, u, d) = loaded(cell);
        let h = 1e-6;
        let (mp, up) = moved_along(&m, &u, &d, h);
        let (mm, um) = moved_along(&m, &u, &d, -h);
        let check = |what: &str, got: &[f64], plus: &[f64], minus: &[f64]| {
            let fd: Vec<f64> = plus.iter().zip(minus).map(|(a, b)| (a - b) / (2.0 * h)).collect();
            let scale = fd.iter().fold(1e-300f64, |a, v| a.max(v.abs()));
            assert!(scale > 1e-250, "{what}: nothing to compare");
            for (i, (g, f)) in got.iter().zip(&fd).enumerate() {
                assert!((g - f).abs() <= 1e-5 * scale, "{cell:?} {what}[{i}]: {g} vs {f}");
            }
        };
        let flat3 = |v: &[[f64; 3]]| -> Vec<f64> { v.iter().flatten().copied().collect() };
        check("residual", &m.residual_jvp(&u, &d), &mp.full_residual(&up), &mm.full_residual(&um));
        let lambda: Vec<f64> =
            (0..3 * m.n_nodes())
                .map(|i| {
                    if m.dofs.unknown_of_node[i].is_some() {
                        ((i as f64) * 0.13).cos()
                    } else {
                        0.0
                    }
                })
                .collect();
        let so = m.second_order_vjp(&u, &lambda, &d, CoordinateRequest::Every);
        // (∂R/∂u)ᵀλ = K λ = R(λ) − R(0) for the linear residual.
        let k_lambda = |m: &LinearElasticModel| -> Vec<f64> {
            let r0 = m.full_residual(&vec![0.0; lambda.len()]);
            m.full_residual(&lambda).iter().zip(&r0).map(|(a, b)| a - b).collect()
        };
        check("u", &so.displacement, &k_lambda(&mp), &k_lambda(&mm));
        let (vp, vm) = (
            mp.parameter_vjp(&up, &lambda, VjpRequest::ALL),
            mm.parameter_vjp(&um, &lambda, VjpRequest::ALL),
        );
        check(
            "T",
            &so.temperature,
            vp.temperature.as_ref().unwrap(),
            vm.temperature.as_ref().unwrap(),
        );
        check("E", &so.young_elem, &vp.young_elem, &vm.young_elem);
        check("nu", &so.poisson_elem, &vp.poisson_elem, &vm.poisson_elem);
        check("alpha", &so.alpha, &vp.alpha, &vm.alpha);
        check("body", &flat3(&so.body_force), &flat3(&vp.body_force), &flat3(&vm.body_force));
        check("traction", &flat3(&so.traction), &flat3(&vp.traction), &flat3(&vm.traction));
        check("pressure", &so.pressure, &vp.pressure, &vm.pressure);
        check(
            "coords",
            &flat3(so.coords.every().unwrap()),
            &flat3(vp.coords.as_ref().unwrap()),
            &flat3(vm.coords.as_ref().unwrap()),
        );
        // The compliance: ∂C/∂u = f and ∂C/∂X from the objective, ∂C/∂p = −(∂R/∂p)ᵀu.
        let ch = m.compliance_hessian(&u, &d, CoordinateRequest::Every);
        let term = [ObjectiveTerm { weight: 1.0, kind: ObjectiveKind::Compliance }];
        let (ep, em) =
            (evaluate(&mp, &term, &up, true).unwrap(), evaluate(&mm, &term, &um, true).unwrap());
        check("compliance u", &ch.displacement, &ep.d_displacement, &em.d_displacement);
        check(
            "compliance X",
            &flat3(ch.coords.every().unwrap()),
            &flat3(ep.d_coords.as_ref().unwrap()),
            &flat3(em.d_coords.as_ref().unwrap()),
        );
        let loads = |m: &LinearElasticModel, u: &[f64]| -> Vec<f64> {
            let v = m.parameter_vjp(u, u, VjpRequest::ALL);
            flat3(&v.body_force)
                .into_iter()
                .chain(flat3(&v.traction))
                .chain(v.pressure)
                .map(|x| -x)
                .collect()
        };
        let got: Vec<f64> = flat3(&ch.body_force)
            .into_iter()
            .chain(flat3(&ch.traction))
            .chain(ch.pressure.clone())
            .collect();
        check("compliance loads", &got, &loads(&mp, &up), &loads(&mm, &um));
    }
}
