//! Newton-CG in a trust region (Steihaug–Toint) within bounds, for objectives whose exact
//! Hessian-vector products are available (the second-order adjoint).
//!
//! Each iteration minimizes the quadratic model m(s) = gᵀs + ½ sᵀHs over the free variables
//! (those not held at a bound by their gradient) inside ‖s‖ ≤ Δ by conjugate gradients, which
//! stop at the trust-region boundary, on negative curvature (following it to the boundary) or
//! when the residual falls below the forcing term min(½, √‖g‖)·‖g‖ (superlinear convergence
//! near the solution). The step is projected onto the box; the ratio of actual to predicted
//! decrease accepts or rejects it and scales Δ. Each iteration costs one function-and-gradient
//! evaluation and a few Hessian-vector products; no line search.
//!
//! The result types and the convergence tests are those of [`crate::optimize`], so a caller
//! handles either method the same way.

use crate::optimize::{
    AugLagParams, AugLagProblem, AugLagResult, Control, ConvergenceReason, IterationRecord,
    OptimizeResult, Status, augmented_lagrangian_with,
};

/// Settings of [`minimize_newton_cg`].
#[derive(Clone, Debug, PartialEq)]
pub struct NewtonCgParams {
    /// Maximum number of (outer) iterations. Default 200.
    pub max_iterations: usize,
    /// Stop when `‖P(x − g) − x‖∞` is at most this. Default 1e-6.
    pub gtol: f64,
    /// Stop when the relative decrease `(f − f⁺)/max(|f|, |f⁺|, 1)` of an accepted step, or the
    /// relative decrease the model predicts for the next step, is at most this (0 disables): the
    /// objective cannot be lowered further above round-off. Default 1e-12, as L-BFGS.
    pub ftol: f64,
    /// The first trust-region radius. Default 1 (the optimizer's variables are scaled to ≈ 1).
    pub initial_radius: f64,
    /// The largest radius. Default 1e3.
    pub max_radius: f64,
    /// Conjugate-gradient iterations per step (at most the number of variables). Default 50.
    pub max_cg: usize,
    /// Accept a step when actual/predicted decrease exceeds this. Default 1e-4.
    pub eta: f64,
}

impl Default for NewtonCgParams {
    fn default() -> Self {
        Self {
            max_iterations: 200,
            gtol: 1e-6,
            ftol: 1e-12,
            initial_radius: 1.0,
            max_radius: 1e3,
            max_cg: 50,
            eta: 1e-4,
        }
    }
}

/// The result of [`minimize_newton_cg`]: the common result and the work done.
#[derive(Clone, Debug, PartialEq)]
pub struct NewtonCgResult {
    /// Point, value, iterations, function evaluations, history and status.
    pub result: OptimizeResult,
    /// Hessian-vector products computed.
    pub hessian_products: usize,
    /// Conjugate-gradient iterations over all steps.
    pub cg_iterations: usize,
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn norm2(v: &[f64]) -> f64 {
    dot(v, v).sqrt()
}

fn projected_gradient_norm(x: &[f64], g: &[f64], lower: &[f64], upper: &[f64]) -> f64 {
    (0..x.len())
        .map(|i| ((x[i] - g[i]).max(lower[i]).min(upper[i]) - x[i]).abs())
        .fold(0.0, f64::max)
}

/// τ ≥ 0 with ‖s + τ d‖ = Δ.
fn to_boundary(s: &[f64], d: &[f64], radius: f64) -> f64 {
    let (dd, sd, ss) = (dot(d, d), dot(s, d), dot(s, s));
    if dd == 0.0 {
        return 0.0;
    }
    let disc = (sd * sd + dd * (radius * radius - ss)).max(0.0);
    (-sd + disc.sqrt()) / dd
}

/// The largest width of the ε-active set (in the optimizer's variables).
const ACTIVE_WIDTH: f64 = 1e-3;

/// Free variables: not at or near a bound that the gradient pushes against. "Near" is the
/// ε-active set of Bertsekas' projected Newton method, ε = min(10⁻³, ‖x − P(x − ∇f)‖∞): a
/// variable the gradient drives into a bound a little way off counts as held there, so the
/// Newton step is not spent on the bound it would cross (and cut short by the projection)
/// again and again; ε shrinks to zero as the iterates converge.
fn free_set(x: &[f64], g: &[f64], lower: &[f64], upper: &[f64]) -> Vec<bool> {
    let width = ACTIVE_WIDTH.min(projected_gradient_norm(x, g, lower, upper));
    (0..x.len())
        .map(|i| {
            let tol = (1e-12 * (1.0 + x[i].abs())).max(width);
            let at_lower = x[i] - lower[i] <= tol;
            let at_upper = upper[i] - x[i] <= tol;
            !((at_lower && g[i] > 0.0) || (at_upper && g[i] < 0.0))
        })
        .collect()
}

/// Minimizes `f` within `[lower, upper]` by Newton-CG in a trust region (module docs).
///
/// `f(x, grad)` returns f(x) and writes ∇f(x); `hv(x, v)` returns ∇²f(x)·v at an `x` that `f`
/// has evaluated and accepted (the current iterate). Errors from either end the run. `x0` is
/// projected onto the box. The callback sees every iteration (0 = the start) and may stop the
/// run. Panics if the lengths differ or some `lower_i > upper_i` (programming mistakes).
pub fn minimize_newton_cg<E>(
    mut f: impl FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
    mut hv: impl FnMut(&[f64], &[f64]) -> Result<Vec<f64>, E>,
    x0: &[f64],
    lower: &[f64],
    upper: &[f64],
    params: &NewtonCgParams,
    mut callback: impl FnMut(&IterationRecord) -> Control,
) -> Result<NewtonCgResult, E> {
    let n = x0.len();
    assert!(
        lower.len() == n && upper.len() == n,
        "minimize_newton_cg: x0 has {n} entries, lower {}, upper {}",
        lower.len(),
        upper.len()
    );
    assert!(lower.iter().zip(upper).all(|(l, u)| l <= u), "minimize_newton_cg: lower > upper");
    let project = |x: &mut [f64]| {
        for ((xi, l), u) in x.iter_mut().zip(lower).zip(upper) {
            *xi = xi.max(*l).min(*u);
        }
    };
    let mut x = x0.to_vec();
    project(&mut x);
    let mut g = vec![0.0; n];
    let mut fx = f(&x, &mut g)?;
    let mut evaluations = 1;
    let (mut products, mut cg_total) = (0, 0);
    let mut history = Vec::new();
    let finish = |x: Vec<f64>, fx, iterations, evaluations, history, status, products, cg| {
        Ok(NewtonCgResult {
            result: OptimizeResult { x, f: fx, iterations, evaluations, history, status },
            hessian_products: products,
            cg_iterations: cg,
        })
    };
    if !fx.is_finite() || g.iter().any(|v| !v.is_finite()) {
        return finish(x, fx, 0, evaluations, history, Status::NonFiniteStart, 0, 0);
    }
    let mut radius = params.initial_radius;
    let mut iteration = 0;
    // Steps accepted so far.
    let mut accepted = 0;
    loop {
        let grad_norm = projected_gradient_norm(&x, &g, lower, upper);
        let record = IterationRecord { iteration, x: x.clone(), f: fx, grad_norm, evaluations };
        let control = callback(&record);
        history.push(record);
        if grad_norm <= params.gtol {
            let status =
                Status::Converged(ConvergenceReason::ProjectedGradient { norm: grad_norm });
            return finish(x, fx, iteration, evaluations, history, status, products, cg_total);
        }
        if control == Control::Stop {
            return finish(
                x,
                fx,
                iteration,
                evaluations,
                history,
                Status::Stopped,
                products,
                cg_total,
            );
        }
        if iteration >= params.max_iterations {
            let status = Status::MaxIterations;
            return finish(x, fx, iteration, evaluations, history, status, products, cg_total);
        }
        iteration += 1;
        // Steihaug–Toint CG on the free variables.
        let free = free_set(&x, &g, lower, upper);
        let mask = |v: &mut [f64]| {
            for (vi, &fr) in v.iter_mut().zip(&free) {
                if !fr {
                    *vi = 0.0;
                }
            }
        };
        let mut r: Vec<f64> = g.iter().map(|v| -v).collect();
        mask(&mut r);
        let g_free = norm2(&r);
        let forcing = g_free.sqrt().min(0.5) * g_free;
        let mut s = vec![0.0; n];
        let mut hs = vec![0.0; n];
        let mut d = r.clone();
        let mut rr = dot(&r, &r);
        for _ in 0..params.max_cg.min(n).max(1) {
            let mut hd = hv(&x, &d)?;
            products += 1;
            cg_total += 1;
            mask(&mut hd);
            let dhd = dot(&d, &hd);
            if dhd <= 0.0 || !dhd.is_finite() {
                // Negative curvature: follow it to the boundary (from s = 0, along −g).
                let tau = to_boundary(&s, &d, radius);
                s.iter_mut().zip(&d).for_each(|(si, di)| *si += tau * di);
                hs.iter_mut().zip(&hd).for_each(|(h, v)| *h += tau * v);
                break;
            }
            let alpha = rr / dhd;
            let trial: Vec<f64> = s.iter().zip(&d).map(|(si, di)| si + alpha * di).collect();
            if norm2(&trial) >= radius {
                let tau = to_boundary(&s, &d, radius);
                s.iter_mut().zip(&d).for_each(|(si, di)| *si += tau * di);
                hs.iter_mut().zip(&hd).for_each(|(h, v)| *h += tau * v);
                break;
            }
            s = trial;
            hs.iter_mut().zip(&hd).for_each(|(h, v)| *h += alpha * v);
            r.iter_mut().zip(&hd).for_each(|(ri, v)| *ri -= alpha * v);
            let rr_new = dot(&r, &r);
            if rr_new.sqrt() <= forcing {
                break;
            }
            let beta = rr_new / rr;
            rr = rr_new;
            d.iter_mut().zip(&r).for_each(|(di, ri)| *di = ri + beta * *di);
        }
        // Project the step onto the box; the model needs H·s of the projected step.
        let mut x_new: Vec<f64> = x.iter().zip(&s).map(|(a, b)| a + b).collect();
        project(&mut x_new);
        let step: Vec<f64> = x_new.iter().zip(&x).map(|(a, b)| a - b).collect();
        if step != s {
            hs = hv(&x, &step)?;
            products += 1;
        }
        let predicted = -(dot(&g, &step) + 0.5 * dot(&step, &hs));
        let step_norm = norm2(&step);
        let predicted_relative = predicted / fx.abs().max(1.0);
        // Only for a step inside the region (the model's own minimum on the free variables): a
        // step cut short by a small radius predicts little without being near the minimum.
        let interior = step_norm < 0.99 * radius;
        // The model's own minimum predicts a negligible decrease: converged. A run that has
        // not moved yet takes that last step first: an outer loop (the augmented Lagrangian's
        // multipliers and complementarity) restarting it from its last point would otherwise
        // never see the inner minimum move.
        let negligible =
            params.ftol > 0.0 && interior && predicted > 0.0 && predicted_relative <= params.ftol;
        if negligible && accepted > 0 {
            let reason = ConvergenceReason::RelativeDecrease { decrease: predicted_relative };
            let status = Status::Converged(reason);
            return finish(x, fx, iteration, evaluations, history, status, products, cg_total);
        }
        let last_step = negligible;
        if predicted <= 0.0 || step_norm == 0.0 {
            radius = 0.25 * radius.min(step_norm.max(radius * 1e-3));
            if radius <= 1e-14 * (1.0 + norm2(&x)) {
                let status = Status::LineSearchFailed { grad_norm };
                return finish(x, fx, iteration, evaluations, history, status, products, cg_total);
            }
            continue;
        }
        let mut g_new = vec![0.0; n];
        let f_new = f(&x_new, &mut g_new)?;
        evaluations += 1;
        let finite = f_new.is_finite() && g_new.iter().all(|v| v.is_finite());
        if last_step {
            if finite && f_new <= fx {
                x = x_new;
                fx = f_new;
            }
            let reason = ConvergenceReason::RelativeDecrease { decrease: predicted_relative };
            let status = Status::Converged(reason);
            return finish(x, fx, iteration, evaluations, history, status, products, cg_total);
        }
        let rho = if finite { (fx - f_new) / predicted } else { f64::NEG_INFINITY };
        if rho < 0.25 {
            radius = 0.25 * step_norm;
        } else if rho > 0.75 && step_norm >= 0.99 * radius {
            radius = (2.0 * radius).min(params.max_radius);
        }
        if rho > params.eta {
            let decrease = (fx - f_new) / fx.abs().max(f_new.abs()).max(1.0);
            accepted += 1;
            x = x_new;
            fx = f_new;
            g = g_new;
            if params.ftol > 0.0 && decrease <= params.ftol {
                let grad_norm = projected_gradient_norm(&x, &g, lower, upper);
                let record =
                    IterationRecord { iteration, x: x.clone(), f: fx, grad_norm, evaluations };
                callback(&record);
                history.push(record);
                let status = Status::Converged(ConvergenceReason::RelativeDecrease { decrease });
                return finish(x, fx, iteration, evaluations, history, status, products, cg_total);
            }
        } else if radius <= 1e-14 * (1.0 + norm2(&x)) {
            let status = Status::LineSearchFailed { grad_norm };
            return finish(x, fx, iteration, evaluations, history, status, products, cg_total);
        }
    }
}

/// Newton-CG inside the PHR augmented Lagrangian (see [`crate::optimize::augmented_lagrangian`]
/// for the outer loop): minimizes f(x) subject to cᵢ(x) ≤ 0 and the bounds, each inner problem
/// by [`minimize_newton_cg`] with the augmented Lagrangian's exact Hessian products
/// ∇²f v + Σ_active [tᵢ ∇²cᵢ v + ρ (∇cᵢ·v) ∇cᵢ], tᵢ = max(0, λᵢ + ρcᵢ).
///
/// `hessian_vector(x, w, v)` returns Σ_k w_k ∇²g_k(x)·v with g₀ = f and gᵢ = cᵢ (`w` has
/// 1 + m entries; a zero weight needs no product). Returns the run and the number of
/// Hessian-vector products.
#[allow(clippy::too_many_arguments)] // the three closures, the problem data and the settings
pub fn augmented_lagrangian_newton_cg<E>(
    objective: impl FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
    constraints: impl FnMut(&[f64], &mut [f64], &mut [f64]) -> Result<(), E>,
    mut hessian_vector: impl FnMut(&[f64], &[f64], &[f64]) -> Result<Vec<f64>, E>,
    n_constraints: usize,
    x0: &[f64],
    lower: &[f64],
    upper: &[f64],
    params: &AugLagParams,
    inner: &NewtonCgParams,
    callback: impl FnMut(&IterationRecord) -> Control,
) -> Result<(AugLagResult, usize), E> {
    let problem = AugLagProblem::new(objective, constraints, n_constraints, x0.len());
    let (n, m) = problem.dims();
    let mut products = 0;
    let result = augmented_lagrangian_with(
        &problem,
        x0,
        params,
        |la, x, lambda, rho, cb| {
            let hv = |xv: &[f64], v: &[f64]| -> Result<Vec<f64>, E> {
                if !problem.evaluated_at(xv) {
                    problem.evaluate(xv, &mut vec![0.0; n])?;
                }
                let active = problem.active(lambda, rho);
                let mut w = vec![0.0; 1 + m];
                w[0] = 1.0;
                for (i, t, _) in &active {
                    w[1 + i] = *t;
                }
                let mut out = hessian_vector(xv, &w, v)?;
                for (_, _, grad) in &active {
                    let gv = dot(grad, v);
                    out.iter_mut().zip(grad).for_each(|(o, g)| *o += rho * gv * g);
                }
                Ok(out)
            };
            let r = minimize_newton_cg(la, hv, x, lower, upper, inner, cb)?;
            products += r.hessian_products;
            Ok(r.result)
        },
        callback,
    )?;
    Ok((result, products))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optimize::{LbfgsbParams, minimize_lbfgsb};

    fn rosenbrock(x: &[f64], g: &mut [f64]) -> Result<f64, ()> {
        let n = x.len();
        let mut f = 0.0;
        g.fill(0.0);
        for i in 0..n - 1 {
            let a = x[i + 1] - x[i] * x[i];
            let b = 1.0 - x[i];
            f += 100.0 * a * a + b * b;
            g[i] += -400.0 * x[i] * a - 2.0 * b;
            g[i + 1] += 200.0 * a;
        }
        Ok(f)
    }

    fn rosenbrock_hv(x: &[f64], v: &[f64]) -> Result<Vec<f64>, ()> {
        let n = x.len();
        let mut out = vec![0.0; n];
        for i in 0..n - 1 {
            // ∂²/∂xᵢ² = 1200xᵢ² − 400xᵢ₊₁ + 2, ∂²/∂xᵢ∂xᵢ₊₁ = −400xᵢ, ∂²/∂xᵢ₊₁² = 200.
            let hii = 1200.0 * x[i] * x[i] - 400.0 * x[i + 1] + 2.0;
            let hij = -400.0 * x[i];
            out[i] += hii * v[i] + hij * v[i + 1];
            out[i + 1] += hij * v[i] + 200.0 * v[i + 1];
        }
        Ok(out)
    }

    #[test]
    fn rosenbrock_converges_in_fewer_evaluations_than_lbfgs() {
        let x0 = vec![-1.2, 1.0, -1.2, 1.0, -1.2, 1.0];
        let (lo, hi) = (vec![f64::NEG_INFINITY; 6], vec![f64::INFINITY; 6]);
        let params = NewtonCgParams { gtol: 1e-9, ftol: 0.0, ..Default::default() };
        let r = minimize_newton_cg(rosenbrock, rosenbrock_hv, &x0, &lo, &hi, &params, |_| {
            Control::Continue
        })
        .unwrap();
        assert!(r.result.status.is_converged(), "{:?}", r.result.status);
        for xi in &r.result.x {
            assert!((xi - 1.0).abs() < 1e-7, "{:?}", r.result.x);
        }
        let lb = minimize_lbfgsb(
            rosenbrock,
            &x0,
            &lo,
            &hi,
            &LbfgsbParams { gtol: 1e-9, ..Default::default() },
            |_| Control::Continue,
        )
        .unwrap();
        assert!(lb.status.is_converged());
        assert!(
            r.result.evaluations < lb.evaluations,
            "Newton-CG {} evaluations, L-BFGS {}",
            r.result.evaluations,
            lb.evaluations
        );
    }

    /// A convex quadratic whose unconstrained minimum lies outside the box: the solution is on
    /// the bounds, where the projected gradient vanishes.
    #[test]
    fn bounded_quadratic_stops_on_the_active_bounds() {
        // f = ½ xᵀAx − bᵀx, A = [[4, 1], [1, 3]], b = (1, 10): unconstrained minimum (−7/11, 39/11).
        let f = |x: &[f64], g: &mut [f64]| -> Result<f64, ()> {
            g[0] = 4.0 * x[0] + x[1] - 1.0;
            g[1] = x[0] + 3.0 * x[1] - 10.0;
            Ok(0.5 * (4.0 * x[0] * x[0] + 2.0 * x[0] * x[1] + 3.0 * x[1] * x[1])
                - x[0]
                - 10.0 * x[1])
        };
        let hv = |_: &[f64], v: &[f64]| -> Result<Vec<f64>, ()> {
            Ok(vec![4.0 * v[0] + v[1], v[0] + 3.0 * v[1]])
        };
        let (lo, hi) = (vec![0.0, 0.0], vec![5.0, 2.0]);
        let r =
            minimize_newton_cg(f, hv, &[3.0, 0.5], &lo, &hi, &NewtonCgParams::default(), |_| {
                Control::Continue
            })
            .unwrap();
        assert!(r.result.status.is_converged(), "{:?}", r.result.status);
        // x₀ at its lower bound 0 (gradient 1 + x₁ > 0), x₁ at its upper bound 2 (gradient < 0).
        assert!(
            r.result.x[0].abs() < 1e-12 && (r.result.x[1] - 2.0).abs() < 1e-12,
            "{:?}",
            r.result.x
        );
    }

    /// A start a hair above a bound the gradient pushes into, with the variables coupled: the
    /// ε-active set holds that variable at its bound, so Newton's step works on the free one
    /// and the run converges in a few evaluations.
    #[test]
    fn a_variable_driven_into_a_nearby_bound_is_held_there() {
        // f = ½ xᵀAx − bᵀx, A = [[1, 0.9], [0.9, 1]], b = (−1, 1): on x₀ = 0 the minimum is x₁ = 1,
        // where ∂f/∂x₀ = 0.9 − (−1) > 0 pushes x₀ into its bound.
        let f = |x: &[f64], g: &mut [f64]| -> Result<f64, ()> {
            g[0] = x[0] + 0.9 * x[1] + 1.0;
            g[1] = 0.9 * x[0] + x[1] - 1.0;
            Ok(0.5 * (x[0] * x[0] + 1.8 * x[0] * x[1] + x[1] * x[1]) + x[0] - x[1])
        };
        let hv = |_: &[f64], v: &[f64]| -> Result<Vec<f64>, ()> {
            Ok(vec![v[0] + 0.9 * v[1], 0.9 * v[0] + v[1]])
        };
        let (lo, hi) = (vec![0.0, -5.0], vec![5.0, 5.0]);
        let params = NewtonCgParams::default();
        let r = minimize_newton_cg(f, hv, &[1e-7, -2.0], &lo, &hi, &params, |_| Control::Continue)
            .unwrap();
        assert!(r.result.status.is_converged(), "{:?}", r.result.status);
        assert!(r.result.x[0] == 0.0 && (r.result.x[1] - 1.0).abs() < 1e-10, "{:?}", r.result.x);
        assert!(r.result.evaluations <= 5, "{} evaluations", r.result.evaluations);
    }

    /// From a saddle (zero gradient but negative curvature would trap plain Newton) the
    /// direction of negative curvature is followed; from a point of negative curvature the
    /// method still descends to the minimum of f = x⁴/4 − x²/2 + y².
    #[test]
    fn negative_curvature_is_followed() {
        let f = |x: &[f64], g: &mut [f64]| -> Result<f64, ()> {
            g[0] = x[0].powi(3) - x[0];
            g[1] = 2.0 * x[1];
            Ok(0.25 * x[0].powi(4) - 0.5 * x[0] * x[0] + x[1] * x[1])
        };
        let hv = |x: &[f64], v: &[f64]| -> Result<Vec<f64>, ()> {
            Ok(vec![(3.0 * x[0] * x[0] - 1.0) * v[0], 2.0 * v[1]])
        };
        let inf = vec![f64::INFINITY; 2];
        let neg = vec![f64::NEG_INFINITY; 2];
        let r =
            minimize_newton_cg(f, hv, &[0.1, 1.0], &neg, &inf, &NewtonCgParams::default(), |_| {
                Control::Continue
            })
            .unwrap();
        assert!(r.result.status.is_converged(), "{:?}", r.result.status);
        assert!(
            (r.result.x[0] - 1.0).abs() < 1e-6 && r.result.x[1].abs() < 1e-6,
            "{:?}",
            r.result.x
        );
        assert!((r.result.f + 0.25).abs() < 1e-10);
    }

    /// min (x−2)² + (y−1)² subject to x² + y² ≤ 1 (a nonlinear constraint, whose Hessian
    /// enters the inner Newton steps): the solution is (2, 1)/√5 on the circle.
    #[test]
    fn augmented_lagrangian_with_newton_cg_meets_a_curved_constraint() {
        let f = |x: &[f64], g: &mut [f64]| -> Result<f64, ()> {
            g[0] = 2.0 * (x[0] - 2.0);
            g[1] = 2.0 * (x[1] - 1.0);
            Ok((x[0] - 2.0).powi(2) + (x[1] - 1.0).powi(2))
        };
        let c = |x: &[f64], c: &mut [f64], jac: &mut [f64]| -> Result<(), ()> {
            c[0] = x[0] * x[0] + x[1] * x[1] - 1.0;
            jac[0] = 2.0 * x[0];
            jac[1] = 2.0 * x[1];
            Ok(())
        };
        // ∇²f = 2I, ∇²c = 2I.
        let hv = |_: &[f64], w: &[f64], v: &[f64]| -> Result<Vec<f64>, ()> {
            Ok(v.iter().map(|vi| 2.0 * (w[0] + w[1]) * vi).collect())
        };
        let inf = vec![f64::INFINITY; 2];
        let neg = vec![f64::NEG_INFINITY; 2];
        let params = AugLagParams { constraint_tol: 1e-10, ..Default::default() };
        let inner = NewtonCgParams { gtol: 1e-10, ..Default::default() };
        let (r, products) = augmented_lagrangian_newton_cg(
            f,
            c,
            hv,
            1,
            &[0.0, 0.0],
            &neg,
            &inf,
            &params,
            &inner,
            |_| Control::Continue,
        )
        .unwrap();
        assert_eq!(r.status, crate::optimize::AugLagStatus::Converged, "{r:?}");
        let s = 5f64.sqrt();
        assert!((r.x[0] - 2.0 / s).abs() < 1e-7 && (r.x[1] - 1.0 / s).abs() < 1e-7, "{:?}", r.x);
        // The multiplier of x² + y² ≤ 1 at the optimum: ∇f + λ∇c = 0 gives λ = √5 − 1.
        assert!((r.multipliers[0] - (s - 1.0)).abs() < 1e-6, "{:?}", r.multipliers);
        assert!(products > 0);
    }
}
