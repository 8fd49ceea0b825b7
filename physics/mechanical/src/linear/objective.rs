//! Objectives on the displacement field, with their derivatives with respect to the full
//! displacement, the node coordinates and (explicitly) the per-element E and ν.
//!
//! - point displacement d·u(x_p) = Σ N_a(ξ_p) d·u_a (ξ_p from the inverse isoparametric map);
//!   the physical point is fixed, so ∂/∂X_b = −N_b(ξ_p) (∇uᵀ d)(x_p);
//! - average displacement over a volume or surface group, d·ū = ∫_g d·u / ∫_g 1;
//! - compliance fᵀu, f the consistent load vector of body forces, tractions and pressures
//!   ([`LinearElasticModel::load_vector`]), summed over every dof (thermal strains and
//!   prescribed displacements are not loads here). Its explicit derivative with respect to a
//!   load parameter p is uᵀ ∂f/∂p = −(λ = u)ᵀ ∂R/∂p: the `body_force`, `traction` and
//!   `pressure` entries of [`LinearElasticModel::parameter_vjp`] called with `lambda = u`,
//!   negated (not included in [`ObjectiveEval`]);
//! - smooth maximum of von Mises over a volume group: the p-norm mean
//!   M = (∫ σ_vm^p dΩ / ∫ dΩ)^{1/p}, which tends to max σ_vm as p grows. With
//!   s = dev σ = 2μ dev ε(u) (the isotropic thermal strain has no deviator, so M does not
//!   depend on T explicitly), ∂σ_vm/∂u_ai = (3μ/σ_vm) (s ∇N_a)_i and ∂σ_vm/∂μ = σ_vm/μ.

use gradfem_kernel::{
    CoordinatePart, CoordinateRequest, hyper_dual_coordinates, point_sample_along,
};
use gradfem_mesh::geometry;
use gradfem_mesh::reference::{shape_functions_into, shape_gradients_into, shape_hessians_into};
use num_dual::{Dual64, HyperDual64};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{LinearElasticModel, MechanicalError, lame_derivatives};

/// One kind of objective.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ObjectiveKind {
    /// d · u(x) at a point, `direction` d (not normalised).
    PointDisplacement { point: [f64; 3], direction: [f64; 3] },
    /// d · ū, the average over a volume group (`"*"`: the whole model) or a surface group.
    AverageDisplacement { group: String, direction: [f64; 3] },
    /// fᵀu with f the consistent load vector (body force, traction, pressure).
    Compliance,
    /// (∫ σ_vm^p / ∫ 1)^{1/p} over a volume group.
    VonMisesPNorm { group: String, p: f64 },
    /// Σ wₖ uₖ over the dofs (`3·n_nodes` weights, node-major): a cotangent paired with the
    /// displacement field, whose gradient is the vector-Jacobian product of the whole field.
    Linear { weights: Vec<f64> },
}

/// A weighted objective term.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ObjectiveTerm {
    pub weight: f64,
    #[serde(flatten)]
    pub kind: ObjectiveKind,
}

/// Value and derivatives of a weighted sum of objective terms.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectiveEval {
    pub value: f64,
    /// Value of each term (unweighted).
    pub terms: Vec<f64>,
    /// ∂J/∂u at every dof (`3·n_nodes`).
    pub d_displacement: Vec<f64>,
    /// ∂J/∂X at every node (when requested).
    pub d_coords: Option<Vec<[f64; 3]>>,
    /// Explicit ∂J/∂Eₑ per volume element (von Mises terms).
    pub d_young_elem: Vec<f64>,
    /// Explicit ∂J/∂νₑ per volume element (von Mises terms).
    pub d_poisson_elem: Vec<f64>,
}

/// Where a point lies: element, reference coordinates and shape-function values.
#[derive(Clone, Debug, PartialEq)]
pub struct PointLocation {
    pub element: usize,
    pub xi: [f64; 3],
    pub shape: Vec<f64>,
}

/// Locate a point in the volume elements (inverse isoparametric map by Newton); points within
/// a small tolerance outside a cell count as inside.
pub fn locate(
    model: &LinearElasticModel,
    point: [f64; 3],
) -> Result<PointLocation, MechanicalError> {
    let found = (0..model.n_volume_elements())
        .into_par_iter()
        .find_first(|&e| locate_in(model, e, point).is_some());
    let Some(e) = found else {
        return Err(MechanicalError::PointOutside { point });
    };
    let xi = locate_in(model, e, point).expect("found above");
    let ct = model.element_cell_type(e);
    let mut shape = vec![0.0; ct.n_nodes()];
    shape_functions_into(ct, xi, &mut shape);
    Ok(PointLocation { element: e, xi, shape })
}

fn locate_in(model: &LinearElasticModel, e: usize, p: [f64; 3]) -> Option<[f64; 3]> {
    geometry::reference_coordinates(model.element_cell_type(e), &model.element_coordinates(e), p)
}

/// Physical gradient ∇u (∇u_ij = ∂u_i/∂x_j) at a located point.
fn point_gradient(model: &LinearElasticModel, loc: &PointLocation, u: &[f64]) -> [[f64; 3]; 3] {
    let ct = model.element_cell_type(loc.element);
    let nodes = model.element_nodes(loc.element);
    let mut dn = vec![[0.0; 3]; ct.n_nodes()];
    shape_gradients_into(ct, loc.xi, &mut dn);
    let x = model.element_coordinates(loc.element);
    let mut g = vec![[0.0; 3]; ct.n_nodes()];
    geometry::physical_gradients_into(3, &dn, &x, &mut g);
    let mut gu = [[0.0; 3]; 3];
    for (a, &n) in nodes.iter().enumerate() {
        for i in 0..3 {
            for j in 0..3 {
                gu[i][j] += u[3 * n + i] * g[a][j];
            }
        }
    }
    gu
}

/// The stress `[xx, yy, zz, yz, xz, xy]` at a point, evaluated in the cell that contains it
/// from ∇u and T at the point (no recovery), for probes such as NAFEMS LE11's point A.
pub fn point_stress(
    model: &LinearElasticModel,
    u: &[f64],
    point: [f64; 3],
) -> Result<[f64; 6], MechanicalError> {
    let loc = locate(model, point)?;
    let gu = point_gradient(model, &loc, u);
    let p = model.element_params(loc.element);
    let theta = match model.temperature() {
        Some(t) => {
            let tq: f64 = model
                .element_nodes(loc.element)
                .iter()
                .zip(&loc.shape)
                .map(|(&n, s)| s * t[n])
                .sum();
            p.alpha * (tq - p.t_ref)
        }
        None => 0.0,
    };
    Ok(super::to_voigt(&super::stress_of(&gu, theta, p.lambda, p.mu)))
}

/// Accumulators of one term.
struct Acc<'a> {
    w: f64,
    du: &'a mut [f64],
    dx: Option<&'a mut Vec<[f64; 3]>>,
}

fn average_volume(
    model: &LinearElasticModel,
    els: &[usize],
    dir: [f64; 3],
    u: &[f64],
    acc: Acc,
) -> f64 {
    // Per element: ∫ d·u, ∫ 1, ∂/∂u_a (per node, along d), ∂/∂X_b of both integrals.
    type Local = (f64, f64, Vec<f64>, Vec<[f64; 3]>, Vec<[f64; 3]>);
    let locals: Vec<Local> = els
        .par_iter()
        .map(|&e| {
            let tab = model.element_table(e);
            let nodes = model.element_nodes(e);
            let nn = nodes.len();
            let x = model.element_coordinates(e);
            let mut g = vec![[0.0; 3]; nn];
            let (mut val, mut vol) = (0.0, 0.0);
            let mut dn = vec![0.0; nn];
            let mut dvx = vec![[0.0; 3]; nn];
            let mut dxv = vec![[0.0; 3]; nn];
            for q in 0..tab.n_points() {
                let det = geometry::physical_gradients_into(3, tab.grad(q), &x, &mut g);
                let w = tab.weights[q] * det;
                let s = tab.shape(q);
                let uq: f64 = (0..nn)
                    .map(|a| s[a] * (0..3).map(|i| dir[i] * u[3 * nodes[a] + i]).sum::<f64>())
                    .sum();
                val += w * uq;
                vol += w;
                for a in 0..nn {
                    dn[a] += w * s[a];
                    for k in 0..3 {
                        dxv[a][k] += w * uq * g[a][k];
                        dvx[a][k] += w * g[a][k];
                    }
                }
            }
            (val, vol, dn, dxv, dvx)
        })
        .collect();
    let val: f64 = locals.iter().map(|l| l.0).sum();
    let vol: f64 = locals.iter().map(|l| l.1).sum();
    let avg = val / vol;
    let Acc { w, du, mut dx } = acc;
    for (l, &e) in locals.iter().zip(els) {
        for (a, &n) in model.element_nodes(e).iter().enumerate() {
            for i in 0..3 {
                du[3 * n + i] += w * l.2[a] * dir[i] / vol;
            }
            if let Some(dx) = dx.as_deref_mut() {
                for k in 0..3 {
                    dx[n][k] += w * (l.3[a][k] - avg * l.4[a][k]) / vol;
                }
            }
        }
    }
    avg
}

fn average_surface(
    model: &LinearElasticModel,
    cells: &[super::SurfaceCell],
    dir: [f64; 3],
    u: &[f64],
    acc: Acc,
) -> f64 {
    // Integral of d·u and area of one facet, generic over the coordinates' scalar.
    let integrals = |c: &super::SurfaceCell, x: &[[Dual64; 3]]| -> (Dual64, Dual64, Vec<f64>) {
        let tab = model.block_table(c.block);
        let nn = c.nodes.len();
        let (mut val, mut area) = (Dual64::from(0.0), Dual64::from(0.0));
        let mut dn = vec![0.0; nn];
        for q in 0..tab.n_points() {
            let da = gradfem_kernel::generic::area_density(tab.grad(q), x) * tab.weights[q];
            let s = tab.shape(q);
            let uq: f64 = (0..nn)
                .map(|a| s[a] * (0..3).map(|i| dir[i] * u[3 * c.nodes[a] + i]).sum::<f64>())
                .sum();
            val += da * uq;
            area += da;
            for a in 0..nn {
                dn[a] += da.re * s[a];
            }
        }
        (val, area, dn)
    };
    let with_x = acc.dx.is_some();
    type Local = (f64, f64, Vec<f64>, Vec<[f64; 3]>, Vec<[f64; 3]>);
    let locals: Vec<Local> = cells
        .par_iter()
        .map(|c| {
            let nn = c.nodes.len();
            let mut x: Vec<[Dual64; 3]> =
                c.nodes.iter().map(|&n| model.coords[n].map(Dual64::from)).collect();
            let (val, area, dn) = integrals(c, &x);
            let (mut dxv, mut dxa) = (vec![[0.0; 3]; nn], vec![[0.0; 3]; nn]);
            if with_x {
                for a in 0..nn {
                    for k in 0..3 {
                        x[a][k].eps = 1.0;
                        let (v, ar, _) = integrals(c, &x);
                        x[a][k].eps = 0.0;
                        dxv[a][k] = v.eps;
                        dxa[a][k] = ar.eps;
                    }
                }
            }
            (val.re, area.re, dn, dxv, dxa)
        })
        .collect();
    let val: f64 = locals.iter().map(|l| l.0).sum();
    let area: f64 = locals.iter().map(|l| l.1).sum();
    let avg = val / area;
    let Acc { w, du, mut dx } = acc;
    for (l, c) in locals.iter().zip(cells) {
        for (a, &n) in c.nodes.iter().enumerate() {
            for i in 0..3 {
                du[3 * n + i] += w * l.2[a] * dir[i] / area;
            }
            if let Some(dx) = dx.as_deref_mut() {
                for k in 0..3 {
                    dx[n][k] += w * (l.3[a][k] - avg * l.4[a][k]) / area;
                }
            }
        }
    }
    avg
}

/// The von Mises p-norm term; writes ∂/∂u, ∂/∂X and the explicit ∂/∂E, ∂/∂ν.
fn von_mises_pnorm(
    model: &LinearElasticModel,
    els: &[usize],
    p: f64,
    u: &[f64],
    acc: Acc,
    d_young: &mut [f64],
    d_poisson: &mut [f64],
) -> f64 {
    // Per element: S_e = ∫ vm^p, V_e, ∂S_e/∂u (3 per node), ∂S_e/∂X, ∂V_e/∂X.
    type Local = (f64, f64, Vec<f64>, Vec<[f64; 3]>, Vec<[f64; 3]>);
    let with_x = acc.dx.is_some();
    let locals: Vec<Local> = els
        .par_iter()
        .map(|&e| {
            let tab = model.element_table(e);
            let nodes = model.element_nodes(e);
            let nn = nodes.len();
            let x = model.element_coordinates(e);
            let mu = model.element_params(e).mu;
            let mut g = vec![[0.0; 3]; nn];
            let (mut sv, mut vol) = (0.0, 0.0);
            let mut du = vec![0.0; 3 * nn];
            let (mut dxs, mut dxv) = (vec![[0.0; 3]; nn], vec![[0.0; 3]; nn]);
            for q in 0..tab.n_points() {
                let det = geometry::physical_gradients_into(3, tab.grad(q), &x, &mut g);
                let w = tab.weights[q] * det;
                let mut gu = [[0.0; 3]; 3];
                for a in 0..nn {
                    for i in 0..3 {
                        for j in 0..3 {
                            gu[i][j] += u[3 * nodes[a] + i] * g[a][j];
                        }
                    }
                }
                let tr = (gu[0][0] + gu[1][1] + gu[2][2]) / 3.0;
                let mut s = [[0.0; 3]; 3];
                for i in 0..3 {
                    for j in 0..3 {
                        s[i][j] = mu * (gu[i][j] + gu[j][i]);
                    }
                    s[i][i] -= 2.0 * mu * tr;
                }
                let ss: f64 = (0..3)
                    .flat_map(|i| (0..3).map(move |j| (i, j)))
                    .map(|(i, j)| s[i][j] * s[i][j])
                    .sum();
                let vm = (1.5 * ss).sqrt();
                let vp = vm.powf(p);
                sv += w * vp;
                vol += w;
                // ∂(vm^p)/∂∇u_ij = p vm^{p−2} 3μ s_ij (zero at vm = 0 for p > 2; p ≥ 2 assumed
                // smooth enough there).
                let c = if vm > 0.0 { p * vm.powf(p - 2.0) * 3.0 * mu } else { 0.0 };
                for a in 0..nn {
                    for i in 0..3 {
                        du[3 * a + i] +=
                            w * c * (s[i][0] * g[a][0] + s[i][1] * g[a][1] + s[i][2] * g[a][2]);
                    }
                }
                if with_x {
                    for b in 0..nn {
                        let sg = [0, 1, 2]
                            .map(|i| s[i][0] * g[b][0] + s[i][1] * g[b][1] + s[i][2] * g[b][2]);
                        for k in 0..3 {
                            let t: f64 = (0..3).map(|i| gu[i][k] * sg[i]).sum();
                            dxs[b][k] += w * (vp * g[b][k] - c * t);
                            dxv[b][k] += w * g[b][k];
                        }
                    }
                }
            }
            (sv, vol, du, dxs, dxv)
        })
        .collect();
    let s: f64 = locals.iter().map(|l| l.0).sum();
    let vol: f64 = locals.iter().map(|l| l.1).sum();
    let m = (s / vol).powf(1.0 / p);
    // dM = M/p (dS/S − dV/V)
    let f = acc.w * m / p;
    let Acc { du, mut dx, .. } = acc;
    for (l, &e) in locals.iter().zip(els) {
        for (a, &n) in model.element_nodes(e).iter().enumerate() {
            for i in 0..3 {
                du[3 * n + i] += f * l.2[3 * a + i] / s;
            }
            if let Some(dx) = dx.as_deref_mut() {
                for k in 0..3 {
                    dx[n][k] += f * (l.3[a][k] / s - l.4[a][k] / vol);
                }
            }
        }
        // ∂S_e/∂μ = p S_e / μ.
        let mu = model.element_params(e).mu;
        let ds_dmu = p * l.0 / mu;
        let [_, _, me, mn] = lame_derivatives(model.young_elem[e], model.poisson_elem[e]);
        d_young[e] += f * ds_dmu * me / s;
        d_poisson[e] += f * ds_dmu * mn / s;
    }
    m
}

/// Evaluate a weighted sum of objective terms at the full displacement `u`, with ∂J/∂u, the
/// explicit ∂J/∂E and ∂J/∂ν per element and, when `with_coords`, ∂J/∂X.
pub fn evaluate(
    model: &LinearElasticModel,
    terms: &[ObjectiveTerm],
    u: &[f64],
    with_coords: bool,
) -> Result<ObjectiveEval, MechanicalError> {
    let n = model.n_nodes();
    let nv = model.n_volume_elements();
    let mut out = ObjectiveEval {
        value: 0.0,
        terms: Vec::with_capacity(terms.len()),
        d_displacement: vec![0.0; 3 * n],
        d_coords: with_coords.then(|| vec![[0.0; 3]; n]),
        d_young_elem: vec![0.0; nv],
        d_poisson_elem: vec![0.0; nv],
    };
    for term in terms {
        let w = term.weight;
        let acc = Acc { w, du: &mut out.d_displacement, dx: out.d_coords.as_mut() };
        let value = match &term.kind {
            ObjectiveKind::PointDisplacement { point, direction } => {
                let loc = locate(model, *point)?;
                let nodes = model.element_nodes(loc.element);
                let mut v = 0.0;
                for (a, &nd) in nodes.iter().enumerate() {
                    for i in 0..3 {
                        v += loc.shape[a] * direction[i] * u[3 * nd + i];
                        acc.du[3 * nd + i] += w * loc.shape[a] * direction[i];
                    }
                }
                if let Some(dx) = acc.dx {
                    let gu = point_gradient(model, &loc, u);
                    let gtd =
                        [0, 1, 2].map(|k| (0..3).map(|i| direction[i] * gu[i][k]).sum::<f64>());
                    for (a, &nd) in nodes.iter().enumerate() {
                        for k in 0..3 {
                            dx[nd][k] -= w * loc.shape[a] * gtd[k];
                        }
                    }
                }
                v
            }
            ObjectiveKind::AverageDisplacement { group, direction } => {
                if let Some(cells) = model.surface_groups.get(group) {
                    average_surface(model, cells, *direction, u, acc)
                } else {
                    let els = model.group_elements(group).map_err(|e| match e {
                        MechanicalError::UnknownGroup { name, mut known } => {
                            known.extend(model.surface_groups.keys().cloned());
                            known.sort();
                            MechanicalError::UnknownGroup { name, known }
                        }
                        other => other,
                    })?;
                    average_volume(model, els, *direction, u, acc)
                }
            }
            ObjectiveKind::Linear { weights } => {
                if weights.len() != u.len() {
                    return Err(MechanicalError::InvalidValue {
                        what: format!(
                            "the number of weights of a displacement cotangent ({} dofs)",
                            u.len()
                        ),
                        requirement: "three weights per node",
                        value: weights.len() as f64,
                    });
                }
                let mut v = 0.0;
                for ((d, &wi), &ui) in acc.du.iter_mut().zip(weights).zip(u) {
                    v += wi * ui;
                    *d += w * wi;
                }
                v
            }
            ObjectiveKind::Compliance => {
                let f = model.load_vector();
                let v: f64 = f.iter().zip(u).map(|(a, b)| a * b).sum();
                for (d, fi) in acc.du.iter_mut().zip(&f) {
                    *d += w * fi;
                }
                if let Some(dx) = acc.dx {
                    // ∂(fᵀu)/∂X = −uᵀ ∂R_load/∂X (R_load = −f: the residual with λ = μ = 0).
                    let loads = |e: usize| super::ElementParams {
                        lambda: 0.0,
                        mu: 0.0,
                        ..model.element_params(e)
                    };
                    let g = model.coordinate_vjp_with(u, u, Some(&loads));
                    for (d, gi) in dx.iter_mut().zip(&g) {
                        for k in 0..3 {
                            d[k] -= w * gi[k];
                        }
                    }
                }
                v
            }
            ObjectiveKind::VonMisesPNorm { group, p } => {
                if !(p.is_finite() && *p >= 1.0) {
                    return Err(MechanicalError::InvalidValue {
                        what: format!("p of the von Mises p-norm over '{group}'"),
                        requirement: "finite and ≥ 1",
                        value: *p,
                    });
                }
                let els = model.group_elements(group)?;
                von_mises_pnorm(
                    model,
                    els,
                    *p,
                    u,
                    acc,
                    &mut out.d_young_elem,
                    &mut out.d_poisson_elem,
                )
            }
        };
        if !value.is_finite() {
            return Err(MechanicalError::InvalidValue {
                what: format!("objective term {:?}", term.kind),
                requirement: "finite",
                value,
            });
        }
        out.terms.push(value);
        out.value += w * value;
    }
    Ok(out)
}

/// The derivative along a direction (δu, δX) of the gradient of the average displacement
/// The point displacement d·u(x_p)'s derivatives along (δu, δX): ∂/∂u three per node (first)
/// and ∂/∂X per node (second) of its directional derivative, for the second-order adjoint with
/// shape parameters. The point holds still while the nodes move, so its reference coordinates
/// follow them ([`gradfem_kernel::point_sample_along`] on the nodal field d·u_a); `dx` empty:
/// the nodes hold still. Errors: the point outside the model, a singular Jacobian at it.
pub fn point_displacement_hessian(
    model: &LinearElasticModel,
    point: [f64; 3],
    direction: [f64; 3],
    u: &[f64],
    du: &[f64],
    dx: &[[f64; 3]],
    coords: CoordinateRequest,
) -> Result<(Vec<f64>, CoordinatePart), MechanicalError> {
    let loc = locate(model, point)?;
    let e = loc.element;
    let nodes = model.element_nodes(e);
    let ct = model.element_cell_type(e);
    let nn = nodes.len();
    let x = model.element_coordinates(e);
    let mut dn = vec![[0.0; 3]; nn];
    shape_gradients_into(ct, loc.xi, &mut dn);
    let mut hn = vec![[[0.0; 3]; 3]; nn];
    shape_hessians_into(ct, loc.xi, &mut hn);
    let along = |v: &[f64], n: usize| (0..3).map(|i| direction[i] * v[3 * n + i]).sum::<f64>();
    let values: Vec<f64> = nodes.iter().map(|&n| along(u, n)).collect();
    let d_values: Vec<f64> = nodes.iter().map(|&n| along(du, n)).collect();
    let d_coords: Vec<[f64; 3]> =
        nodes.iter().map(|&n| if dx.is_empty() { [0.0; 3] } else { dx[n] }).collect();
    let p = point_sample_along(&loc.shape, &dn, &hn, &x, &values, &d_values, &d_coords)
        .ok_or_else(|| MechanicalError::InvertedCell {
            cell_tag: model.element_cell_tag(e),
            cell_type: ct,
            det_j: 0.0,
            centroid: std::array::from_fn(|i| x.iter().map(|q| q[i]).sum::<f64>() / nn as f64),
        })?;
    // d·u(x_p) is linear in u: its own curvature is the motion of ξ alone.
    let mut hu = vec![0.0; u.len()];
    for (&n, v) in nodes.iter().zip(p.value_part(&loc.shape, 1.0, 0.0)) {
        for i in 0..3 {
            hu[3 * n + i] += v * direction[i];
        }
    }
    let mut hx = CoordinatePart::zeros(coords, model.n_nodes());
    if !coords.is_none() {
        let local = p.coordinate_part(&loc.shape, 1.0, 0.0);
        hx.add_element(nodes, &coords.picks_of(nodes, &local));
    }
    Ok((hu, hx))
}

/// d · ū over `group` (a surface or a volume group): ∂/∂u three per node (first) and ∂/∂X per
/// node (second), for the second-order adjoint with shape parameters. With S = ∫ d·u and
/// A = ∫ 1 over the group, J = S/A; per cell, hyper-dual numbers carry the direction in ε₁
/// and pick one displacement component or coordinate in ε₂ through the generic Jacobian or
/// area density, and the chain rule through S/A follows.
pub fn average_displacement_hessian(
    model: &LinearElasticModel,
    group: &str,
    direction: [f64; 3],
    u: &[f64],
    du: &[f64],
    dx: &[[f64; 3]],
    coords: CoordinateRequest,
) -> Result<(Vec<f64>, CoordinatePart), MechanicalError> {
    // The cells: (table, nodes, is a surface cell).
    let cells: Vec<(&gradfem_mesh::quadrature::ElementTable, &[usize], bool)> =
        match model.surface_groups.get(group) {
            Some(cells) => cells
                .iter()
                .map(|c| (model.block_table(c.block), c.nodes.as_slice(), true))
                .collect(),
            None => model
                .group_elements(group)?
                .iter()
                .map(|&e| (model.element_table(e), model.element_nodes(e), false))
                .collect(),
        };
    /// Per cell: S and A with their direction parts; per variable (3·nn displacements, then
    /// the coordinate picks) the gradient and its direction part of S and of A.
    struct Local {
        s: [f64; 2],
        a: [f64; 2],
        grad: Vec<[f64; 4]>,
    }
    let locals: Vec<Local> = cells
        .par_iter()
        .map(|&(tab, nodes, surface)| {
            let nn = nodes.len();
            let mut g = vec![[HyperDual64::from(0.0); 3]; nn];
            let mut pass = |pick: usize| -> (HyperDual64, HyperDual64) {
                let seed = |var: usize| if var == pick { 1.0 } else { 0.0 };
                let x = hyper_dual_coordinates(
                    &model.coords,
                    nodes,
                    dx,
                    coords,
                    pick.checked_sub(3 * nn),
                );
                let (mut s, mut area) = (HyperDual64::from(0.0), HyperDual64::from(0.0));
                for q in 0..tab.n_points() {
                    let jac = if surface {
                        gradfem_kernel::generic::area_density(tab.grad(q), &x)
                    } else {
                        gradfem_kernel::generic::physical_gradients(tab.grad(q), &x, &mut g)
                    };
                    let w = jac * tab.weights[q];
                    let sh = tab.shape(q);
                    let mut uq = HyperDual64::from(0.0);
                    for (a, &n) in nodes.iter().enumerate() {
                        for i in 0..3 {
                            let k = 3 * n + i;
                            uq += HyperDual64::new(u[k], du[k], seed(3 * a + i), 0.0)
                                * (sh[a] * direction[i]);
                        }
                    }
                    s += w * uq;
                    area += w;
                }
                (s, area)
            };
            let n_picks = 3 * nn + coords.n_picks(nodes);
            let mut local = Local { s: [0.0; 2], a: [0.0; 2], grad: Vec::with_capacity(n_picks) };
            for pick in 0..n_picks {
                // (The displacement picks come first and set S and A.)
                if pick >= 3 * nn && coords.is_still(pick - 3 * nn, nodes) {
                    local.grad.push([0.0; 4]);
                    continue;
                }
                let (s, a) = pass(pick);
                local.s = [s.re, s.eps1];
                local.a = [a.re, a.eps1];
                local.grad.push([s.eps2, s.eps1eps2, a.eps2, a.eps1eps2]);
            }
            local
        })
        .collect();
    let (mut s, mut a) = ([0.0; 2], [0.0; 2]);
    for l in &locals {
        for k in 0..2 {
            s[k] += l.s[k];
            a[k] += l.a[k];
        }
    }
    // J = S/A: J_S = 1/A, J_A = −S/A², J_SS = 0, J_SA = −1/A², J_AA = 2S/A³, and
    // d/dε ∂J/∂z = J_S S_zε + J_A A_zε + (J_SA dA) S_z + (J_SA dS + J_AA dA) A_z.
    let (j_s, j_a) = (1.0 / a[0], -s[0] / (a[0] * a[0]));
    let (j_sa, j_aa) = (-1.0 / (a[0] * a[0]), 2.0 * s[0] / (a[0] * a[0] * a[0]));
    let (c_s, c_a) = (j_sa * a[1], j_sa * s[1] + j_aa * a[1]);
    let combine = |g: [f64; 4]| j_s * g[1] + j_a * g[3] + c_s * g[0] + c_a * g[2];
    let mut out_u = vec![0.0; 3 * model.n_nodes()];
    let mut out_x = CoordinatePart::zeros(coords, model.n_nodes());
    // Summed in cell order: the result does not depend on the thread count.
    for (l, &(_, nodes, _)) in locals.iter().zip(&cells) {
        let nn = nodes.len();
        for (a, &n) in nodes.iter().enumerate() {
            for i in 0..3 {
                out_u[3 * n + i] += combine(l.grad[3 * a + i]);
            }
        }
        let picks: Vec<f64> = l.grad[3 * nn..].iter().map(|&g| combine(g)).collect();
        out_x.add_element(nodes, &picks);
    }
    Ok((out_u, out_x))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linear::{BcKind, BcSpec};
    use gradfem_mesh::CellType;

    /// A Hessian product (`hu`, `hx`) of `term` along (δu = `du`, δX = `dx`) against central
    /// differences of its first-order derivatives, to `tol` of the largest entry.
    #[allow(clippy::too_many_arguments)]
    fn assert_matches_differences(
        label: &str,
        m: &LinearElasticModel,
        u: &[f64],
        du: &[f64],
        dx: &[[f64; 3]],
        term: &[ObjectiveTerm],
        (hu, hx): (&[f64], &[[f64; 3]]),
        tol: f64,
    ) {
        let h = 1e-6;
        let at = |s: f64| {
            let mut mm = m.clone();
            for (x, d) in mm.coords.iter_mut().zip(dx) {
                (0..3).for_each(|k| x[k] += s * d[k]);
            }
            let uu: Vec<f64> = u.iter().zip(du).map(|(a, b)| a + s * b).collect();
            evaluate(&mm, term, &uu, true).unwrap()
        };
        let (ep, em) = (at(h), at(-h));
        let check = |what: &str, got: &[f64], plus: &[f64], minus: &[f64]| {
            let fd: Vec<f64> = plus.iter().zip(minus).map(|(a, b)| (a - b) / (2.0 * h)).collect();
            let scale = fd.iter().chain(got).fold(1e-300f64, |a, v| a.max(v.abs()));
            for (i, (g, f)) in got.iter().zip(&fd).enumerate() {
                assert!((g - f).abs() <= tol * scale, "{label} {what}[{i}]: {g} vs {f}");
            }
        };
        check("u", hu, &ep.d_displacement, &em.d_displacement);
        let flat = |v: &[[f64; 3]]| -> Vec<f64> { v.iter().flatten().copied().collect() };
        check(
            "X",
            &flat(hx),
            &flat(ep.d_coords.as_ref().unwrap()),
            &flat(em.d_coords.as_ref().unwrap()),
        );
        assert!(hx.iter().flatten().any(|v| *v != 0.0), "{label}: no coordinate part");
    }

    /// The point displacement's Hessian product along (δu, δX) against central differences
    /// of its first-order derivatives, on straight and curved cells (curved: the shape
    /// functions' reference Hessians move the Jacobian at the point).
    #[rstest::rstest]
    #[case(CellType::Tet4, false)]
    #[case(CellType::Hex8, true)]
    #[case(CellType::Tet10, true)]
    #[case(CellType::Hex20, true)]
    fn point_displacement_hessian_matches_differences(
        #[case] cell: CellType,
        #[case] curved: bool,
    ) {
        let fixed = BcSpec { group: "xmin".into(), kind: BcKind::Fixed };
        let (mut m, u) = crate::linear::second_order::tests::block(cell, &[fixed], false);
        if curved {
            for p in &mut m.coords {
                let [x, y, z] = *p;
                *p = [
                    x + 2e-5 * (4e3 * y).sin(),
                    y + 1e-5 * (9e3 * z + 2e3 * x).cos(),
                    z + 30.0 * x * y,
                ];
            }
        }
        let n = m.n_nodes();
        let du: Vec<f64> = (0..3 * n).map(|i| 1e-7 * ((i as f64) * 0.37).sin()).collect();
        let dx: Vec<[f64; 3]> = (0..n)
            .map(|i| {
                let f = i as f64;
                [2e-5 * (0.7 * f).sin(), 1e-5 * (1.3 * f).cos(), 5e-6 * (0.4 * f).sin()]
            })
            .collect();
        let (point, direction) = ([6.1e-4, 1.13e-4, 4.7e-5], [0.3, -1.0, 0.5]);
        let (hu, hx) = point_displacement_hessian(
            &m,
            point,
            direction,
            &u,
            &du,
            &dx,
            CoordinateRequest::Every,
        )
        .unwrap();
        let hx = hx.every().unwrap().to_vec();
        let term = [ObjectiveTerm {
            weight: 1.0,
            kind: ObjectiveKind::PointDisplacement { point, direction },
        }];
        let label = format!("{cell:?}");
        assert_matches_differences(&label, &m, &u, &du, &dx, &term, (&hu, &hx), 1e-6);
        assert!(hu.iter().any(|v| *v != 0.0));
    }

    /// The average displacement's Hessian product along (δu, δX), on a surface and a volume
    /// group, against central differences of its first-order derivatives.
    #[rstest::rstest]
    #[case(CellType::Tet4, "xmax")]
    #[case(CellType::Hex8, "xmax")]
    #[case(CellType::Tet10, "domain")]
    fn average_displacement_hessian_matches_differences(
        #[case] cell: CellType,
        #[case] group: &str,
    ) {
        let fixed = BcSpec { group: "xmin".into(), kind: BcKind::Fixed };
        let (m, u) = crate::linear::second_order::tests::block(cell, &[fixed], false);
        let n = m.n_nodes();
        let du: Vec<f64> = (0..3 * n).map(|i| 1e-7 * ((i as f64) * 0.37).sin()).collect();
        let dx: Vec<[f64; 3]> = (0..n)
            .map(|i| {
                let f = i as f64;
                [2e-5 * (0.7 * f).sin(), 1e-5 * (1.3 * f).cos(), 5e-6 * (0.4 * f).sin()]
            })
            .collect();
        let direction = [0.3, -1.0, 0.5];
        let (hu, hx) = average_displacement_hessian(
            &m,
            group,
            direction,
            &u,
            &du,
            &dx,
            CoordinateRequest::Every,
        )
        .unwrap();
        let hx = hx.every().unwrap().to_vec();
        let term = [ObjectiveTerm {
            weight: 1.0,
            kind: ObjectiveKind::AverageDisplacement { group: group.into(), direction },
        }];
        let label = format!("{cell:?} {group}");
        assert_matches_differences(&label, &m, &u, &du, &dx, &term, (&hu, &hx), 1e-5);
    }
}
