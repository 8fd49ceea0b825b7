//! Objectives on the temperature field, with their derivatives with respect to the nodal
//! temperatures and to the node coordinates.
//!
//! - point value T(x_p) = Σ N_a(ξ_p) T_a (ξ_p from the inverse isoparametric map); its
//!   coordinate derivative follows from the fixed physical point: ∂T(x_p)/∂X_b = −N_b(ξ_p) ∇T(x_p);
//! - group average T̄ = ∫_g T dΩ / ∫_g dΩ;
//! - smooth maximum (p-norm) M = (∫_g T^p dΩ / ∫_g dΩ)^{1/p} (T > 0, e.g. in kelvin), which
//!   tends to max T as p grows;
//! - peak (the largest nodal temperature of a group) through the Kreisselmeier–Steinhauser
//!   aggregate KS = m + ln(Σᵢ exp(ρ (Tᵢ − m)))/ρ over the group's nodes, m = maxᵢ Tᵢ, which
//!   bounds the peak from above, m ≤ KS ≤ m + ln(n)/ρ, and is smooth in every Tᵢ (its
//!   derivative is the soft-max weight exp(ρ (Tᵢ − m))/Σ); [`group_peak`] gives the peak itself;
//! - integral of T², ∫_g T² dΩ;
//! - sensor misfit ½ Σ_s (T(x_s) − d_s)²;
//! - the nodal sum of squares Σᵢ Tᵢ² (algebraic, for benchmarks).
//!
//! A weighted sum of these is the objective of a problem.

use gradfem_kernel::{
    CoordinatePart, CoordinateRequest, PointSample, generic, hyper_dual_coordinates,
    point_sample_along,
};
use gradfem_mesh::geometry;
use gradfem_mesh::reference::{shape_functions_into, shape_gradients_into, shape_hessians_into};
use num_dual::{DualNum, HyperDual64};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::model::{MAX_NODES, ThermalError, ThermalModel};

/// The default sharpness of [`ObjectiveKind::Peak`] [1/K]: nodes within a few kelvin of the
/// peak share its gradient, and the aggregate exceeds the peak by at most ln(n) K.
pub const DEFAULT_PEAK_RHO: f64 = 1.0;

/// One kind of objective.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ObjectiveKind {
    /// Temperature at a point.
    Point { point: [f64; 3] },
    /// Average temperature over a volume group (`"*"`: the whole model).
    Average { group: String },
    /// Smooth maximum over a volume group: the p-norm mean (∫T^p/∫1)^{1/p}. It lies below
    /// the true maximum (by tens of kelvin for p = 8 on a hot spot); [`ObjectiveKind::Peak`]
    /// bounds the maximum itself.
    Max { group: String, p: f64 },
    /// The peak nodal temperature of a volume group through the Kreisselmeier–Steinhauser
    /// aggregate with sharpness `rho` [1/K]: max ≤ KS ≤ max + ln(n)/rho over the n nodes.
    Peak { group: String, rho: f64 },
    /// ∫ T² over a volume group.
    IntegralSquare { group: String },
    /// ½ Σ (T(x_s) − d_s)² over sensors (x, y, z, value).
    Misfit { sensors: Vec<[f64; 4]> },
    /// Σᵢ Tᵢ² over every node of the model (a mesh-dependent algebraic objective, used by the
    /// cross-code benchmark).
    NodalSumSquares,
    /// Σᵢ wᵢ Tᵢ over the nodes: a cotangent `weights` (one per node) paired with the
    /// temperature field, whose gradient is the vector-Jacobian product of the whole field.
    /// Nodes without a temperature (outside the thermal field) contribute nothing.
    Linear { weights: Vec<f64> },
}

/// A weighted objective term.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ObjectiveTerm {
    pub weight: f64,
    #[serde(flatten)]
    pub kind: ObjectiveKind,
}

/// Value and derivatives of an objective.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectiveEval {
    pub value: f64,
    /// Value of each term (unweighted).
    pub terms: Vec<f64>,
    /// ∂J/∂T at every node.
    pub d_temperature: Vec<f64>,
    /// ∂J/∂X at every node (when requested).
    pub d_coords: Option<Vec<[f64; 3]>>,
}

/// Where a point lies: element, reference coordinates and shape-function values.
#[derive(Clone, Debug, PartialEq)]
pub struct PointLocation {
    pub element: usize,
    pub xi: [f64; 3],
    pub shape: Vec<f64>,
}

/// Locate a point in the volume elements of the model (inverse isoparametric map by Newton).
/// Points within a small tolerance outside a cell face count as inside.
pub fn locate(model: &ThermalModel, point: [f64; 3]) -> Result<PointLocation, ThermalError> {
    let found = (0..model.n_volume_elements())
        .into_par_iter()
        .find_first(|&e| locate_in(model, e, point).is_some());
    match found {
        Some(e) => {
            let xi = locate_in(model, e, point).expect("found above");
            let ct = model.element_cell_type(e);
            let mut shape = vec![0.0; ct.n_nodes()];
            shape_functions_into(ct, xi, &mut shape);
            Ok(PointLocation { element: e, xi, shape })
        }
        None => Err(ThermalError::PointOutside { point, context: String::new() }),
    }
}

fn locate_in(model: &ThermalModel, e: usize, p: [f64; 3]) -> Option<[f64; 3]> {
    geometry::reference_coordinates(model.element_cell_type(e), &model.element_coordinates(e), p)
}

/// Integral over elements `els` of g(T) and of 1, with ∂/∂T_a and (optionally) ∂/∂X_a of both.
struct IntegralParts {
    value: f64,
    volume: f64,
    d_value_t: Vec<f64>,
    d_value_x: Option<Vec<[f64; 3]>>,
    d_volume_x: Option<Vec<[f64; 3]>>,
}

fn integrate(
    model: &ThermalModel,
    els: &[usize],
    t: &[f64],
    g: &(dyn Fn(f64) -> (f64, f64) + Sync),
    with_coords: bool,
) -> IntegralParts {
    integrate_with(model, els, t, g, with_coords, None).0
}

/// The second derivative g″ of an integrand with the direction δT it is applied along: the
/// curvature ∫ g″(T) δT N_a per node.
type Curvature<'a> = (&'a [f64], &'a (dyn Fn(f64) -> f64 + Sync));

/// [`integrate`], and with `curvature` = (δT, g″) also ∫ g″(T) δT N_a per node (empty without),
/// in the same pass over the elements.
fn integrate_with(
    model: &ThermalModel,
    els: &[usize],
    t: &[f64],
    g: &(dyn Fn(f64) -> (f64, f64) + Sync),
    with_coords: bool,
    curvature: Option<Curvature>,
) -> (IntegralParts, Vec<f64>) {
    // The per-element records are sized by the largest element of the group, so a Tet4 mesh
    // moves 80 bytes per element instead of room for 27 nodes.
    let widest = els.iter().map(|&e| model.element_nodes(e).len()).max().unwrap_or(0);
    // The coordinate derivatives take room for NN nodes only when asked for.
    match (widest, with_coords) {
        (0..=4, false) => integrate_sized::<4, 0>(model, els, t, g, curvature),
        (0..=4, true) => integrate_sized::<4, 4>(model, els, t, g, curvature),
        (5..=8, false) => integrate_sized::<8, 0>(model, els, t, g, curvature),
        (5..=8, true) => integrate_sized::<8, 8>(model, els, t, g, curvature),
        (9..=10, false) => integrate_sized::<10, 0>(model, els, t, g, curvature),
        (9..=10, true) => integrate_sized::<10, 10>(model, els, t, g, curvature),
        (_, false) => integrate_sized::<MAX_NODES, 0>(model, els, t, g, curvature),
        (_, true) => integrate_sized::<MAX_NODES, MAX_NODES>(model, els, t, g, curvature),
    }
}

/// [`integrate_with`] over elements of at most `NN` nodes, with the coordinate derivatives
/// when `NX` = `NN` (none when `NX` = 0).
fn integrate_sized<const NN: usize, const NX: usize>(
    model: &ThermalModel,
    els: &[usize],
    t: &[f64],
    g: &(dyn Fn(f64) -> (f64, f64) + Sync),
    curvature: Option<Curvature>,
) -> (IntegralParts, Vec<f64>) {
    let n_nodes = model.n_nodes();
    let with_coords = NX > 0;
    // Per element: value, volume, and per local node d/dT, the curvature, d/dX (value) and
    // d/dX (volume). (No heap allocation per element.)
    struct Local<const NN: usize, const NX: usize> {
        value: f64,
        volume: f64,
        dt: [f64; NN],
        curvature: [f64; NN],
        dx: [[f64; 3]; NX],
        dvx: [[f64; 3]; NX],
    }
    let locals: Vec<Local<NN, NX>> = els
        .par_iter()
        .map(|&e| {
            let tab = model.element_table(e);
            let nodes = model.element_nodes(e);
            let nn = nodes.len();
            let mut xs = [[0.0; 3]; NN];
            for (xa, &n) in xs.iter_mut().zip(nodes) {
                *xa = model.coords[n];
            }
            let x = &xs[..nn];
            let mut value = 0.0;
            let mut volume = 0.0;
            let mut dt = [0.0; NN];
            let mut curv = [0.0; NN];
            // An affine cell (Tet4) has the same det J at every point.
            let affine = model.element_cell_type(e) == gradfem_mesh::CellType::Tet4;
            let mut det = 0.0;
            for q in 0..tab.n_points() {
                if q == 0 || !affine {
                    // The value and its T-derivatives need det J alone.
                    det = geometry::det3(&geometry::jacobian(tab.grad(q), x));
                }
                let w = tab.weights[q] * det;
                let n = tab.shape(q);
                let tq: f64 = (0..nn).map(|a| n[a] * t[nodes[a]]).sum();
                let (gv, dg) = g(tq);
                value += w * gv;
                volume += w;
                for a in 0..nn {
                    dt[a] += w * dg * n[a];
                }
                if let Some((dir, g2)) = curvature {
                    let dq: f64 = (0..nn).map(|a| n[a] * dir[nodes[a]]).sum();
                    let c = w * g2(tq) * dq;
                    for a in 0..nn {
                        curv[a] += c * n[a];
                    }
                }
            }
            let (mut dx, mut dvx) = ([[0.0; 3]; NX], [[0.0; 3]; NX]);
            if with_coords {
                // d(det J)/dX_bi = det J (∇N_b)ᵢ, and T at the quadrature points does not move.
                let mut grads_buf = [[0.0; 3]; NN];
                let grads = &mut grads_buf[..nn];
                for q in 0..tab.n_points() {
                    let det = geometry::physical_gradients_into(3, tab.grad(q), x, grads);
                    let w = tab.weights[q] * det;
                    let n = tab.shape(q);
                    let tq: f64 = (0..nn).map(|b| n[b] * t[nodes[b]]).sum();
                    let gv = g(tq).0;
                    for b in 0..nn {
                        for i in 0..3 {
                            dx[b][i] += w * gv * grads[b][i];
                            dvx[b][i] += w * grads[b][i];
                        }
                    }
                }
            }
            Local { value, volume, dt, curvature: curv, dx, dvx }
        })
        .collect();
    let mut parts = IntegralParts {
        value: 0.0,
        volume: 0.0,
        d_value_t: vec![0.0; n_nodes],
        d_value_x: with_coords.then(|| vec![[0.0; 3]; n_nodes]),
        d_volume_x: with_coords.then(|| vec![[0.0; 3]; n_nodes]),
    };
    let mut total_curvature = if curvature.is_some() { vec![0.0; n_nodes] } else { Vec::new() };
    for (l, &e) in locals.iter().zip(els) {
        parts.value += l.value;
        parts.volume += l.volume;
        for (a, &n) in model.element_nodes(e).iter().enumerate() {
            parts.d_value_t[n] += l.dt[a];
            if let Some(c) = total_curvature.get_mut(n) {
                *c += l.curvature[a];
            }
            if let (Some(dx), Some(dvx)) = (parts.d_value_x.as_mut(), parts.d_volume_x.as_mut()) {
                for i in 0..3 {
                    dx[n][i] += l.dx[a][i];
                    dvx[n][i] += l.dvx[a][i];
                }
            }
        }
    }
    (parts, total_curvature)
}

/// The p-norm's integral S = ∫ (T/T_s)ᵖ with its derivatives, in units of the largest |T|
/// (T_s, returned) so that Tᵖ cannot overflow for a sharp p: M = T_s (S/V)^{1/p} for any
/// constant T_s, and the ratio of the integral's derivative to the integral, all the
/// derivatives need, is the same.
fn p_norm_parts(
    model: &ThermalModel,
    els: &[usize],
    t: &[f64],
    p: f64,
    with_coords: bool,
) -> (f64, IntegralParts) {
    let ts = p_norm_scale(t);
    (ts, integrate(model, els, t, &|v| p_norm_integrand(v, ts, p), with_coords))
}

/// T_s of the p-norm: the largest |T| (1 when there is none).
fn p_norm_scale(t: &[f64]) -> f64 {
    let ts = t.iter().fold(0.0f64, |a, v| a.max(v.abs()));
    if ts > 0.0 && ts.is_finite() { ts } else { 1.0 }
}

/// (T/T_s)ᵖ and its derivative by T, with one power per point: (T/T_s)ᵖ⁻¹, then ᵖ by a product.
fn p_norm_integrand(v: f64, ts: f64, p: f64) -> (f64, f64) {
    let r = v / ts;
    let rp1 = power(r, p - 1.0);
    (rp1 * r, p / ts * rp1)
}

/// xᵉ, by repeated multiplication when e is a small integer (the p-norm's usual p = 8: a few
/// products instead of a logarithm and an exponential at every quadrature point).
fn power(x: f64, e: f64) -> f64 {
    if e.fract() == 0.0 && e.abs() <= 64.0 { x.powi(e as i32) } else { x.powf(e) }
}

/// Value of T at a located point and the physical gradient there.
fn point_value(model: &ThermalModel, loc: &PointLocation, t: &[f64]) -> (f64, [f64; 3]) {
    let nodes = model.element_nodes(loc.element);
    let ct = model.element_cell_type(loc.element);
    let value = nodes.iter().zip(&loc.shape).map(|(&n, &s)| s * t[n]).sum();
    let mut dn = vec![[0.0; 3]; ct.n_nodes()];
    shape_gradients_into(ct, loc.xi, &mut dn);
    let x = model.element_coordinates(loc.element);
    let mut g = vec![[0.0; 3]; ct.n_nodes()];
    geometry::physical_gradients_into(3, &dn, &x, &mut g);
    let mut grad = [0.0; 3];
    for (a, &n) in nodes.iter().enumerate() {
        for k in 0..3 {
            grad[k] += g[a][k] * t[n];
        }
    }
    (value, grad)
}

fn add_point_derivative(
    model: &ThermalModel,
    loc: &PointLocation,
    grad: [f64; 3],
    factor: f64,
    d_t: &mut [f64],
    d_x: Option<&mut Vec<[f64; 3]>>,
) {
    let nodes = model.element_nodes(loc.element);
    for (a, &n) in nodes.iter().enumerate() {
        d_t[n] += factor * loc.shape[a];
    }
    if let Some(d_x) = d_x {
        for (a, &n) in nodes.iter().enumerate() {
            for k in 0..3 {
                d_x[n][k] -= factor * loc.shape[a] * grad[k];
            }
        }
    }
}

/// The temperature at the located point `loc` with its first derivatives' parts along
/// (δT, δX) ([`point_sample_along`]: the point holds still, so its reference coordinates move
/// with the nodes; `dx` empty: they hold still). Errors: a singular Jacobian at the point.
fn point_sample(
    model: &ThermalModel,
    loc: &PointLocation,
    t: &[f64],
    dt: &[f64],
    dx: &[[f64; 3]],
) -> Result<PointSample, ThermalError> {
    let e = loc.element;
    let nodes = model.element_nodes(e);
    let ct = model.element_cell_type(e);
    let nn = nodes.len();
    let x = model.element_coordinates(e);
    let mut dn = vec![[0.0; 3]; nn];
    shape_gradients_into(ct, loc.xi, &mut dn);
    let mut hn = vec![[[0.0; 3]; 3]; nn];
    shape_hessians_into(ct, loc.xi, &mut hn);
    let values: Vec<f64> = nodes.iter().map(|&n| t[n]).collect();
    let d_values: Vec<f64> = nodes.iter().map(|&n| dt[n]).collect();
    let d_coords: Vec<[f64; 3]> =
        nodes.iter().map(|&n| if dx.is_empty() { [0.0; 3] } else { dx[n] }).collect();
    point_sample_along(&loc.shape, &dn, &hn, &x, &values, &d_values, &d_coords).ok_or_else(|| {
        ThermalError::InvertedCell {
            cell_tag: model.element_cell_tag(e),
            cell_type: ct,
            det_j: 0.0,
            centroid: std::array::from_fn(|i| x.iter().map(|p| p[i]).sum::<f64>() / nn as f64),
        }
    })
}

/// Add `factor` (∂V)' + `factor_value` ∂V of the point sample `p` at `loc` to the temperature
/// part `out_t` and the coordinate part `out_x` of a Hessian product.
#[allow(clippy::too_many_arguments)]
fn add_point_second_order(
    model: &ThermalModel,
    loc: &PointLocation,
    p: &PointSample,
    coords: CoordinateRequest,
    factor: f64,
    factor_value: f64,
    out_t: &mut [f64],
    out_x: &mut CoordinatePart,
) {
    let nodes = model.element_nodes(loc.element);
    for (&n, v) in nodes.iter().zip(p.value_part(&loc.shape, factor, factor_value)) {
        out_t[n] += v;
    }
    if !coords.is_none() {
        let local = p.coordinate_part(&loc.shape, factor, factor_value);
        out_x.add_element(nodes, &coords.picks_of(nodes, &local));
    }
}

/// The largest temperature over the nodes of a volume group's elements (`"*"`: the whole
/// model), and the node where it is reached. Nodes without a finite temperature are skipped.
pub fn group_peak(
    model: &ThermalModel,
    group: &str,
    t: &[f64],
) -> Result<(f64, usize), ThermalError> {
    let nodes = group_nodes(model, group)?;
    Ok(nodes.iter().filter(|&&n| t[n].is_finite()).fold(
        (f64::NEG_INFINITY, usize::MAX),
        |(m, at), &n| if t[n] > m { (t[n], n) } else { (m, at) },
    ))
}

/// The distinct nodes of a volume group's elements, in increasing order.
fn group_nodes(model: &ThermalModel, group: &str) -> Result<Vec<usize>, ThermalError> {
    let els = model.group_elements(group)?;
    let mut seen = vec![false; model.n_nodes()];
    for &e in els {
        for &n in model.element_nodes(e) {
            seen[n] = true;
        }
    }
    Ok(seen.iter().enumerate().filter(|(_, s)| **s).map(|(n, _)| n).collect())
}

/// The Kreisselmeier–Steinhauser aggregate of `t` over `nodes` with sharpness `rho`, shifted by
/// the maximum so that no exponential overflows; adds `weight` × ∂KS/∂Tᵢ into `d_t`.
fn ks_aggregate(nodes: &[usize], t: &[f64], rho: f64, weight: f64, d_t: &mut [f64]) -> f64 {
    let finite = || nodes.iter().copied().filter(|&n| t[n].is_finite());
    let m = finite().map(|n| t[n]).fold(f64::NEG_INFINITY, f64::max);
    if !m.is_finite() {
        return f64::NAN;
    }
    let sum: f64 = finite().map(|n| (rho * (t[n] - m)).exp()).sum();
    for n in finite() {
        d_t[n] += weight * (rho * (t[n] - m)).exp() / sum;
    }
    m + sum.ln() / rho
}

/// Evaluate a weighted sum of objective terms at nodal temperatures `t`, with ∂J/∂T and, when
/// `with_coords`, ∂J/∂X.
pub fn evaluate(
    model: &ThermalModel,
    terms: &[ObjectiveTerm],
    t: &[f64],
    with_coords: bool,
) -> Result<ObjectiveEval, ThermalError> {
    let n_nodes = model.n_nodes();
    let mut out = ObjectiveEval {
        value: 0.0,
        terms: Vec::with_capacity(terms.len()),
        d_temperature: vec![0.0; n_nodes],
        d_coords: with_coords.then(|| vec![[0.0; 3]; n_nodes]),
    };
    for term in terms {
        let w = term.weight;
        let value = match &term.kind {
            ObjectiveKind::Point { point } => {
                let loc = locate(model, *point)?;
                let (v, grad) = point_value(model, &loc, t);
                add_point_derivative(
                    model,
                    &loc,
                    grad,
                    w,
                    &mut out.d_temperature,
                    out.d_coords.as_mut(),
                );
                v
            }
            ObjectiveKind::Misfit { sensors } => {
                let mut total = 0.0;
                for s in sensors {
                    let loc = locate(model, [s[0], s[1], s[2]]).map_err(|e| match e {
                        ThermalError::PointOutside { point, .. } => ThermalError::PointOutside {
                            point,
                            context: format!(" (sensor with value {})", s[3]),
                        },
                        other => other,
                    })?;
                    let (v, grad) = point_value(model, &loc, t);
                    let r = v - s[3];
                    total += 0.5 * r * r;
                    add_point_derivative(
                        model,
                        &loc,
                        grad,
                        w * r,
                        &mut out.d_temperature,
                        out.d_coords.as_mut(),
                    );
                }
                total
            }
            ObjectiveKind::NodalSumSquares => {
                let mut total = 0.0;
                for (d, &v) in out.d_temperature.iter_mut().zip(t) {
                    if v.is_finite() {
                        total += v * v;
                        *d += w * 2.0 * v;
                    }
                }
                total
            }
            ObjectiveKind::Linear { weights } => {
                if weights.len() != n_nodes {
                    return Err(ThermalError::InvalidValue {
                        what: format!(
                            "the number of weights of a temperature cotangent ({} nodes)",
                            n_nodes
                        ),
                        requirement: "one weight per node",
                        value: weights.len() as f64,
                    });
                }
                let mut total = 0.0;
                for ((d, &v), &wi) in out.d_temperature.iter_mut().zip(t).zip(weights) {
                    if v.is_finite() {
                        total += wi * v;
                        *d += w * wi;
                    }
                }
                total
            }
            ObjectiveKind::IntegralSquare { group } => {
                let els = model.group_elements(group)?;
                let parts = integrate(model, els, t, &|v| (v * v, 2.0 * v), with_coords);
                for (d, p) in out.d_temperature.iter_mut().zip(&parts.d_value_t) {
                    *d += w * p;
                }
                if let (Some(dx), Some(px)) = (out.d_coords.as_mut(), parts.d_value_x.as_ref()) {
                    for (d, p) in dx.iter_mut().zip(px) {
                        for k in 0..3 {
                            d[k] += w * p[k];
                        }
                    }
                }
                parts.value
            }
            ObjectiveKind::Average { group } => {
                let els = model.group_elements(group)?;
                let parts = integrate(model, els, t, &|v| (v, 1.0), with_coords);
                let avg = parts.value / parts.volume;
                for (d, p) in out.d_temperature.iter_mut().zip(&parts.d_value_t) {
                    *d += w * p / parts.volume;
                }
                if let (Some(dx), Some(px), Some(pv)) =
                    (out.d_coords.as_mut(), parts.d_value_x.as_ref(), parts.d_volume_x.as_ref())
                {
                    for ((d, p), q) in dx.iter_mut().zip(px).zip(pv) {
                        for k in 0..3 {
                            d[k] += w * (p[k] - avg * q[k]) / parts.volume;
                        }
                    }
                }
                avg
            }
            ObjectiveKind::Peak { group, rho } => {
                if !(rho.is_finite() && *rho > 0.0) {
                    return Err(ThermalError::InvalidValue {
                        what: format!("the sharpness rho of the peak over group '{group}'"),
                        requirement: "finite and positive (1/K)",
                        value: *rho,
                    });
                }
                // Nodal values do not move with the nodes: no coordinate derivative.
                let nodes = group_nodes(model, group)?;
                ks_aggregate(&nodes, t, *rho, w, &mut out.d_temperature)
            }
            ObjectiveKind::Max { group, p } => {
                let p = *p;
                let els = model.group_elements(group)?;
                let (ts, parts) = p_norm_parts(model, els, t, p, with_coords);
                let s = parts.value;
                let vol = parts.volume;
                let m = ts * (s / vol).powf(1.0 / p);
                // dM = M/p (dS/S − dV/V)
                for (d, ps) in out.d_temperature.iter_mut().zip(&parts.d_value_t) {
                    *d += w * m / p * ps / s;
                }
                if let (Some(dx), Some(px), Some(pv)) =
                    (out.d_coords.as_mut(), parts.d_value_x.as_ref(), parts.d_volume_x.as_ref())
                {
                    for ((d, a), b) in dx.iter_mut().zip(px).zip(pv) {
                        for k in 0..3 {
                            d[k] += w * m / p * (a[k] / s - b[k] / vol);
                        }
                    }
                }
                m
            }
        };
        if !value.is_finite() {
            return Err(ThermalError::InvalidValue {
                what: format!("objective term {:?}", term.kind),
                requirement: "finite (a p-norm needs positive temperatures)",
                value,
            });
        }
        out.terms.push(value);
        out.value += w * value;
    }
    Ok(out)
}

/// Σₑ Σ_q w g″(T_q) (N·δT) N_a over elements `els`: the second-derivative part of the
/// directional derivative of [`integrate`]'s ∂/∂T, summed in element order.
fn integrate_curvature(
    model: &ThermalModel,
    els: &[usize],
    t: &[f64],
    dt: &[f64],
    g2: &(dyn Fn(f64) -> f64 + Sync),
) -> Vec<f64> {
    integrate_with(model, els, t, &|_| (0.0, 0.0), false, Some((dt, g2))).1
}

/// The objective's Hessian with respect to the nodal temperatures applied to `dt`:
/// (∂²J/∂T²) δT at every node, for the second-order adjoint. Terms linear in T (point values,
/// averages, cotangents) contribute nothing; node coordinates are held fixed.
pub fn hessian_product(
    model: &ThermalModel,
    terms: &[ObjectiveTerm],
    t: &[f64],
    dt: &[f64],
) -> Result<Vec<f64>, ThermalError> {
    let mut out = vec![0.0; model.n_nodes()];
    for term in terms {
        let w = term.weight;
        match &term.kind {
            ObjectiveKind::Point { .. }
            | ObjectiveKind::Average { .. }
            | ObjectiveKind::Linear { .. } => {}
            ObjectiveKind::Misfit { sensors } => {
                for s in sensors {
                    let loc = locate(model, [s[0], s[1], s[2]])?;
                    let nodes = model.element_nodes(loc.element);
                    let d: f64 = nodes.iter().zip(&loc.shape).map(|(&n, &sh)| sh * dt[n]).sum();
                    for (&n, &sh) in nodes.iter().zip(&loc.shape) {
                        out[n] += w * d * sh;
                    }
                }
            }
            ObjectiveKind::NodalSumSquares => {
                for ((o, &v), &d) in out.iter_mut().zip(t).zip(dt) {
                    if v.is_finite() {
                        *o += w * 2.0 * d;
                    }
                }
            }
            ObjectiveKind::IntegralSquare { group } => {
                let els = model.group_elements(group)?;
                let c = integrate_curvature(model, els, t, dt, &|_| 2.0);
                out.iter_mut().zip(&c).for_each(|(o, c)| *o += w * c);
            }
            ObjectiveKind::Peak { group, rho } => {
                // ∂KS/∂Tᵢ = sᵢ (the softmax weights); ∂²KS δ = ρ (s ∘ δ − s (s·δ)).
                let nodes = group_nodes(model, group)?;
                let mut s = vec![0.0; model.n_nodes()];
                ks_aggregate(&nodes, t, *rho, 1.0, &mut s);
                let sd: f64 = nodes.iter().map(|&n| s[n] * dt[n]).sum();
                for &n in &nodes {
                    out[n] += w * rho * s[n] * (dt[n] - sd);
                }
            }
            ObjectiveKind::Max { group, p } => {
                // M = T_s (S/V)^{1/p} with S = ∫ (T/T_s)ᵖ; ∂M/∂T_a = M/p · S_a/S, so
                // ∂²M δ = M/p [ (S·δ/S)(1/p − 1) S_a/S + (∂S_a δ)/S ], S·δ = Σ S_a δ_a.
                let p = *p;
                let els = model.group_elements(group)?;
                // S, its gradient and its curvature in one pass, in units of T_s.
                let ts = p_norm_scale(t);
                let (parts, curvature) = integrate_with(
                    model,
                    els,
                    t,
                    &|v| p_norm_integrand(v, ts, p),
                    false,
                    Some((dt, &|v| p * (p - 1.0) / (ts * ts) * power(v / ts, p - 2.0))),
                );
                let (s_int, vol) = (parts.value, parts.volume);
                let m = ts * (s_int / vol).powf(1.0 / p);
                let s_dot: f64 = parts.d_value_t.iter().zip(dt).map(|(a, b)| a * b).sum();
                for ((o, sa), ca) in out.iter_mut().zip(&parts.d_value_t).zip(&curvature) {
                    *o += w * m / p * ((s_dot / s_int) * (1.0 / p - 1.0) * sa / s_int + ca / s_int);
                }
            }
        }
    }
    Ok(out)
}

/// The integrand g(T) of an integral term, generic over the scalar.
#[derive(Clone, Copy, Debug)]
enum Integrand {
    /// g = T (averages).
    Value,
    /// g = T² (the integral of the square).
    Square,
    /// g = (T/T_s)ᵖ (the p-norm, in units of T_s).
    Power { p: f64, scale: f64 },
}

impl Integrand {
    fn apply<D: DualNum<Primitive = f64> + Copy>(self, t: D) -> D {
        match self {
            Integrand::Value => t,
            Integrand::Square => t * t,
            Integrand::Power { p, scale } => (t * scale.recip()).powf(p),
        }
    }
}

/// The function F(S, V) of an integral term of S = ∫ g(T) and V = ∫ 1, generic over the scalar.
#[derive(Clone, Copy, Debug)]
enum Outer {
    /// F = S.
    Integral,
    /// F = S/V.
    Mean,
    /// F = T_s (S/V)^{1/p}.
    Root { p: f64, scale: f64 },
}

impl Outer {
    fn apply<D: DualNum<Primitive = f64> + Copy>(self, s: D, v: D) -> D {
        match self {
            Outer::Integral => s,
            Outer::Mean => s / v,
            Outer::Root { p, scale } => (s / v).powf(p.recip()) * scale,
        }
    }

    /// F_S, F_V, F_SS, F_SV, F_VV at (s, v), by hyper-dual numbers.
    fn derivatives(self, s: f64, v: f64) -> [f64; 5] {
        let h = |s1: f64, s2: f64, v1: f64, v2: f64| {
            self.apply(HyperDual64::new(s, s1, s2, 0.0), HyperDual64::new(v, v1, v2, 0.0))
        };
        let ss = h(1.0, 1.0, 0.0, 0.0);
        let sv = h(1.0, 0.0, 0.0, 1.0);
        let vv = h(0.0, 0.0, 1.0, 1.0);
        [ss.eps1, vv.eps1, ss.eps1eps2, sv.eps1eps2, vv.eps1eps2]
    }
}

/// Derivative along a direction (δT, δX) of the gradient of F(S, V), S = ∫ g(T) and V = ∫ 1
/// over the elements `els`, with respect to the nodal temperatures (first) and the node
/// coordinates (second): per element, hyper-dual numbers carry the direction in ε₁ and pick
/// one nodal temperature or coordinate in ε₂ through the generic geometry, so the Jacobians'
/// dependence on X is differentiated exactly; the global chain rule through F follows.
#[allow(clippy::too_many_arguments)]
fn integral_hessian_product(
    model: &ThermalModel,
    els: &[usize],
    t: &[f64],
    dt: &[f64],
    dx: &[[f64; 3]],
    coords: CoordinateRequest,
    integrand: Integrand,
    outer: Outer,
    closed_form: bool,
) -> (Vec<f64>, CoordinatePart) {
    // Per variable of each element (nn temperatures, then the coordinate picks): the gradient
    // and the gradient's direction part of S and of V, [S_z, S_zε, V_z, V_zε], in one flat
    // array (no heap allocation per element).
    let mut starts = Vec::with_capacity(els.len() + 1);
    starts.push(0);
    for &e in els {
        let nodes = model.element_nodes(e);
        starts.push(starts.last().unwrap() + nodes.len() + coords.n_picks(nodes));
    }
    let mut grads = vec![[0.0f64; 4]; *starts.last().unwrap()];
    let slots = gradfem_kernel::split_runs(&mut grads, starts.windows(2).map(|w| w[1] - w[0]));
    // Closed form: only w = w_q det J depends on X, and moves as w tr G along a motion with
    // gradient G (w (tr G_δ tr G_D − tr(G_D G_δ)) along two), so S = Σ w g(T_q), V = Σ w and
    // their derivatives by T_a and by each pick D follow from g, g′, g″ at the points. The
    // moving picks' motions go to `motions` (reused by the elements of one thread's share).
    let closed =
        |e: usize, slot: &mut [[f64; 4]], motions: &mut Vec<(usize, [[f64; 3]; MAX_NODES])>| {
            let tab = model.element_table(e);
            let nodes = model.element_nodes(e);
            let nn = nodes.len();
            let x = model.element_coords(e);
            let mut motion = [[0.0; 3]; MAX_NODES];
            for (m, &n) in motion.iter_mut().zip(nodes) {
                *m = dx[n];
            }
            motions.clear();
            for k in (0..coords.n_picks(nodes)).filter(|&k| !coords.is_still(k, nodes)) {
                let mut d = [[0.0; 3]; MAX_NODES];
                coords.pick_motion_into(k, nodes, &mut d);
                motions.push((k, d));
            }
            let (mut s, mut v) = ([0.0; 2], [0.0; 2]);
            let mut g = [[0.0; 3]; MAX_NODES];
            for q in 0..tab.n_points() {
                let det = gradfem_mesh::geometry::physical_gradients_into(
                    3,
                    tab.grad(q),
                    &x[..nn],
                    &mut g[..nn],
                );
                let w = det * tab.weights[q];
                let n = tab.shape(q);
                let (mut tq, mut dtq) = (0.0, 0.0);
                for (a, &node) in nodes.iter().enumerate() {
                    tq += t[node] * n[a];
                    dtq += dt[node] * n[a];
                }
                let f = integrand.apply(num_dual::Dual2_64::new(tq, 1.0, 0.0));
                let (g0, g1, g2) = (f.re, f.v1, f.v2);
                let g_delta = gradfem_kernel::motion_gradient(&g[..nn], &motion[..nn]);
                let tr_delta = gradfem_kernel::trace(&g_delta);
                s[0] += w * g0;
                s[1] += w * (g1 * dtq + tr_delta * g0);
                v[0] += w;
                v[1] += w * tr_delta;
                for a in 0..nn {
                    slot[a][0] += w * g1 * n[a];
                    slot[a][1] += w * (g2 * dtq + tr_delta * g1) * n[a];
                }
                for (k, d) in motions.iter() {
                    let g_d = gradfem_kernel::motion_gradient(&g[..nn], &d[..nn]);
                    let tr_d = gradfem_kernel::trace(&g_d);
                    let tr_dd = gradfem_kernel::trace(&gradfem_kernel::mat_mul(&g_d, &g_delta));
                    let mixed = tr_delta * tr_d - tr_dd;
                    let z = &mut slot[nn + k];
                    z[0] += w * tr_d * g0;
                    z[1] += w * (tr_d * g1 * dtq + mixed * g0);
                    z[2] += w * tr_d;
                    z[3] += w * mixed;
                }
            }
            (s, v)
        };
    let locals: Vec<([f64; 2], [f64; 2])> = slots
        .into_par_iter()
        .zip(els.par_iter())
        .map_init(Vec::new, |motions, (slot, &e)| {
            if closed_form {
                return closed(e, slot, motions);
            }
            let tab = model.element_table(e);
            let nodes = model.element_nodes(e);
            let nn = nodes.len();
            let mut grads = [[HyperDual64::from(0.0); 3]; MAX_NODES];
            let mut pass = |pick: usize| -> (HyperDual64, HyperDual64) {
                let seed = |var: usize| if var == pick { 1.0 } else { 0.0 };
                let x =
                    hyper_dual_coordinates(&model.coords, nodes, dx, coords, pick.checked_sub(nn));
                let (mut s, mut v) = (HyperDual64::from(0.0), HyperDual64::from(0.0));
                for q in 0..tab.n_points() {
                    let det = generic::physical_gradients(tab.grad(q), &x, &mut grads[..nn]);
                    let w = det * tab.weights[q];
                    let n = tab.shape(q);
                    let mut tq = HyperDual64::from(0.0);
                    for (a, &node) in nodes.iter().enumerate() {
                        tq += HyperDual64::new(t[node], dt[node], seed(a), 0.0) * n[a];
                    }
                    s += w * integrand.apply(tq);
                    v += w;
                }
                (s, v)
            };
            let (mut s_out, mut v_out) = ([0.0; 2], [0.0; 2]);
            for (pick, z) in slot.iter_mut().enumerate() {
                // (The temperature picks come first and set S and V.)
                if pick >= nn && coords.is_still(pick - nn, nodes) {
                    continue;
                }
                let (s, v) = pass(pick);
                s_out = [s.re, s.eps1];
                v_out = [v.re, v.eps1];
                *z = [s.eps2, s.eps1eps2, v.eps2, v.eps1eps2];
            }
            (s_out, v_out)
        })
        .collect();
    let (mut s, mut v) = ([0.0; 2], [0.0; 2]);
    for (ls, lv) in &locals {
        for k in 0..2 {
            s[k] += ls[k];
            v[k] += lv[k];
        }
    }
    let [f_s, f_v, f_ss, f_sv, f_vv] = outer.derivatives(s[0], v[0]);
    // d/dε ∂F/∂z = F_S S_zε + F_V V_zε + (F_SS dS + F_SV dV) S_z + (F_SV dS + F_VV dV) V_z.
    let (a_s, a_v) = (f_ss * s[1] + f_sv * v[1], f_sv * s[1] + f_vv * v[1]);
    let combine = |z: [f64; 4]| f_s * z[1] + f_v * z[3] + a_s * z[0] + a_v * z[2];
    let mut out_t = vec![0.0; model.n_nodes()];
    let mut out_x = CoordinatePart::zeros(coords, model.n_nodes());
    // Summed in element order: the result does not depend on the thread count.
    let mut picks = Vec::new();
    for (k, &e) in els.iter().enumerate() {
        let nodes = model.element_nodes(e);
        let nn = nodes.len();
        let element = &grads[starts[k]..starts[k + 1]];
        for (a, &n) in nodes.iter().enumerate() {
            out_t[n] += combine(element[a]);
        }
        picks.clear();
        picks.extend(element[nn..].iter().map(|&z| combine(z)));
        out_x.add_element(nodes, &picks);
    }
    (out_t, out_x)
}

/// The derivative along a direction (δT, δX) of the objective's gradient: ∂/∂T (at every
/// node, first) and ∂/∂X (per node, second) of J's directional derivative, for the
/// second-order adjoint with respect to node coordinates. `dx` is δX per node (empty: the
/// nodes hold still); the coordinate part is formed as `coords` requests. Nodal terms (peak, nodal sums,
/// cotangents) do not depend on X; integral terms (averages, p-norms, integrals of T²)
/// differentiate their Jacobians by dual numbers; point values and sensor misfits follow the
/// located point's reference coordinates as the nodes move ([`point_sample_along`]).
pub fn hessian_product_with_coords(
    model: &ThermalModel,
    terms: &[ObjectiveTerm],
    t: &[f64],
    dt: &[f64],
    dx: &[[f64; 3]],
    coords: CoordinateRequest,
) -> Result<(Vec<f64>, CoordinatePart), ThermalError> {
    let n_nodes = model.n_nodes();
    let zero_x = vec![[0.0; 3]; n_nodes];
    let dx = if dx.is_empty() { zero_x.as_slice() } else { dx };
    let mut out_t = vec![0.0; n_nodes];
    let mut out_x = CoordinatePart::zeros(coords, n_nodes);
    for term in terms {
        let w = term.weight;
        let integral = |group: &str, integrand: Integrand, outer: Outer| {
            let els = model.group_elements(group)?;
            Ok::<_, ThermalError>(integral_hessian_product(
                model, els, t, dt, dx, coords, integrand, outer, true,
            ))
        };
        let (ht, hx) = match &term.kind {
            ObjectiveKind::Point { point } => {
                let loc = locate(model, *point)?;
                let p = point_sample(model, &loc, t, dt, dx)?;
                add_point_second_order(model, &loc, &p, coords, w, 0.0, &mut out_t, &mut out_x);
                continue;
            }
            ObjectiveKind::Misfit { sensors } => {
                for s in sensors {
                    let loc = locate(model, [s[0], s[1], s[2]])?;
                    let p = point_sample(model, &loc, t, dt, dx)?;
                    // ½ r², r = V − d: (∂J)' = δr ∂V + r (∂V)'.
                    let (r, dr) = (p.value - s[3], p.d_value);
                    add_point_second_order(
                        model,
                        &loc,
                        &p,
                        coords,
                        w * r,
                        w * dr,
                        &mut out_t,
                        &mut out_x,
                    );
                }
                continue;
            }
            ObjectiveKind::NodalSumSquares
            | ObjectiveKind::Linear { .. }
            | ObjectiveKind::Peak { .. } => {
                // Weighted already, and free of X.
                let ht = hessian_product(model, std::slice::from_ref(term), t, dt)?;
                out_t.iter_mut().zip(&ht).for_each(|(o, v)| *o += v);
                continue;
            }
            ObjectiveKind::Average { group } => integral(group, Integrand::Value, Outer::Mean)?,
            ObjectiveKind::IntegralSquare { group } => {
                integral(group, Integrand::Square, Outer::Integral)?
            }
            ObjectiveKind::Max { group, p } => {
                let ts = t.iter().fold(0.0f64, |a, v| a.max(v.abs()));
                let ts = if ts > 0.0 && ts.is_finite() { ts } else { 1.0 };
                integral(
                    group,
                    Integrand::Power { p: *p, scale: ts },
                    Outer::Root { p: *p, scale: ts },
                )?
            }
        };
        out_t.iter_mut().zip(&ht).for_each(|(o, v)| *o += w * v);
        out_x.add_scaled(&hx, w);
    }
    Ok((out_t, out_x))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BcKind, BcSpec, ConductivityLaw, RegionSpec};
    use gradfem_mesh::CellType;
    use gradfem_mesh::generate::{BoxSpec, box_mesh};

    fn model() -> ThermalModel {
        let mesh = box_mesh(&BoxSpec {
            origin: [0.0; 3],
            lengths: [1.0, 0.7, 0.5],
            divisions: [3, 2, 2],
            cell_type: CellType::Tet4,
        });
        ThermalModel::new(&mesh, &m_regions(), &m_bcs()).unwrap()
    }

    fn m_regions() -> Vec<RegionSpec> {
        vec![RegionSpec {
            group: "domain".into(),
            k0: 2.0,
            law: ConductivityLaw::Constant,
            source: 1.0,
        }]
    }

    fn m_bcs() -> Vec<BcSpec> {
        vec![BcSpec { group: "xmin".into(), kind: BcKind::Temperature { value: 300.0 } }]
    }

    /// A hot spot near (0.7, 0.3, 0.2): one node clearly hottest, others within a few kelvin.
    fn hot_spot(m: &ThermalModel) -> Vec<f64> {
        m.coords
            .iter()
            .map(|p| {
                let r2 = (p[0] - 0.7).powi(2) + (p[1] - 0.3).powi(2) + (p[2] - 0.2).powi(2);
                300.0 + 150.0 * (-4.0 * r2).exp()
            })
            .collect()
    }

    fn peak_term(rho: f64) -> Vec<ObjectiveTerm> {
        vec![ObjectiveTerm {
            weight: 1.0,
            kind: ObjectiveKind::Peak { group: "domain".into(), rho },
        }]
    }

    #[test]
    fn ks_peak_bounds_the_nodal_maximum_and_tends_to_it() {
        let m = model();
        let t = hot_spot(&m);
        let (max, at) = group_peak(&m, "domain", &t).unwrap();
        assert_eq!(t[at], max);
        assert_eq!(max, t.iter().copied().fold(f64::NEG_INFINITY, f64::max));
        let n = m.n_nodes() as f64;
        let mut previous = f64::INFINITY;
        for rho in [0.1, 1.0, 10.0, 100.0] {
            let ks = evaluate(&m, &peak_term(rho), &t, false).unwrap().value;
            assert!(ks >= max && ks <= max + n.ln() / rho + 1e-12, "rho {rho}: {ks} vs {max}");
            // Non-increasing: once every other node is more than ~37/rho below the peak, the
            // aggregate equals the maximum to the last bit.
            assert!(ks <= previous, "KS does not grow with rho: {ks} after {previous}");
            previous = ks;
        }
        let smooth = evaluate(&m, &peak_term(0.1), &t, false).unwrap().value;
        assert!(smooth > max + 1.0, "a soft aggregate lies clearly above the peak: {smooth}");
        assert!((previous - max).abs() < 1e-9 * max, "a sharp aggregate is the peak");
    }

    /// ∂KS/∂T against central differences, and the weights sum to one (a uniform shift of T
    /// shifts KS by the same amount).
    #[test]
    fn ks_peak_derivative_matches_finite_differences() {
        let m = model();
        let t = hot_spot(&m);
        let e = evaluate(&m, &peak_term(0.5), &t, true).unwrap();
        let total: f64 = e.d_temperature.iter().sum();
        assert!((total - 1.0).abs() < 1e-12, "{total}");
        assert!(e.d_coords.unwrap().iter().all(|d| *d == [0.0; 3]));
        matches_central_differences(&m, &peak_term(0.5), &t, &e.d_temperature, (1e-4, 5, 1e-8));
    }

    /// ∂J/∂T of `terms` at every `every`-th node against central differences of step `h`,
    /// within `tol`.
    fn matches_central_differences(
        m: &ThermalModel,
        terms: &[ObjectiveTerm],
        t: &[f64],
        d_temperature: &[f64],
        (h, every, tol): (f64, usize, f64),
    ) {
        for i in (0..t.len()).step_by(every) {
            let (mut tp, mut tm) = (t.to_vec(), t.to_vec());
            tp[i] += h;
            tm[i] -= h;
            let fd = (evaluate(m, terms, &tp, false).unwrap().value
                - evaluate(m, terms, &tm, false).unwrap().value)
                / (2.0 * h);
            assert!((fd - d_temperature[i]).abs() < tol, "node {i}: {fd} vs {}", d_temperature[i]);
        }
    }

    fn max_term(p: f64) -> Vec<ObjectiveTerm> {
        vec![ObjectiveTerm { weight: 1.0, kind: ObjectiveKind::Max { group: "domain".into(), p } }]
    }

    /// A sharp p-norm (450ᵖ overflows f64 from p ≈ 116 on) stays finite, below the nodal
    /// maximum and near it, and its derivative matches central differences; a moderate p
    /// gives the unscaled formula's value.
    #[test]
    fn a_sharp_p_norm_does_not_overflow() {
        let m = model();
        let t = hot_spot(&m);
        let (max, _) = group_peak(&m, "domain", &t).unwrap();
        let moderate = evaluate(&m, &max_term(8.0), &t, false).unwrap().value;
        // The unscaled formula (∫ T⁸ / V)^{1/8}, fine at this p.
        let els = m.group_elements("domain").unwrap();
        let parts = integrate(&m, els, &t, &|v| (v.powi(8), 8.0 * v.powi(7)), false);
        let unscaled = (parts.value / parts.volume).powf(1.0 / 8.0);
        assert!((moderate - unscaled).abs() < 1e-12 * moderate, "{moderate} vs {unscaled}");
        let e = evaluate(&m, &max_term(2000.0), &t, true).unwrap();
        assert!(
            e.value.is_finite() && e.value <= max && e.value > 0.9 * max,
            "{} vs {max}",
            e.value
        );
        matches_central_differences(&m, &max_term(2000.0), &t, &e.d_temperature, (1e-3, 7, 1e-6));
    }

    #[test]
    fn ks_peak_rejects_a_non_positive_sharpness() {
        let m = model();
        let t = hot_spot(&m);
        let err = evaluate(&m, &peak_term(0.0), &t, false).unwrap_err().to_string();
        assert!(err.contains("rho") && err.contains("domain"), "{err}");
    }

    /// The integral terms' products with moving nodes in closed form equal the hyper-dual
    /// passes, per node and along a field.
    #[rstest::rstest]
    #[case(CellType::Tet4)]
    #[case(CellType::Hex8)]
    #[case(CellType::Tet10)]
    fn integral_products_in_closed_form_equal_the_hyper_dual_ones(#[case] cell: CellType) {
        let mesh = box_mesh(&BoxSpec {
            origin: [0.0; 3],
            lengths: [1.0, 0.7, 0.5],
            divisions: [2, 2, 1],
            cell_type: cell,
        });
        let m = ThermalModel::new(&mesh, &m_regions(), &m_bcs()).unwrap();
        let t = hot_spot(&m);
        let n = m.n_nodes();
        let dt: Vec<f64> = (0..n).map(|i| 3.0 * ((i as f64) * 0.77).sin()).collect();
        let dx: Vec<[f64; 3]> = (0..n)
            .map(|i| {
                let f = i as f64;
                [0.02 * (0.9 * f).sin(), 0.03 * (0.4 * f).cos(), 0.01 * (1.7 * f).sin()]
            })
            .collect();
        let fields = vec![dx.clone(), m.coords.iter().map(|p| [0.0, 0.0, p[2]]).collect()];
        let els = m.group_elements("domain").unwrap();
        let cases = [
            (Integrand::Value, Outer::Mean),
            (Integrand::Square, Outer::Integral),
            (Integrand::Power { p: 8.0, scale: 400.0 }, Outer::Root { p: 8.0, scale: 400.0 }),
        ];
        let close = |what: &str, a: &[f64], b: &[f64]| {
            let scale = b.iter().fold(1e-300f64, |s, v| s.max(v.abs()));
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() <= 1e-11 * scale, "{cell:?} {what}: {x} vs {y}");
            }
        };
        for (integrand, outer) in cases {
            for request in [CoordinateRequest::Every, CoordinateRequest::Along(&fields)] {
                let run = |closed| {
                    integral_hessian_product(
                        &m, els, &t, &dt, &dx, request, integrand, outer, closed,
                    )
                };
                let ((t1, x1), (t2, x2)) = (run(true), run(false));
                close("T", &t1, &t2);
                match (x1, x2) {
                    (CoordinatePart::Every(a), CoordinatePart::Every(b)) => {
                        let flat = |v: Vec<[f64; 3]>| v.into_iter().flatten().collect::<Vec<_>>();
                        close("X", &flat(a), &flat(b));
                    }
                    (CoordinatePart::Along(a), CoordinatePart::Along(b)) => close("along", &a, &b),
                    _ => panic!("the same kind of coordinate part"),
                }
            }
        }
    }

    /// With the nodes moving too, the derivative of (∂J/∂T, ∂J/∂X) along (δT, δX) against
    /// central differences of the first-order derivatives, for every term that depends on the
    /// coordinates; with δX = 0 its temperature part equals the closed form.
    /// Point values and sensor misfits follow their located point's reference coordinates
    /// (constant shape-function Hessians on Tet10, varying ones on Hex8 and Hex20).
    #[rstest::rstest]
    #[case(CellType::Tet4)]
    #[case(CellType::Tet10)]
    #[case(CellType::Hex8)]
    #[case(CellType::Hex20)]
    fn coordinate_hessian_products_match_differences_of_the_gradient(#[case] cell: CellType) {
        let mut m = model();
        if cell != CellType::Tet4 {
            let mut mesh = box_mesh(&BoxSpec {
                origin: [0.0; 3],
                lengths: [1.0, 0.7, 0.5],
                divisions: [3, 2, 2],
                cell_type: cell,
            });
            // Curved cells: x(ξ) is not affine, so the shape functions' reference Hessians
            // move the Jacobian at a point as well as the temperature's gradient.
            for p in &mut mesh.coords {
                let [x, y, z] = *p;
                *p = [x + 0.04 * (2.0 * y).sin(), y + 0.03 * (3.0 * z + x).cos(), z + 0.02 * x * y];
            }
            m = ThermalModel::new(&mesh, &m_regions(), &m_bcs()).unwrap();
        }
        let t = hot_spot(&m);
        let n = m.n_nodes();
        let dt: Vec<f64> = (0..n).map(|i| 3.0 * ((i as f64) * 0.77).sin()).collect();
        let dx: Vec<[f64; 3]> = (0..n)
            .map(|i| {
                let f = i as f64;
                [0.02 * (0.9 * f).sin(), 0.03 * (0.4 * f).cos(), 0.01 * (1.7 * f).sin()]
            })
            .collect();
        let kinds = vec![
            ObjectiveKind::Average { group: "domain".into() },
            ObjectiveKind::Max { group: "domain".into(), p: 8.0 },
            ObjectiveKind::IntegralSquare { group: "domain".into() },
            ObjectiveKind::Peak { group: "domain".into(), rho: 0.2 },
            ObjectiveKind::Point { point: [0.41, 0.33, 0.17] },
            ObjectiveKind::Misfit {
                sensors: vec![[0.41, 0.33, 0.17, 330.0], [0.77, 0.52, 0.38, 305.0]],
            },
        ];
        for kind in kinds {
            let terms = vec![ObjectiveTerm { weight: 1.7, kind: kind.clone() }];
            let (ht, hx) =
                hessian_product_with_coords(&m, &terms, &t, &dt, &dx, CoordinateRequest::Every)
                    .unwrap();
            let hx = hx.every().unwrap().to_vec();
            let h = 1e-6;
            let at = |s: f64| {
                let mut mm = m.clone();
                for (p, d) in mm.coords.iter_mut().zip(&dx) {
                    for i in 0..3 {
                        p[i] += s * d[i];
                    }
                }
                let ts: Vec<f64> = t.iter().zip(&dt).map(|(a, b)| a + s * b).collect();
                evaluate(&mm, &terms, &ts, true).unwrap()
            };
            let (ep, em) = (at(h), at(-h));
            let scale = ht.iter().fold(1e-12f64, |a, v| a.max(v.abs()));
            for i in 0..n {
                let fd = (ep.d_temperature[i] - em.d_temperature[i]) / (2.0 * h);
                assert!(
                    (ht[i] - fd).abs() <= 1e-6 * scale,
                    "{kind:?} T, node {i}: {} vs {fd}",
                    ht[i]
                );
            }
            let (cp, cm) = (ep.d_coords.unwrap(), em.d_coords.unwrap());
            let scale = hx.iter().flatten().fold(1e-12f64, |a, v| a.max(v.abs()));
            for i in 0..n {
                for k in 0..3 {
                    let fd = (cp[i][k] - cm[i][k]) / (2.0 * h);
                    assert!(
                        (hx[i][k] - fd).abs() <= 1e-6 * scale,
                        "{kind:?} X, node {i} axis {k}: {} vs {fd}",
                        hx[i][k]
                    );
                }
            }
            let (still, _) =
                hessian_product_with_coords(&m, &terms, &t, &dt, &[], CoordinateRequest::None)
                    .unwrap();
            let closed = hessian_product(&m, &terms, &t, &dt).unwrap();
            for (a, b) in still.iter().zip(&closed) {
                assert!((a - b).abs() <= 1e-10 * scale, "{kind:?}: {a} vs {b}");
            }
        }
    }

    /// (∂²J/∂T²)δT of every kind of term against central differences of ∂J/∂T.
    #[test]
    fn hessian_products_match_differences_of_the_gradient() {
        let m = model();
        let t = hot_spot(&m);
        let n = m.n_nodes();
        let dt: Vec<f64> = (0..n).map(|i| 3.0 * ((i as f64) * 0.77).sin()).collect();
        let kinds = vec![
            ObjectiveKind::Point { point: [0.4, 0.3, 0.2] },
            ObjectiveKind::Average { group: "domain".into() },
            ObjectiveKind::Max { group: "domain".into(), p: 8.0 },
            ObjectiveKind::Peak { group: "domain".into(), rho: 0.2 },
            ObjectiveKind::IntegralSquare { group: "domain".into() },
            ObjectiveKind::Misfit { sensors: vec![[0.5, 0.3, 0.2, 310.0], [0.9, 0.1, 0.4, 305.0]] },
            ObjectiveKind::NodalSumSquares,
        ];
        for kind in kinds {
            let terms = vec![ObjectiveTerm { weight: 1.7, kind: kind.clone() }];
            let hd = hessian_product(&m, &terms, &t, &dt).unwrap();
            let h = 1e-4;
            let tp: Vec<f64> = t.iter().zip(&dt).map(|(a, b)| a + h * b).collect();
            let tm: Vec<f64> = t.iter().zip(&dt).map(|(a, b)| a - h * b).collect();
            let gp = evaluate(&m, &terms, &tp, false).unwrap().d_temperature;
            let gm = evaluate(&m, &terms, &tm, false).unwrap().d_temperature;
            let scale = gp.iter().chain(&hd).fold(1e-12f64, |a, v| a.max(v.abs()));
            for i in 0..n {
                let fd = (gp[i] - gm[i]) / (2.0 * h);
                assert!(
                    (hd[i] - fd).abs() <= 1e-6 * scale,
                    "{kind:?}, node {i}: {} vs {fd}",
                    hd[i]
                );
            }
        }
    }
}
