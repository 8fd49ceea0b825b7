//! Projected L-BFGS (`minimize_lbfgsb`): Rosenbrock free and with an active bound (KKT checked),
//! an ill-conditioned 100-dimensional quadratic with half the variables at bounds against its
//! exact solution, stopping from the callback, and the augmented Lagrangian on problems with
//! known solutions.

use gradfem_solvers::optimize::{
    AugLagParams, AugLagStatus, Control, ConvergenceReason, LbfgsbParams, Status,
    augmented_lagrangian, minimize_lbfgsb,
};
use gradfem_solvers::taylor::random_direction;
use rstest::rstest;
use std::convert::Infallible;

fn rosenbrock(x: &[f64], g: &mut [f64]) -> Result<f64, Infallible> {
    let (a, b) = (x[0], x[1]);
    g[0] = -2.0 * (1.0 - a) - 400.0 * a * (b - a * a);
    g[1] = 200.0 * (b - a * a);
    Ok((1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2))
}

fn tight() -> LbfgsbParams {
    LbfgsbParams { gtol: 1e-10, ftol: 0.0, max_iterations: 500, ..Default::default() }
}

const INF: f64 = f64::INFINITY;

#[rstest]
#[case([-1.2, 1.0])]
#[case([2.0, -1.5])]
#[case([0.0, 0.0])]
fn rosenbrock_unbounded(#[case] x0: [f64; 2]) {
    let r =
        minimize_lbfgsb(rosenbrock, &x0, &[-INF; 2], &[INF; 2], &tight(), |_| Control::Continue)
            .unwrap();
    assert!(r.status.is_converged(), "{:?} after {} iterations", r.status, r.iterations);
    assert!((r.x[0] - 1.0).abs() < 1e-6 && (r.x[1] - 1.0).abs() < 1e-6, "{:?}", r.x);
    assert!(r.iterations < 100, "{} iterations", r.iterations);
    // The history is monotone (Armijo) and starts at iteration 0.
    assert_eq!(r.history[0].iteration, 0);
    assert!(r.history.windows(2).all(|w| w[1].f <= w[0].f));
    eprintln!("Rosenbrock from {x0:?}: {} iterations, {} evaluations", r.iterations, r.evaluations);
}

/// With x ≤ 0.5 the minimum lies on the bound at (0.5, 0.25), f = 0.25; there ∂f/∂x = −1 < 0
/// (pushing outward) and ∂f/∂y = 0.
#[rstest]
#[case([-1.2, 1.0])]
#[case([0.4, 2.0])]
#[case([3.0, 3.0])] // infeasible start: projected first
fn rosenbrock_with_active_bound(#[case] x0: [f64; 2]) {
    let (lo, hi) = ([-INF, -INF], [0.5, INF]);
    let r = minimize_lbfgsb(rosenbrock, &x0, &lo, &hi, &tight(), |_| Control::Continue).unwrap();
    assert!(r.status.is_converged(), "{:?}", r.status);
    assert!((r.x[0] - 0.5).abs() < 1e-9, "{:?}", r.x);
    assert!((r.x[1] - 0.25).abs() < 1e-8, "{:?}", r.x);
    assert!((r.f - 0.25).abs() < 1e-12, "{}", r.f);
    // KKT: projected gradient zero, multiplier of the active bound = −∂f/∂x = 1 > 0.
    let mut g = [0.0; 2];
    rosenbrock(&r.x, &mut g).unwrap();
    assert!((g[0] + 1.0).abs() < 1e-6, "{g:?}");
    assert!(g[1].abs() < 1e-8, "{g:?}");
    assert!(r.history.iter().all(|h| h.x[0] <= 0.5), "iterates must stay feasible");
    assert!(r.history.last().unwrap().grad_norm <= 1e-10);
}

/// Orthogonal matrix from three Householder reflections of deterministic random vectors.
fn orthogonal(n: usize, seed: u64) -> Vec<f64> {
    let mut q = vec![0.0; n * n];
    for i in 0..n {
        q[i * n + i] = 1.0;
    }
    for k in 0..3 {
        let v = random_direction(n, seed + k);
        let vv: f64 = v.iter().map(|a| a * a).sum();
        // q ← (I − 2 v vᵀ / vᵀv) q
        for j in 0..n {
            let t: f64 = (0..n).map(|i| v[i] * q[i * n + j]).sum::<f64>() * 2.0 / vv;
            for i in 0..n {
                q[i * n + j] -= t * v[i];
            }
        }
    }
    q
}

/// f = ½ xᵀ A x − bᵀ x (+ const) with A = Qᵀ diag(1 … 1e4) Q (condition 1e4), built so that the bounded
/// minimizer x* is known: 25 variables at the lower bound 0, 25 at the upper bound 1 (with
/// strictly positive multipliers) and 50 free.
#[test]
fn ill_conditioned_quadratic_with_half_the_variables_at_bounds() {
    let n = 100;
    let q = orthogonal(n, 42);
    let eig: Vec<f64> = (0..n).map(|i| 10f64.powf(4.0 * i as f64 / (n - 1) as f64)).collect();
    let mut a = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            a[i * n + j] = (0..n).map(|k| q[k * n + i] * eig[k] * q[k * n + j]).sum();
        }
    }
    let r = random_direction(n, 7);
    let (lo, hi) = (vec![0.0; n], vec![1.0; n]);
    let mut xs = vec![0.0; n];
    let mut gs = vec![0.0; n];
    for i in 0..n {
        match i % 4 {
            0 => {
                xs[i] = 0.0;
                gs[i] = 0.5 + r[i].abs(); // at lower bound, gradient pushes outward (down)
            }
            1 => {
                xs[i] = 1.0;
                gs[i] = -(0.5 + r[i].abs());
            }
            _ => {
                xs[i] = 0.5 + 0.4 * r[i];
                gs[i] = 0.0;
            }
        }
    }
    // f = ½ eᵀ A e + g*ᵀ e with e = x − x* (= ½ xᵀ A x − bᵀ x + const for b = A x* − g*),
    // written around x* so that f is computed without cancellation near the solution.
    let f = |x: &[f64], g: &mut [f64]| -> Result<f64, Infallible> {
        let e: Vec<f64> = x.iter().zip(&xs).map(|(a, b)| a - b).collect();
        let mut val = 0.0;
        for i in 0..n {
            let ae: f64 = (0..n).map(|j| a[i * n + j] * e[j]).sum();
            g[i] = ae + gs[i];
            val += e[i] * (0.5 * ae + gs[i]);
        }
        Ok(val)
    };
    let params = LbfgsbParams { gtol: 1e-9, ftol: 0.0, max_iterations: 5000, ..Default::default() };
    let x0 = vec![0.5; n];
    let res = minimize_lbfgsb(f, &x0, &lo, &hi, &params, |_| Control::Continue).unwrap();
    assert!(
        matches!(res.status, Status::Converged(ConvergenceReason::ProjectedGradient { .. })),
        "{:?} after {} iterations, max error {:e}",
        res.status,
        res.iterations,
        res.x.iter().zip(&xs).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()))
    );
    let err = res.x.iter().zip(&xs).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(err < 1e-7, "max |x − x*| = {err:e}");
    for i in (0..n).filter(|i| i % 4 < 2) {
        assert_eq!(res.x[i], xs[i], "entry {i} must sit exactly on its bound");
    }
    eprintln!(
        "100-dim quadratic (cond 1e4): {} iterations, {} evaluations, max error {err:.2e}",
        res.iterations, res.evaluations
    );
}

#[test]
fn callback_stop_returns_best_point() {
    let mut seen = Vec::new();
    let r = minimize_lbfgsb(rosenbrock, &[-1.2, 1.0], &[-INF; 2], &[INF; 2], &tight(), |rec| {
        seen.push(rec.f);
        if rec.iteration == 5 { Control::Stop } else { Control::Continue }
    })
    .unwrap();
    assert_eq!(r.status, Status::Stopped);
    assert_eq!(r.iterations, 5);
    assert_eq!(seen.len(), 6);
    let min_seen = seen.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(r.f <= min_seen, "returned {} but saw {}", r.f, min_seen);
    let mut g = [0.0; 2];
    assert_eq!(rosenbrock(&r.x, &mut g).unwrap(), r.f, "x and f must belong together");
    assert!(r.f < 24.2, "must have improved on the start (f = 24.2)");
}

#[test]
fn max_iterations_and_errors() {
    let p = LbfgsbParams { max_iterations: 3, ..tight() };
    let r =
        minimize_lbfgsb(rosenbrock, &[-1.2, 1.0], &[-INF; 2], &[INF; 2], &p, |_| Control::Continue)
            .unwrap();
    assert_eq!(r.status, Status::MaxIterations);
    assert_eq!(r.iterations, 3);
    // Without x in the history, the records are otherwise the same.
    let p = LbfgsbParams { history_x: false, ..p };
    let r2 = minimize_lbfgsb(rosenbrock, &[-1.2, 1.0], &[-INF; 2], &[INF; 2], &p, |rec| {
        assert_eq!(rec.x.len(), 2);
        Control::Continue
    })
    .unwrap();
    assert!(r2.history.iter().all(|h| h.x.is_empty()));
    assert_eq!(r2.x, r.x);
    let fs = |h: &[gradfem_solvers::optimize::IterationRecord]| {
        h.iter().map(|r| r.f).collect::<Vec<_>>()
    };
    assert_eq!(fs(&r2.history), fs(&r.history));
    // An error from the objective is returned.
    let mut calls = 0;
    let out = minimize_lbfgsb(
        |x: &[f64], g: &mut [f64]| {
            calls += 1;
            if calls == 4 { Err("solver diverged") } else { Ok(rosenbrock(x, g).unwrap()) }
        },
        &[-1.2, 1.0],
        &[-INF; 2],
        &[INF; 2],
        &tight(),
        |_| Control::Continue,
    );
    assert_eq!(out.unwrap_err(), "solver diverged");
}

#[test]
fn wrong_gradient_ends_in_line_search_failure() {
    // Gradient of the wrong sign in y: no descent along the projected path eventually.
    let f = |x: &[f64], g: &mut [f64]| -> Result<f64, Infallible> {
        g[0] = 2.0 * x[0];
        g[1] = -2.0 * x[1];
        Ok(x[0] * x[0] + x[1] * x[1])
    };
    let r = minimize_lbfgsb(f, &[1.0, 1.0], &[-INF; 2], &[INF; 2], &tight(), |_| Control::Continue)
        .unwrap();
    assert!(matches!(r.status, Status::LineSearchFailed { .. }), "{:?}", r.status);
    assert!(r.f <= 2.0);
}

#[test]
fn nan_region_is_backtracked_out_of() {
    // f = x − ln(x) has its minimum at x = 1; NaN for x ≤ 0 (a large first step lands there).
    let f = |x: &[f64], g: &mut [f64]| -> Result<f64, Infallible> {
        g[0] = 1.0 - 1.0 / x[0];
        Ok(x[0] - x[0].ln())
    };
    let p = LbfgsbParams { gtol: 1e-7, ..tight() };
    let r = minimize_lbfgsb(f, &[20.0], &[-INF], &[INF], &p, |_| Control::Continue).unwrap();
    assert!(r.status.is_converged(), "{:?}", r.status);
    assert!((r.x[0] - 1.0).abs() < 1e-6, "{:?}", r.x);
}

/// min (x−2)² + (y−1)² s.t. x + y ≤ 2: x* = (1.5, 0.5), λ = 1.
/// min (x−2)² + (y−2)² s.t. x² + y² ≤ 1: x* = (1/√2, 1/√2), λ = 2√2 − 1.
#[rstest]
#[case::linear(2.0, 1.0, false, [1.5, 0.5], 1.0)]
#[case::disk(2.0, 2.0, true, [std::f64::consts::FRAC_1_SQRT_2; 2], 2.0 * std::f64::consts::SQRT_2 - 1.0)]
fn augmented_lagrangian_known_solution(
    #[case] px: f64,
    #[case] py: f64,
    #[case] disk: bool,
    #[case] expected: [f64; 2],
    #[case] lambda: f64,
) {
    let obj = |x: &[f64], g: &mut [f64]| -> Result<f64, Infallible> {
        g[0] = 2.0 * (x[0] - px);
        g[1] = 2.0 * (x[1] - py);
        Ok((x[0] - px).powi(2) + (x[1] - py).powi(2))
    };
    // Second constraint −x − 10 ≤ 0 is inactive (multiplier 0).
    let cons = |x: &[f64], c: &mut [f64], j: &mut [f64]| -> Result<(), Infallible> {
        if disk {
            c[0] = x[0] * x[0] + x[1] * x[1] - 1.0;
            j[0] = 2.0 * x[0];
            j[1] = 2.0 * x[1];
        } else {
            c[0] = x[0] + x[1] - 2.0;
            j[0] = 1.0;
            j[1] = 1.0;
        }
        c[1] = -x[0] - 10.0;
        j[2] = -1.0;
        j[3] = 0.0;
        Ok(())
    };
    let params = AugLagParams {
        inner: LbfgsbParams { gtol: 1e-10, ftol: 0.0, ..Default::default() },
        ..Default::default()
    };
    let r = augmented_lagrangian(obj, cons, 2, &[0.0, 0.0], &[-INF; 2], &[INF; 2], &params, |_| {
        Control::Continue
    })
    .unwrap();
    assert_eq!(r.status, AugLagStatus::Converged, "{r:?}");
    assert!(
        (r.x[0] - expected[0]).abs() < 1e-7 && (r.x[1] - expected[1]).abs() < 1e-7,
        "{:?}",
        r.x
    );
    assert!((r.multipliers[0] - lambda).abs() < 1e-6, "{:?}", r.multipliers);
    assert_eq!(r.multipliers[1], 0.0);
    assert!(r.constraints[0] < 1e-8);
    eprintln!("augmented Lagrangian: {} outer, {} evaluations", r.outer_iterations, r.evaluations);
}

#[test]
fn augmented_lagrangian_with_bounds() {
    // min −x − y s.t. x y ≤ 1 (hyperbola), 0.25 ≤ x ≤ 2, y ≤ 3: the best is at the corner-free
    // point x = 2? f(2, 0.5) = −2.5, f(1/3, 3) = −3.33: x = 1/3, y = 3 (y at its bound).
    let obj = |x: &[f64], g: &mut [f64]| -> Result<f64, Infallible> {
        g[0] = -1.0;
        g[1] = -1.0;
        Ok(-x[0] - x[1])
    };
    let cons = |x: &[f64], c: &mut [f64], j: &mut [f64]| -> Result<(), Infallible> {
        c[0] = x[0] * x[1] - 1.0;
        j[0] = x[1];
        j[1] = x[0];
        Ok(())
    };
    let params = AugLagParams {
        inner: LbfgsbParams { gtol: 1e-10, ftol: 0.0, ..Default::default() },
        ..Default::default()
    };
    let r = augmented_lagrangian(
        obj,
        cons,
        1,
        &[1.0, 2.5],
        &[0.25, -INF],
        &[2.0, 3.0],
        &params,
        |_| Control::Continue,
    )
    .unwrap();
    assert_eq!(r.status, AugLagStatus::Converged, "{r:?}");
    assert!((r.x[0] - 1.0 / 3.0).abs() < 1e-7 && r.x[1] == 3.0, "{:?}", r.x);
    // Stationarity in x: −1 + λ y = 0 → λ = 1/3.
    assert!((r.multipliers[0] - 1.0 / 3.0).abs() < 1e-6, "{:?}", r.multipliers);
}
