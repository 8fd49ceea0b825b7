//! Second-order products of the thermal residual, for tangent-linear solves and Hessian-vector
//! products by the second-order adjoint.
//!
//! With the residual R(T, p) (every node's row; the fixed nodes' temperatures are part of T),
//! a direction (δT, δp) and an adjoint λ:
//!
//! - [`ThermalModel::residual_jvp`] gives d/dε R(T + ε δT, p + ε δp), the right-hand side of the
//!   tangent-linear solve;
//! - [`ThermalModel::second_order_vjp`] gives the derivative along (δT, δp) of the two
//!   vector-Jacobian products the adjoint uses, (∂R/∂T)ᵀλ and (∂R/∂p)ᵀλ: the terms the
//!   second-order adjoint adds to its right-hand side and to the Hessian-vector product.
//!
//! The node coordinates X are parameters like the others: a direction may move them (δX) and
//! the products may include (∂R/∂X)ᵀλ. Both come from dual numbers over
//! [`ThermalModel::element_residual_generic`], whose geometry is generic too, so the
//! conductivity law k(T), the Jacobians of volume cells and the area of boundary facets are
//! differentiated exactly (volume elements have a closed form when the nodes hold still). External sources
//! (Joule heat from a coupled electrical field) do not depend on T or p inside this field and
//! drop out of both products.

use gradfem_kernel::{
    CoordinatePart, CoordinateRequest, dual_coordinates, element_motion, for_each_element_ordered,
    hyper_dual_coordinates, motion_gradient, symmetric_times,
};
use num_dual::{Dual64, HyperDual64};

use crate::model::{BcKind, MAX_NODES, ParameterVjp, ThermalModel};

/// A direction in the thermal model's temperatures and parameters, in the layout of
/// [`ParameterVjp`].
#[derive(Clone, Debug, PartialEq)]
pub struct ThermalDirection {
    /// δT at every node (fixed nodes included: a fixed temperature that changes moves them).
    pub temperature: Vec<f64>,
    /// δk₀ per volume element.
    pub k_elem: Vec<f64>,
    /// δQ per region.
    pub source: Vec<f64>,
    /// δh per boundary condition (convection only).
    pub h: Vec<f64>,
    /// δT∞ per boundary condition (convection only).
    pub t_inf: Vec<f64>,
    /// δq_in per boundary condition (heat flux only).
    pub q_in: Vec<f64>,
    /// δX at every node (empty: the nodes hold still).
    pub coords: Vec<[f64; 3]>,
}

impl ThermalDirection {
    /// The zero direction of `model`.
    pub fn zeros(model: &ThermalModel) -> Self {
        let nb = model.boundaries.len();
        ThermalDirection {
            temperature: vec![0.0; model.n_nodes()],
            k_elem: vec![0.0; model.n_volume],
            source: vec![0.0; model.regions.len()],
            h: vec![0.0; nb],
            t_inf: vec![0.0; nb],
            q_in: vec![0.0; nb],
            coords: Vec::new(),
        }
    }

    /// The same direction without its temperature part.
    pub fn parameters_only(&self) -> Self {
        ThermalDirection { temperature: vec![0.0; self.temperature.len()], ..self.clone() }
    }
}

/// The element's parameters and their directions, in the order of the generic kernel's
/// arguments: k₀, Q, h, T∞, q_in.
fn element_parameters(model: &ThermalModel, e: usize, dir: &ThermalDirection) -> [(f64, f64); 5] {
    let p = model.params_of(e);
    let tag = model.elem_tag[e] as usize;
    if e < model.n_volume {
        [(p.k0, dir.k_elem[e]), (p.source, dir.source[tag]), (0.0, 0.0), (0.0, 0.0), (0.0, 0.0)]
    } else {
        [
            (0.0, 0.0),
            (0.0, 0.0),
            (p.h, dir.h[tag]),
            (p.t_inf, dir.t_inf[tag]),
            (p.q_in, dir.q_in[tag]),
        ]
    }
}

/// Which of the five kernel parameters element `e` has (volume: k₀ and Q; a convection facet:
/// h and T∞; a heat-flux facet: q_in; a fixed-temperature facet: none).
fn used_parameters(model: &ThermalModel, e: usize) -> std::ops::Range<usize> {
    if e < model.n_volume {
        return 0..2;
    }
    match model.boundaries[model.elem_tag[e] as usize].kind {
        BcKind::Convection { .. } => 2..4,
        BcKind::HeatFlux { .. } => 4..5,
        BcKind::Temperature { .. } => 0..0,
    }
}

/// One quadrature point of a volume element along a direction: the shape functions and their
/// physical gradients, w = weight · det J, T, δT and λ there with their gradients, and the
/// gradient G_δ of the nodes' motion with its trace (None and 0 when the nodes hold still).
struct DirectionPoint<'a> {
    g: &'a [[f64; 3]],
    n: &'a [f64],
    w: f64,
    tq: f64,
    dtq: f64,
    lq: f64,
    gt: [f64; 3],
    gl: [f64; 3],
    gd: [f64; 3],
    motion: Option<[[f64; 3]; 3]>,
    tr: f64,
}

/// An affine Tet4: its nodes, barycentric gradients g_a and volume.
struct StillTet4<'a> {
    nodes: &'a [usize],
    g: [[f64; 3]; 4],
    volume: f64,
}

impl StillTet4<'_> {
    /// ∇v of the nodal field `v` (constant on the cell).
    fn gradient(&self, v: &[f64]) -> [f64; 3] {
        let mut out = [0.0; 3];
        for (ga, &n) in self.g.iter().zip(self.nodes) {
            for k in 0..3 {
                out[k] += ga[k] * v[n];
            }
        }
        out
    }
}

fn dot3(a: &[f64; 3], b: &[f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

impl ThermalModel {
    /// d/dε R(T + ε δT, p + ε δp) at every node: the residual's directional derivative (rows of
    /// fixed nodes included; the caller keeps the rows it solves for). Volume elements in
    /// closed form, dR_a = ∫ (δk₀ f + k₀ f′ δT) ∇N_a·∇T + k₀ f ∇N_a·∇δT − δQ N_a, facets by dual
    /// numbers.
    pub fn residual_jvp(&self, t: &[f64], dir: &ThermalDirection) -> Vec<f64> {
        self.residual_jvp_with(t, dir, true)
    }

    /// [`residual_jvp`](Self::residual_jvp) with every element through dual numbers (the
    /// reference of the closed form).
    pub fn residual_jvp_dual(&self, t: &[f64], dir: &ThermalDirection) -> Vec<f64> {
        self.residual_jvp_with(t, dir, false)
    }

    fn residual_jvp_with(&self, t: &[f64], dir: &ThermalDirection, closed_form: bool) -> Vec<f64> {
        let mut out = vec![0.0; self.n_nodes()];
        self.scatter_chunked(&mut out, 1, |e, local| {
            if closed_form && e < self.n_volume {
                self.volume_jvp(e, t, dir, local);
                return;
            }
            let nodes = self.element_nodes(e);
            let nn = nodes.len();
            let pars = element_parameters(self, e, dir);
            if pars.iter().all(|&(v, d)| v == 0.0 && d == 0.0) && e >= self.n_volume {
                return; // a facet without a flux term (fixed temperature)
            }
            let x = dual_coordinates(&self.coords, nodes, &dir.coords);
            let te: Vec<Dual64> =
                nodes.iter().map(|&n| Dual64::new(t[n], dir.temperature[n])).collect();
            let d = |i: usize| Dual64::new(pars[i].0, pars[i].1);
            let mut r = vec![Dual64::from(0.0); nn];
            self.element_residual_generic(e, &x, &te, d(0), d(1), d(2), d(3), d(4), &mut r);
            for (l, ri) in local.iter_mut().zip(&r) {
                *l = ri.eps;
            }
        });
        out
    }

    /// Volume element `e`'s residual tangent along the direction, into `local`.
    fn volume_jvp(&self, e: usize, t: &[f64], dir: &ThermalDirection, local: &mut [f64]) {
        let tag = self.elem_tag[e] as usize;
        let law = &self.regions[tag].law;
        let (k0, dk0, dq) = (self.k_elem[e], dir.k_elem[e], dir.source[tag]);
        if let Some(tet) = self.still_constant_tet4(e, dir) {
            // dR_a = V (δk₀ g_a·∇T + k₀ g_a·∇δT) − δQ V/4.
            let (gt, gd) = (tet.gradient(t), tet.gradient(&dir.temperature));
            for (a, ga) in tet.g.iter().enumerate() {
                local[a] += tet.volume * (dk0 * dot3(ga, &gt) + k0 * dot3(ga, &gd) - 0.25 * dq);
            }
            return;
        }
        let source = self.regions[tag].source;
        self.for_direction_points(e, t, None, dir, |p| {
            let f = law.factor(Dual64::new(p.tq, 1.0));
            let c_t = dk0 * f.re + k0 * f.eps * p.dtq;
            let c_d = k0 * f.re;
            // Moving nodes: δ(w) = w tr G and δ(∇N_a·∇T) = −∇N_aᵀ(G + Gᵀ)∇T.
            let mgt = p.motion.map_or([0.0; 3], |m| symmetric_times(&m, &p.gt));
            for (a, ga) in p.g.iter().enumerate() {
                let ga_t = dot3(ga, &p.gt);
                let ga_d = dot3(ga, &p.gd);
                let moving = p.tr * (k0 * f.re * ga_t - source * p.n[a]) - c_d * dot3(ga, &mgt);
                local[a] += p.w * (c_t * ga_t + c_d * ga_d - dq * p.n[a] + moving);
            }
        });
    }

    /// Volume element `e` as an affine Tet4 with a constant conductivity along a direction
    /// that holds the nodes still (the closed forms' written-out path, like the first-order
    /// products'); `None` otherwise.
    fn still_constant_tet4(&self, e: usize, dir: &ThermalDirection) -> Option<StillTet4<'_>> {
        let law = &self.regions[self.elem_tag[e] as usize].law;
        if !(dir.coords.is_empty()
            && self.element_cell_type(e) == gradfem_mesh::CellType::Tet4
            && law.is_constant())
        {
            return None;
        }
        let nodes = self.element_nodes(e);
        let x = [0, 1, 2, 3].map(|a| self.coords[nodes[a]]);
        let (g, volume) = crate::model::tet4_gradients(&x);
        Some(StillTet4 { nodes, g, volume })
    }

    /// `f` at every quadrature point of volume element `e` along `dir` (see
    /// [`DirectionPoint`]); λ is zero where `lambda` is None.
    fn for_direction_points(
        &self,
        e: usize,
        t: &[f64],
        lambda: Option<&[f64]>,
        dir: &ThermalDirection,
        mut f: impl FnMut(&DirectionPoint),
    ) {
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let table = self.element_table(e);
        let x = self.element_coords(e);
        let dx = element_motion(nodes, &dir.coords);
        let mut g = [[0.0; 3]; crate::model::MAX_NODES];
        // An affine cell (Tet4) has the same gradients and det J at every point.
        let affine = self.element_cell_type(e) == gradfem_mesh::CellType::Tet4;
        let mut det = 0.0;
        for q in 0..table.n_points() {
            if q == 0 || !affine {
                det = gradfem_mesh::geometry::physical_gradients_into(
                    3,
                    table.grad(q),
                    &x[..nn],
                    &mut g[..nn],
                );
            }
            let n = table.shape(q);
            let (mut tq, mut dtq, mut lq) = (0.0, 0.0, 0.0);
            let (mut gt, mut gl, mut gd) = ([0.0; 3], [0.0; 3], [0.0; 3]);
            for a in 0..nn {
                let (ta, da) = (t[nodes[a]], dir.temperature[nodes[a]]);
                let la = lambda.map_or(0.0, |l| l[nodes[a]]);
                tq += n[a] * ta;
                dtq += n[a] * da;
                lq += n[a] * la;
                for k in 0..3 {
                    gt[k] += g[a][k] * ta;
                    gl[k] += g[a][k] * la;
                    gd[k] += g[a][k] * da;
                }
            }
            let motion = dx.as_ref().map(|dx| motion_gradient(&g[..nn], &dx[..nn]));
            f(&DirectionPoint {
                g: &g[..nn],
                n,
                w: table.weights[q] * det,
                tq,
                dtq,
                lq,
                gt,
                gl,
                gd,
                motion,
                tr: motion.map_or(0.0, |m| gradfem_kernel::trace(&m)),
            });
        }
    }

    /// The derivative along (δT, δp, δX) of (∂R/∂T)ᵀλ (per node, returned first) and of
    /// (∂R/∂p)ᵀλ (in the layout of [`ParameterVjp`]; its `temperature` entries, the fixed
    /// temperatures' products, are zero here: the fixed nodes' part of the first vector holds
    /// them). The derivative of (∂R/∂X)ᵀλ as `coords` requests comes third.
    /// `lambda` is given at every node (zero at fixed nodes).
    pub fn second_order_vjp(
        &self,
        t: &[f64],
        lambda: &[f64],
        dir: &ThermalDirection,
        coords: CoordinateRequest,
    ) -> (Vec<f64>, ParameterVjp, CoordinatePart) {
        self.second_order_vjp_with(t, lambda, dir, coords, true)
    }

    /// [`second_order_vjp`](Self::second_order_vjp) with every element through the dual-number
    /// path (the reference the closed form of the volume elements is tested against).
    pub fn second_order_vjp_dual(
        &self,
        t: &[f64],
        lambda: &[f64],
        dir: &ThermalDirection,
        coords: CoordinateRequest,
    ) -> (Vec<f64>, ParameterVjp, CoordinatePart) {
        self.second_order_vjp_with(t, lambda, dir, coords, false)
    }

    /// The volume element `e`'s second-order products in closed form: with
    /// L = ∫ k₀ f(T) ∇λ·∇T − Q λ and its derivative along the direction
    /// dL = ∫ (δk₀ f + k₀ f′ δT) ∇λ·∇T + k₀ f ∇λ·∇δT − δQ λ,
    /// ∂(dL)/∂T_a = ∫ [(δk₀ f′ + k₀ f″ δT) ∇λ·∇T + k₀ f′ ∇λ·∇δT] N_a + (δk₀ f + k₀ f′ δT) ∇λ·∇N_a
    /// and ∂(dL)/∂k₀ = ∫ f′ δT ∇λ·∇T + f ∇λ·∇δT (∂(dL)/∂Q = 0). f, f′, f″ from second-order
    /// dual numbers over the law.
    ///
    /// Moving nodes (G = ∇δX) add tr G · L's integrand (the volume's change) and, in
    /// ∇λ·∇T, the shape gradients' change −∇λᵀ(G + Gᵀ)∇T; their derivatives by T_a, k₀ and Q
    /// (−∫ tr G λ) follow the same way. Returns (∂(dL)/∂k₀, ∂(dL)/∂Q).
    fn volume_second_order(
        &self,
        e: usize,
        t: &[f64],
        lambda: &[f64],
        dir: &ThermalDirection,
        state: &mut [f64],
    ) -> (f64, f64) {
        let law = &self.regions[self.elem_tag[e] as usize].law;
        let (k0, dk0) = (self.k_elem[e], dir.k_elem[e]);
        if let Some(tet) = self.still_constant_tet4(e, dir) {
            // A constant k: state_a = V δk₀ ∇λ·g_a, ∂(dL)/∂k₀ = V ∇λ·∇δT, ∂(dL)/∂Q = 0.
            let (gl, gd) = (tet.gradient(lambda), tet.gradient(&dir.temperature));
            for (a, ga) in tet.g.iter().enumerate() {
                state[a] += tet.volume * dk0 * dot3(&gl, ga);
            }
            return (tet.volume * dot3(&gl, &gd), 0.0);
        }
        let (mut d_k0, mut d_q) = (0.0, 0.0);
        self.for_direction_points(e, t, Some(lambda), dir, |p| {
            let f = law.factor(num_dual::Dual2_64::new(p.tq, 1.0, 0.0));
            let (f0, f1, f2) = (f.re, f.v1, f.v2);
            let lt = dot3(&p.gl, &p.gt);
            let ld = dot3(&p.gl, &p.gd);
            // Moving nodes: tr G, (G + Gᵀ)∇λ and −∇λᵀ(G + Gᵀ)∇T.
            let mgl = p.motion.map_or([0.0; 3], |m| symmetric_times(&m, &p.gl));
            let (tr, lx) = (p.tr, -dot3(&mgl, &p.gt));
            let along_n = (dk0 * f1 + k0 * f2 * p.dtq) * lt + k0 * f1 * (ld + lx + tr * lt);
            let along_grad = dk0 * f0 + k0 * f1 * p.dtq + tr * k0 * f0;
            for (a, ga) in p.g.iter().enumerate() {
                let lg = dot3(&p.gl, ga);
                let moving = -k0 * f0 * dot3(&mgl, ga);
                state[a] += p.w * (along_n * p.n[a] + along_grad * lg + moving);
            }
            d_k0 += p.w * (f1 * p.dtq * lt + f0 * (ld + lx + tr * lt));
            d_q -= p.w * tr * p.lq;
        });
        (d_k0, d_q)
    }

    /// The coordinates' part of volume element `e`'s second-order products in closed form: for
    /// each pick D of `coords` (a node coordinate, or a morph field on the element's nodes),
    /// the mixed derivative of L along D (X alone) and along the direction δ. With G_D, G_δ
    /// the two motions' gradients, L's derivative along D is
    /// w [tr G_D (k₀ f S − Q λ) + k₀ f S_D], S = ∇λ·∇T and S_D = −∇λᵀ(G_D + G_Dᵀ)∇T; along δ,
    /// w changes by w tr G_δ, G_D by −G_D G_δ, ∇λ by −G_δᵀ∇λ, ∇T by ∇δT − G_δᵀ∇T.
    fn volume_coordinate_products(
        &self,
        e: usize,
        t: &[f64],
        lambda: &[f64],
        dir: &ThermalDirection,
        coords: CoordinateRequest,
        picks: &mut [f64],
    ) {
        let tag = self.elem_tag[e] as usize;
        let law = &self.regions[tag].law;
        let (k0, dk0) = (self.k_elem[e], dir.k_elem[e]);
        let (source, d_source) = (self.regions[tag].source, dir.source[tag]);
        let moving = coords.moving_picks(self.element_nodes(e));
        self.for_direction_points(e, t, Some(lambda), dir, |p| {
            let f = law.factor(Dual64::new(p.tq, 1.0));
            let (f0, f1) = (f.re, f.eps);
            let (gl, gt, lq, w) = (p.gl, p.gt, p.lq, p.w);
            let g_delta = p.motion.unwrap_or_default();
            let gdt = |v: &[f64; 3]| -> [f64; 3] {
                std::array::from_fn(|j| (0..3).map(|i| g_delta[i][j] * v[i]).sum())
            };
            let (gdt_l, gdt_t) = (gdt(&gl), gdt(&gt));
            // ∇λ and ∇T along δ.
            let d_gl = gdt_l.map(|v| -v);
            let d_gt: [f64; 3] = std::array::from_fn(|i| p.gd[i] - gdt_t[i]);
            let lt = dot3(&gl, &gt);
            let base = k0 * f0 * lt - source * lq;
            let s_delta = -dot3(&symmetric_times(&g_delta, &gl), &gt);
            let d_base = (dk0 * f0 + k0 * f1 * p.dtq) * lt + k0 * f0 * (dot3(&gl, &p.gd) + s_delta)
                - d_source * lq;
            let d_kf = dk0 * f0 + k0 * f1 * p.dtq;
            for (k, d) in &moving {
                let g_d = motion_gradient(p.g, d);
                let tr_d = gradfem_kernel::trace(&g_d);
                let m_gt = symmetric_times(&g_d, &gt);
                let s_d = -dot3(&gl, &m_gt);
                // G_D G_δ and the change of G_D + G_Dᵀ along δ.
                let gdg = gradfem_kernel::mat_mul(&g_d, &g_delta);
                let tr_gdg = gradfem_kernel::trace(&gdg);
                let d_m_gt = symmetric_times(&gdg, &gt).map(|v| -v);
                let d_s_d = -dot3(&d_gl, &m_gt)
                    - dot3(&gl, &d_m_gt)
                    - dot3(&gl, &symmetric_times(&g_d, &d_gt));
                picks[*k] += w
                    * (p.tr * (tr_d * base + k0 * f0 * s_d) - tr_gdg * base
                        + tr_d * d_base
                        + d_kf * s_d
                        + k0 * f0 * d_s_d);
            }
        });
    }

    fn second_order_vjp_with(
        &self,
        t: &[f64],
        lambda: &[f64],
        dir: &ThermalDirection,
        coords: CoordinateRequest,
        closed_form: bool,
    ) -> (Vec<f64>, ParameterVjp, CoordinatePart) {
        let n_el = self.n_elements();

        /// One element's products: per node (temperature), per kernel parameter, per
        /// coordinate pick (empty unless wanted).
        struct Local {
            state: [f64; MAX_NODES],
            params: [f64; 5],
            coords: Vec<f64>,
        }
        // Per element: ∂²(λᵀrₑ)/∂z ∂(direction) for its nodal temperatures, its parameters and
        // (when wanted) its node coordinates.
        let compute = |e: usize| {
            let nodes = self.element_nodes(e);
            let nn = nodes.len();
            let mut local = Local {
                state: [0.0; MAX_NODES],
                params: [0.0; 5],
                coords: vec![0.0; coords.n_picks(nodes)],
            };
            if nodes.iter().all(|&n| lambda[n] == 0.0) {
                return local;
            }
            let closed = closed_form && e < self.n_volume;
            if closed {
                let (d_k0, d_q) =
                    self.volume_second_order(e, t, lambda, dir, &mut local.state[..nn]);
                local.params[0] = d_k0;
                local.params[1] = d_q;
                if !local.coords.is_empty() {
                    self.volume_coordinate_products(e, t, lambda, dir, coords, &mut local.coords);
                }
                return local;
            }
            let pars = element_parameters(self, e, dir);
            let used = used_parameters(self, e);
            if e >= self.n_volume && pars.iter().all(|&(v, d)| v == 0.0 && d == 0.0) {
                return local;
            }
            let mut r = vec![HyperDual64::from(0.0); nn];
            // ε₁ carries the direction, ε₂ picks one variable (nn temperatures, then the five
            // kernel parameters, then the coordinate picks of `coords`): λᵀr's ε₁ε₂ part is
            // that variable's row of the Hessian of λᵀrₑ times the direction.
            let mut second = |pick: usize| -> f64 {
                let seed = |var: usize| if pick == var { 1.0 } else { 0.0 };
                let te: Vec<HyperDual64> = nodes
                    .iter()
                    .enumerate()
                    .map(|(a, &n)| HyperDual64::new(t[n], dir.temperature[n], seed(a), 0.0))
                    .collect();
                let x = hyper_dual_coordinates(
                    &self.coords,
                    nodes,
                    &dir.coords,
                    coords,
                    pick.checked_sub(nn + 5),
                );
                let p = |i: usize| HyperDual64::new(pars[i].0, pars[i].1, seed(nn + i), 0.0);
                self.element_residual_generic(e, &x, &te, p(0), p(1), p(2), p(3), p(4), &mut r);
                (0..nn).map(|b| r[b].eps1eps2 * lambda[nodes[b]]).sum()
            };
            if !closed {
                for (a, s) in local.state[..nn].iter_mut().enumerate() {
                    *s = second(a);
                }
                for i in used {
                    local.params[i] = second(nn + i);
                }
            }
            // The coordinate picks take the hyper-dual path (one pass each).
            for k in 0..local.coords.len() {
                if !coords.is_still(k, nodes) {
                    local.coords[k] = second(nn + 5 + k);
                }
            }
            local
        };
        let nb = self.boundaries.len();
        let mut state = vec![0.0; self.n_nodes()];
        let mut out = ParameterVjp {
            k_elem: vec![0.0; self.n_volume],
            source: vec![0.0; self.regions.len()],
            h: vec![0.0; nb],
            t_inf: vec![0.0; nb],
            q_in: vec![0.0; nb],
            temperature: vec![0.0; nb],
            coords: None,
        };
        let mut part = CoordinatePart::zeros(coords, self.n_nodes());
        // Summed in element order: the result does not depend on the thread count.
        for_each_element_ordered(n_el, compute, |e, local| {
            let nodes = self.element_nodes(e);
            for (&n, v) in nodes.iter().zip(&local.state) {
                state[n] += v;
            }
            part.add_element(nodes, &local.coords);
            let tag = self.elem_tag[e] as usize;
            let params = local.params;
            if e < self.n_volume {
                out.k_elem[e] += params[0];
                out.source[tag] += params[1];
            } else {
                out.h[tag] += params[2];
                out.t_inf[tag] += params[3];
                out.q_in[tag] += params[4];
            }
        });
        (state, out, part)
    }
}

/// The external source (a per-point heat source handed over by another field, the Joule
/// heat) with moving nodes: its residual part r_a = −Σ_q w_q det J(X) N_a(ξ_q) Q_q depends on
/// the coordinates through det J, so a direction that moves the nodes changes it, and the
/// source's and the coordinates' vector-Jacobian products change with both.
impl ThermalModel {
    /// The external source's part of volume element `e`'s residual, generic over the scalar
    /// (the reference of the closed forms, in the tests).
    #[cfg(test)]
    fn external_source_generic<D: num_dual::DualNum<Primitive = f64> + Copy>(
        &self,
        e: usize,
        x: &[[D; 3]],
        q: &[D],
        out: &mut [D],
    ) {
        let table = self.element_table(e);
        let nn = x.len();
        out[..nn].iter_mut().for_each(|o| *o = D::from(0.0));
        let mut g = [[D::from(0.0); 3]; crate::model::MAX_NODES];
        for (k, &qk) in q.iter().enumerate() {
            let det = gradfem_kernel::generic::physical_gradients(table.grad(k), x, &mut g[..nn]);
            let c = det * table.weights[k] * qk;
            for (o, &n) in out.iter_mut().zip(table.shape(k)) {
                *o -= c * n;
            }
        }
    }

    /// The external source's residual tangent at every node along a change `dq` of the
    /// source (per point; empty: none) and a motion `dx` of the nodes (per node; empty: none),
    /// at the source set on the model (zero without one).
    pub fn external_source_jvp_moving(&self, dq: &[f64], dx: &[[f64; 3]]) -> Vec<f64> {
        let mut out = vec![0.0; self.n_nodes()];
        let Some(source) = self.external_source() else { return out };
        let offsets = self.qp_offsets();
        // dr_a = −Σ_k w_k N_a (δQ_k + tr G_k Q_k), w_k = weight · det J.
        let compute = |e: usize| {
            let mut local = [0.0; crate::model::MAX_NODES];
            self.for_source_points(e, dx, |k, n, w, tr, _| {
                let g = offsets.start(e) + k;
                let c = w * (dq.get(g).copied().unwrap_or(0.0) + tr * source[g]);
                for (l, na) in local.iter_mut().zip(n) {
                    *l -= c * na;
                }
            });
            local
        };
        for_each_element_ordered(self.n_volume, compute, |e, local| {
            for (&n, v) in self.element_nodes(e).iter().zip(local) {
                out[n] += v;
            }
        });
        out
    }

    /// Volume element `e`'s points: `f(k, N, w, tr G_δ, G_δ)` with w = weight · det J and
    /// G_δ the gradient of the motion `dx` (per node; empty: none) there.
    fn for_source_points(
        &self,
        e: usize,
        dx: &[[f64; 3]],
        mut f: impl FnMut(usize, &[f64], f64, f64, &[[f64; 3]; 3]),
    ) {
        let nodes = self.element_nodes(e);
        let nn = nodes.len();
        let table = self.element_table(e);
        let x = self.element_coords(e);
        let motion = element_motion(nodes, dx);
        let mut g = [[0.0; 3]; crate::model::MAX_NODES];
        for k in 0..table.n_points() {
            let det = gradfem_mesh::geometry::physical_gradients_into(
                3,
                table.grad(k),
                &x[..nn],
                &mut g[..nn],
            );
            let m = motion.as_ref().map_or([[0.0; 3]; 3], |d| motion_gradient(&g[..nn], &d[..nn]));
            f(k, table.shape(k), table.weights[k] * det, gradfem_kernel::trace(&m), &m);
        }
    }

    /// [`external_source_jvp_moving`](Self::external_source_jvp_moving) by dual numbers over
    /// the generic source residual (the tests' reference).
    #[cfg(test)]
    fn external_source_jvp_moving_dual(&self, dq: &[f64], dx: &[[f64; 3]]) -> Vec<f64> {
        let mut out = vec![0.0; self.n_nodes()];
        let Some(source) = self.external_source() else { return out };
        let offsets = self.qp_offsets();
        let compute = |e: usize| {
            let nodes = self.element_nodes(e);
            let x = dual_coordinates(&self.coords, nodes, dx);
            let q: Vec<Dual64> = offsets
                .range(e)
                .map(|k| Dual64::new(source[k], dq.get(k).copied().unwrap_or(0.0)))
                .collect();
            let mut r = vec![Dual64::from(0.0); nodes.len()];
            self.external_source_generic(e, &x, &q, &mut r);
            r.iter().map(|v| v.eps).collect::<Vec<f64>>()
        };
        for_each_element_ordered(self.n_volume, compute, |e, local| {
            for (&n, v) in self.element_nodes(e).iter().zip(local) {
                out[n] += v;
            }
        });
        out
    }

    /// With λ (every node) held, the derivatives along (δQ, δX) of the external source's
    /// vector-Jacobian products: (∂R/∂Q)ᵀλ per point (first) and (∂R/∂X)ᵀλ as `coords`
    /// requests (second). Zero without a source set on the model.
    pub fn external_source_second_order(
        &self,
        lambda: &[f64],
        dq: &[f64],
        dx: &[[f64; 3]],
        coords: CoordinateRequest,
    ) -> (Vec<f64>, CoordinatePart) {
        let offsets = self.qp_offsets();
        let Some(source) = self.external_source() else {
            return self.source_products(coords, |_| Vec::new());
        };
        // λᵀr = −Σ_k w_k Q_k λ_k: along δ, ∂/∂Q_k gives −w_k tr G_δ λ_k, and a pick D
        // −Σ_k w_k λ_k (tr G_D δQ_k + (tr G_δ tr G_D − tr(G_D G_δ)) Q_k).
        let compute = |e: usize| {
            let nodes = self.element_nodes(e);
            let nn = nodes.len();
            let np = offsets.range(e).len();
            let mut out = vec![0.0; np + coords.n_picks(nodes)];
            if nodes.iter().all(|&n| lambda[n] == 0.0) {
                return out;
            }
            let picks = coords.moving_picks(nodes);
            let x = self.element_coords(e);
            let mut g = [[0.0; 3]; crate::model::MAX_NODES];
            self.for_source_points(e, dx, |k, n, w, tr, g_delta| {
                let p = offsets.start(e) + k;
                let lk: f64 = (0..nn).map(|a| n[a] * lambda[nodes[a]]).sum();
                out[k] = -w * tr * lk;
                if picks.is_empty() {
                    return;
                }
                let table = self.element_table(e);
                gradfem_mesh::geometry::physical_gradients_into(
                    3,
                    table.grad(k),
                    &x[..nn],
                    &mut g[..nn],
                );
                let dqk = dq.get(p).copied().unwrap_or(0.0);
                for (pick, d) in &picks {
                    let g_d = motion_gradient(&g[..nn], d);
                    let tr_d = gradfem_kernel::trace(&g_d);
                    let tr_dd = gradfem_kernel::trace(&gradfem_kernel::mat_mul(&g_d, g_delta));
                    out[np + pick] -= w * lk * (tr_d * dqk + (tr * tr_d - tr_dd) * source[p]);
                }
            });
            out
        };
        self.source_products(coords, compute)
    }

    /// The per-point part and the coordinates' part of the external source's products from
    /// `compute(e)`: element e's points' values, then its coordinate picks (empty: zero).
    /// Summed in element order: the result does not depend on the thread count.
    fn source_products(
        &self,
        coords: CoordinateRequest,
        compute: impl Fn(usize) -> Vec<f64> + Sync + Send,
    ) -> (Vec<f64>, CoordinatePart) {
        let offsets = self.qp_offsets();
        let mut per_point = vec![0.0; offsets.total()];
        let mut part = CoordinatePart::zeros(coords, self.n_nodes());
        for_each_element_ordered(self.n_volume, compute, |e, local| {
            if local.is_empty() {
                return;
            }
            let np = offsets.range(e).len();
            per_point[offsets.range(e)].copy_from_slice(&local[..np]);
            part.add_element(self.element_nodes(e), &local[np..]);
        });
        (per_point, part)
    }

    /// [`external_source_second_order`](Self::external_source_second_order) by hyper-dual
    /// numbers over the generic source residual, one pass per point and pick (the tests'
    /// reference).
    #[cfg(test)]
    fn external_source_second_order_dual(
        &self,
        lambda: &[f64],
        dq: &[f64],
        dx: &[[f64; 3]],
        coords: CoordinateRequest,
    ) -> (Vec<f64>, CoordinatePart) {
        let offsets = self.qp_offsets();
        let Some(source) = self.external_source() else {
            return self.source_products(coords, |_| Vec::new());
        };
        let compute = |e: usize| {
            let nodes = self.element_nodes(e);
            let nn = nodes.len();
            let np = offsets.range(e).len();
            let n_picks = np + coords.n_picks(nodes);
            let mut out = vec![0.0; n_picks];
            if nodes.iter().all(|&n| lambda[n] == 0.0) {
                return out;
            }
            let mut r = vec![HyperDual64::from(0.0); nn];
            for (pick, o) in out.iter_mut().enumerate() {
                if pick >= np && coords.is_still(pick - np, nodes) {
                    continue;
                }
                let seed = |var: usize| if var == pick { 1.0 } else { 0.0 };
                let q: Vec<HyperDual64> = (0..np)
                    .map(|k| {
                        let g = offsets.start(e) + k;
                        HyperDual64::new(source[g], dq.get(g).copied().unwrap_or(0.0), seed(k), 0.0)
                    })
                    .collect();
                let x =
                    hyper_dual_coordinates(&self.coords, nodes, dx, coords, pick.checked_sub(np));
                self.external_source_generic(e, &x, &q, &mut r);
                *o = (0..nn).map(|b| r[b].eps1eps2 * lambda[nodes[b]]).sum();
            }
            out
        };
        self.source_products(coords, compute)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BcKind, BcSpec, ConductivityLaw, RegionSpec};
    use gradfem_mesh::CellType;
    use gradfem_mesh::generate::{BoxSpec, box_mesh};

    /// A box with a nonlinear conductivity, a source, a fixed face, convection and a flux.
    fn model() -> ThermalModel {
        model_on(CellType::Hex8, [3, 2, 2])
    }

    /// [`model`] on another mesh of the same box.
    fn model_on(cell_type: CellType, divisions: [usize; 3]) -> ThermalModel {
        let mesh =
            box_mesh(&BoxSpec { origin: [0.0; 3], lengths: [1.0, 0.6, 0.4], divisions, cell_type });
        let law = ConductivityLaw::Polynomial { t_ref: 300.0, coefficients: vec![2e-3, 1e-5] };
        ThermalModel::new(
            &mesh,
            &[RegionSpec { group: "domain".into(), k0: 3.0, source: 50.0, law }],
            &[
                BcSpec { group: "xmin".into(), kind: BcKind::Temperature { value: 300.0 } },
                BcSpec { group: "xmax".into(), kind: BcKind::Convection { h: 20.0, t_inf: 290.0 } },
                BcSpec { group: "ymax".into(), kind: BcKind::HeatFlux { q_in: 40.0 } },
            ],
        )
        .unwrap()
    }

    /// A field of temperatures and a direction with every part non-zero.
    fn state_and_direction(m: &ThermalModel) -> (Vec<f64>, Vec<f64>, ThermalDirection) {
        let n = m.n_nodes();
        let t: Vec<f64> = (0..n).map(|i| 300.0 + 7.0 * ((i as f64) * 0.37).sin()).collect();
        let lambda: Vec<f64> = (0..n).map(|i| ((i as f64) * 0.91).cos()).collect();
        let mut d = ThermalDirection::zeros(m);
        for (i, v) in d.temperature.iter_mut().enumerate() {
            *v = ((i as f64) * 1.3).sin();
        }
        for (i, v) in d.k_elem.iter_mut().enumerate() {
            *v = 0.1 * ((i as f64) * 0.7).cos();
        }
        d.source.fill(3.0);
        d.h[1] = 1.5;
        d.t_inf[1] = -2.0;
        d.q_in[2] = 4.0;
        (t, lambda, d)
    }

    /// Temperatures, an adjoint and a direction (temperatures and conductivities) for any model.
    fn state_and_direction_of(m: &ThermalModel) -> (Vec<f64>, Vec<f64>, ThermalDirection) {
        let n = m.n_nodes();
        let t: Vec<f64> = (0..n).map(|i| 300.0 + 7.0 * ((i as f64) * 0.37).sin()).collect();
        let lambda: Vec<f64> = (0..n).map(|i| ((i as f64) * 0.91).cos()).collect();
        let mut d = ThermalDirection::zeros(m);
        for (i, v) in d.temperature.iter_mut().enumerate() {
            *v = ((i as f64) * 1.3).sin();
        }
        for (i, v) in d.k_elem.iter_mut().enumerate() {
            *v = 0.1 * ((i as f64) * 0.7).cos();
        }
        (t, lambda, d)
    }

    /// The model with its parameters moved by `s` along the direction's parameter part.
    fn moved(m: &ThermalModel, d: &ThermalDirection, s: f64) -> ThermalModel {
        let mut m2 = m.clone();
        for (k, dk) in m2.k_elem.iter_mut().zip(&d.k_elem) {
            *k += s * dk;
        }
        for (r, dq) in m2.regions.iter_mut().zip(&d.source) {
            r.source += s * dq;
        }
        for (b, bc) in m2.boundaries.iter_mut().enumerate() {
            match &mut bc.kind {
                BcKind::Convection { h, t_inf } => {
                    *h += s * d.h[b];
                    *t_inf += s * d.t_inf[b];
                }
                BcKind::HeatFlux { q_in } => *q_in += s * d.q_in[b],
                BcKind::Temperature { .. } => {}
            }
        }
        m2
    }

    fn residual(m: &ThermalModel, t: &[f64]) -> Vec<f64> {
        let mut r = vec![0.0; m.n_nodes()];
        for e in 0..m.n_elements() {
            let nodes = m.element_nodes(e);
            let mut fe = vec![0.0; nodes.len()];
            m.element_residual_tangent(e, t, None, &mut fe);
            for (&n, v) in nodes.iter().zip(&fe) {
                r[n] += v;
            }
        }
        r
    }

    /// (∂R/∂T)ᵀλ at every node, by columns of the element tangents.
    fn kt_lambda(m: &ThermalModel, t: &[f64], lambda: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; m.n_nodes()];
        for e in 0..m.n_elements() {
            let nodes = m.element_nodes(e);
            let nn = nodes.len();
            let (mut ke, mut fe) = (vec![0.0; nn * nn], vec![0.0; nn]);
            m.element_residual_tangent(e, t, Some(&mut ke), &mut fe);
            for a in 0..nn {
                for b in 0..nn {
                    out[nodes[b]] += ke[a * nn + b] * lambda[nodes[a]];
                }
            }
        }
        out
    }

    fn shifted(t: &[f64], d: &[f64], s: f64) -> Vec<f64> {
        t.iter().zip(d).map(|(a, b)| a + s * b).collect()
    }

    #[test]
    fn residual_jvp_matches_central_differences() {
        let m = model();
        let (t, _, d) = state_and_direction(&m);
        let jvp = m.residual_jvp(&t, &d);
        let h = 1e-5;
        let rp = residual(&moved(&m, &d, h), &shifted(&t, &d.temperature, h));
        let rm = residual(&moved(&m, &d, -h), &shifted(&t, &d.temperature, -h));
        let scale = jvp.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        for i in 0..jvp.len() {
            let fd = (rp[i] - rm[i]) / (2.0 * h);
            assert!((jvp[i] - fd).abs() <= 1e-6 * scale, "node {i}: {} vs {fd}", jvp[i]);
        }
    }

    #[test]
    fn residual_jvp_closed_form_matches_dual_numbers() {
        let m = model();
        let (t, _, d) = state_and_direction(&m);
        // Nodes still, and moving.
        for d in [d.clone(), with_coordinates(&m, d)] {
            let a = m.residual_jvp(&t, &d);
            let b = m.residual_jvp_dual(&t, &d);
            let scale = b.iter().fold(0.0f64, |s, v| s.max(v.abs()));
            for i in 0..a.len() {
                assert!((a[i] - b[i]).abs() <= 1e-12 * scale, "node {i}: {} vs {}", a[i], b[i]);
            }
        }
    }

    #[test]
    fn second_order_vjp_matches_differences_of_the_first_order_products() {
        let m = model();
        let (t, lambda, d) = state_and_direction(&m);
        let (state, params, _) = m.second_order_vjp(&t, &lambda, &d, CoordinateRequest::None);
        let want = VjpRequest {
            conductivity: true,
            source: true,
            boundary: true,
            temperature: false,
            coords: false,
        };
        // (∂R/∂T)ᵀλ by columns of the element tangents, at a moved state and parameters.
        let h = 1e-5;
        let (mp, mm) = (moved(&m, &d, h), moved(&m, &d, -h));
        let (tp, tm) = (shifted(&t, &d.temperature, h), shifted(&t, &d.temperature, -h));
        let (sp, sm) = (kt_lambda(&mp, &tp, &lambda), kt_lambda(&mm, &tm, &lambda));
        let scale = state.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        assert!(scale > 0.0);
        for i in 0..state.len() {
            let fd = (sp[i] - sm[i]) / (2.0 * h);
            assert!((state[i] - fd).abs() <= 1e-5 * scale, "node {i}: {} vs {fd}", state[i]);
        }
        let (vp, vm) = (mp.parameter_vjp(&tp, &lambda, want), mm.parameter_vjp(&tm, &lambda, want));
        let check = |name: &str, got: &[f64], p: &[f64], q: &[f64]| {
            let scale = got.iter().fold(1e-12f64, |a, v| a.max(v.abs()));
            for i in 0..got.len() {
                let fd = (p[i] - q[i]) / (2.0 * h);
                assert!((got[i] - fd).abs() <= 1e-5 * scale, "{name}[{i}]: {} vs {fd}", got[i]);
            }
        };
        check("k_elem", &params.k_elem, &vp.k_elem, &vm.k_elem);
        check("source", &params.source, &vp.source, &vm.source);
        check("h", &params.h, &vp.h, &vm.h);
        check("t_inf", &params.t_inf, &vp.t_inf, &vm.t_inf);
        check("q_in", &params.q_in, &vp.q_in, &vm.q_in);
        assert!(params.h[1] != 0.0 && params.t_inf[1] != 0.0 && params.k_elem[0] != 0.0);
    }

    /// A direction that also moves the nodes (a smooth, small field), with the model moved by
    /// `s` along all of it.
    fn with_coordinates(m: &ThermalModel, mut d: ThermalDirection) -> ThermalDirection {
        d.coords = m
            .coords
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let f = i as f64;
                [
                    0.03 * (f * 0.7 + p[1]).sin(),
                    0.02 * (f * 1.1).cos(),
                    0.025 * (f * 0.3 + p[0]).sin(),
                ]
            })
            .collect();
        d
    }

    fn moved_with_coordinates(m: &ThermalModel, d: &ThermalDirection, s: f64) -> ThermalModel {
        let mut m2 = moved(m, d, s);
        for (p, dp) in m2.coords.iter_mut().zip(&d.coords) {
            for i in 0..3 {
                p[i] += s * dp[i];
            }
        }
        m2
    }

    /// With a direction that moves the nodes, the residual's tangent and the derivatives of
    /// (∂R/∂T)ᵀλ, (∂R/∂p)ᵀλ and (∂R/∂X)ᵀλ match central differences (curved-law volume
    /// cells, convection and heat-flux facets whose areas change).
    #[rstest::rstest]
    #[case(CellType::Hex8)]
    #[case(CellType::Tet10)]
    fn shape_directions_match_central_differences(#[case] cell: CellType) {
        let m = model_on(cell, [2, 2, 1]);
        let (t, lambda, d) = state_and_direction(&m);
        let d = with_coordinates(&m, d);
        let h = 1e-6;
        let (mp, mm) = (moved_with_coordinates(&m, &d, h), moved_with_coordinates(&m, &d, -h));
        let (tp, tm) = (shifted(&t, &d.temperature, h), shifted(&t, &d.temperature, -h));
        let close = |name: &str, got: &[f64], fd: &[f64], tol: f64| {
            let scale = got.iter().fold(1e-300f64, |a, v| a.max(v.abs()));
            for i in 0..got.len() {
                assert!(
                    (got[i] - fd[i]).abs() <= tol * scale,
                    "{name}[{i}]: {} vs {}",
                    got[i],
                    fd[i]
                );
            }
        };
        let diff = |p: &[f64], q: &[f64]| -> Vec<f64> {
            p.iter().zip(q).map(|(a, b)| (a - b) / (2.0 * h)).collect()
        };
        let jvp = m.residual_jvp(&t, &d);
        close("residual", &jvp, &diff(&residual(&mp, &tp), &residual(&mm, &tm)), 1e-6);
        let want = VjpRequest {
            conductivity: true,
            source: true,
            boundary: true,
            temperature: false,
            coords: true,
        };
        let (state, params, part) = m.second_order_vjp(&t, &lambda, &d, CoordinateRequest::Every);
        close(
            "state",
            &state,
            &diff(&kt_lambda(&mp, &tp, &lambda), &kt_lambda(&mm, &tm, &lambda)),
            1e-5,
        );
        let (vp, vm) = (mp.parameter_vjp(&tp, &lambda, want), mm.parameter_vjp(&tm, &lambda, want));
        close("k_elem", &params.k_elem, &diff(&vp.k_elem, &vm.k_elem), 1e-5);
        close("h", &params.h, &diff(&vp.h, &vm.h), 1e-5);
        close("q_in", &params.q_in, &diff(&vp.q_in, &vm.q_in), 1e-5);
        let flat = |c: &Option<Vec<[f64; 3]>>| -> Vec<f64> {
            c.as_ref().unwrap().iter().flatten().copied().collect()
        };
        let every = part.every().unwrap().to_vec();
        close(
            "coords",
            &flat(&Some(every.clone())),
            &diff(&flat(&vp.coords), &flat(&vm.coords)),
            1e-5,
        );
        // Along node fields: the per-node part contracted with them.
        let fields = vec![d.coords.clone(), m.coords.iter().map(|p| [0.0, p[0], 0.0]).collect()];
        let (_, _, along) = m.second_order_vjp(&t, &lambda, &d, CoordinateRequest::Along(&fields));
        let CoordinatePart::Along(along) = along else { panic!("a part along the fields") };
        for (k, f) in fields.iter().enumerate() {
            let c: f64 =
                every.iter().zip(f).map(|(a, b)| a[0] * b[0] + a[1] * b[1] + a[2] * b[2]).sum();
            assert!(
                (along[k] - c).abs() <= 1e-12 * c.abs().max(1e-300),
                "field {k}: {} vs {c}",
                along[k]
            );
        }
        // Without moving nodes and without coordinates wanted, the closed form still holds.
        let (s0, _, _) = m.second_order_vjp(
            &t,
            &lambda,
            &ThermalDirection { coords: Vec::new(), ..d.clone() },
            CoordinateRequest::None,
        );
        let (s1, _, p1) = m.second_order_vjp_dual(
            &t,
            &lambda,
            &ThermalDirection { coords: Vec::new(), ..d },
            CoordinateRequest::Every,
        );
        close("closed form", &s0, &s1, 1e-12);
        assert!(p1.every().unwrap().iter().flatten().any(|v| *v != 0.0));
    }

    /// An external per-point source with moving nodes: the residual's tangent and the
    /// derivatives of (∂R/∂Q)ᵀλ and (∂R/∂X)ᵀλ along (δQ, δX) match central differences of the
    /// whole residual and of the first-order products.
    #[test]
    fn external_source_with_moving_nodes_matches_central_differences() {
        let mut m = model();
        let n_points = m.qp_offsets().total();
        let q: Vec<f64> = (0..n_points).map(|k| 40.0 + 10.0 * ((k as f64) * 0.3).sin()).collect();
        let dq: Vec<f64> = (0..n_points).map(|k| 5.0 * ((k as f64) * 0.8).cos()).collect();
        m.set_external_source(Some(q.clone()));
        let (t, lambda, _) = state_and_direction(&m);
        let d = with_coordinates(&m, ThermalDirection::zeros(&m));
        let h = 1e-6;
        let at = |s: f64| {
            let mut m2 = moved_with_coordinates(&m, &d, s);
            m2.set_external_source(Some(q.iter().zip(&dq).map(|(a, b)| a + s * b).collect()));
            m2
        };
        let (mp, mm) = (at(h), at(-h));
        let close = |name: &str, got: &[f64], p: &[f64], q: &[f64]| {
            let scale = got.iter().fold(1e-300f64, |a, v| a.max(v.abs()));
            for i in 0..got.len() {
                let fd = (p[i] - q[i]) / (2.0 * h);
                assert!((got[i] - fd).abs() <= 1e-6 * scale, "{name}[{i}]: {} vs {fd}", got[i]);
            }
        };
        let mut jvp = m.residual_jvp(&t, &d);
        let ext = m.external_source_jvp_moving(&dq, &d.coords);
        assert!(ext.iter().any(|v| *v != 0.0));
        jvp.iter_mut().zip(&ext).for_each(|(a, b)| *a += b);
        close("residual", &jvp, &residual(&mp, &t), &residual(&mm, &t));
        let want = VjpRequest {
            conductivity: false,
            source: false,
            boundary: false,
            temperature: false,
            coords: true,
        };
        let (per_point, per_node) =
            m.external_source_second_order(&lambda, &dq, &d.coords, CoordinateRequest::Every);
        close(
            "source",
            &per_point,
            &mp.external_source_vjp(&lambda),
            &mm.external_source_vjp(&lambda),
        );
        let (_, _, own) = m.second_order_vjp(&t, &lambda, &d, CoordinateRequest::Every);
        let total: Vec<f64> = own
            .every()
            .unwrap()
            .iter()
            .zip(per_node.every().unwrap())
            .flat_map(|(a, b)| [a[0] + b[0], a[1] + b[1], a[2] + b[2]])
            .collect();
        let flat = |m: &ThermalModel| -> Vec<f64> {
            m.parameter_vjp(&t, &lambda, want).coords.unwrap().into_iter().flatten().collect()
        };
        close("coords", &total, &flat(&mp), &flat(&mm));
    }

    /// The external source's tangent and second-order products in closed form equal the
    /// dual-number passes over its generic residual, per node and along a field.
    #[test]
    fn external_source_closed_forms_equal_the_dual_numbers() {
        let mut m = model();
        let n_points = m.qp_offsets().total();
        let q: Vec<f64> = (0..n_points).map(|k| 40.0 + 10.0 * ((k as f64) * 0.3).sin()).collect();
        let dq: Vec<f64> = (0..n_points).map(|k| 5.0 * ((k as f64) * 0.8).cos()).collect();
        m.set_external_source(Some(q));
        let (_, lambda, _) = state_and_direction(&m);
        let d = with_coordinates(&m, ThermalDirection::zeros(&m));
        let close = |what: &str, a: &[f64], b: &[f64]| {
            let scale = b.iter().fold(1e-300f64, |s, v| s.max(v.abs()));
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() <= 1e-12 * scale, "{what}: {x} vs {y}");
            }
        };
        close(
            "jvp",
            &m.external_source_jvp_moving(&dq, &d.coords),
            &m.external_source_jvp_moving_dual(&dq, &d.coords),
        );
        let fields = vec![d.coords.clone()];
        for request in [CoordinateRequest::Every, CoordinateRequest::Along(&fields)] {
            let (p1, c1) = m.external_source_second_order(&lambda, &dq, &d.coords, request);
            let (p2, c2) = m.external_source_second_order_dual(&lambda, &dq, &d.coords, request);
            close("per point", &p1, &p2);
            match (c1, c2) {
                (CoordinatePart::Every(a), CoordinatePart::Every(b)) => {
                    let flat = |v: Vec<[f64; 3]>| v.into_iter().flatten().collect::<Vec<_>>();
                    close("X", &flat(a), &flat(b));
                }
                (CoordinatePart::Along(a), CoordinatePart::Along(b)) => close("along", &a, &b),
                _ => panic!("the same kind of coordinate part"),
            }
        }
    }

    use crate::VjpRequest;

    /// The closed form of the volume elements equals the dual-number path, for tet4, tet10 and
    /// hex8 cells with a nonlinear law, and for tet4 with a constant one (the written-out
    /// affine path).
    #[rstest::rstest]
    #[case(CellType::Tet4, false)]
    #[case(CellType::Tet4, true)]
    #[case(CellType::Tet10, false)]
    #[case(CellType::Hex8, false)]
    fn closed_form_equals_the_dual_numbers(#[case] cell: CellType, #[case] constant: bool) {
        let mesh = box_mesh(&BoxSpec {
            origin: [0.0; 3],
            lengths: [1.0, 0.6, 0.4],
            divisions: [2, 2, 1],
            cell_type: cell,
        });
        let law = if constant {
            ConductivityLaw::Constant
        } else {
            ConductivityLaw::Polynomial { t_ref: 300.0, coefficients: vec![2e-3, 1e-5] }
        };
        let m = ThermalModel::new(
            &mesh,
            &[RegionSpec { group: "domain".into(), k0: 3.0, source: 50.0, law }],
            &[BcSpec { group: "xmax".into(), kind: BcKind::Convection { h: 20.0, t_inf: 290.0 } }],
        )
        .unwrap();
        let (t, lambda, mut d) = state_and_direction_of(&m);
        d.h[0] = 1.5;
        let close = |what: &str, a: &[f64], b: &[f64]| {
            let scale = b.iter().fold(1e-300f64, |s, v| s.max(v.abs()));
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() <= 1e-12 * scale, "{what}: {x} vs {y}");
            }
        };
        close("residual jvp", &m.residual_jvp(&t, &d), &m.residual_jvp_dual(&t, &d));
        let (s1, p1, _) = m.second_order_vjp(&t, &lambda, &d, CoordinateRequest::None);
        let (s2, p2, _) = m.second_order_vjp_dual(&t, &lambda, &d, CoordinateRequest::None);
        close("state", &s1, &s2);
        close("k", &p1.k_elem, &p2.k_elem);
        assert_eq!(p1.source, p2.source);
        assert_eq!(p1.h, p2.h);
        // Moving nodes, with the coordinates' products per node and along fields.
        let d = with_coordinates(&m, d);
        let fields = vec![d.coords.clone()];
        for request in
            [CoordinateRequest::None, CoordinateRequest::Every, CoordinateRequest::Along(&fields)]
        {
            let (s1, p1, c1) = m.second_order_vjp(&t, &lambda, &d, request);
            let (s2, p2, c2) = m.second_order_vjp_dual(&t, &lambda, &d, request);
            close("state (moving)", &s1, &s2);
            close("k (moving)", &p1.k_elem, &p2.k_elem);
            close("source (moving)", &p1.source, &p2.source);
            close("h (moving)", &p1.h, &p2.h);
            assert!(p1.source[0] != 0.0);
            match (c1, c2) {
                (CoordinatePart::None, CoordinatePart::None) => {}
                (CoordinatePart::Every(a), CoordinatePart::Every(b)) => {
                    let flat = |v: &[[f64; 3]]| v.iter().flatten().copied().collect::<Vec<_>>();
                    close("coords", &flat(&a), &flat(&b));
                }
                (CoordinatePart::Along(a), CoordinatePart::Along(b)) => close("along", &a, &b),
                _ => panic!("the same kind of coordinate part"),
            }
        }
    }
}
