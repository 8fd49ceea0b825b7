//! Newton's method: quadratic convergence, line search, divergence, non-finite residuals and
//! the factorization left at the converged state.

use gradfem_solvers::error::SolverError;
use gradfem_solvers::linear::{LinearSolver, LuSolver};
use gradfem_solvers::newton::{NewtonParams, NonlinearProblem, newton};
use gradfem_solvers::sparse::CsrMatrix;

fn tridiagonal_pattern(n: usize) -> CsrMatrix {
    let mut row_ptr = vec![0];
    let mut col_idx = Vec::new();
    for i in 0..n {
        for j in i.saturating_sub(1)..(i + 2).min(n) {
            col_idx.push(j);
        }
        row_ptr.push(col_idx.len());
    }
    CsrMatrix::zeros(n, n, row_ptr, col_idx.into_iter().map(|j: usize| j as u32).collect())
}

/// −(k(u) u′)′ = f on (0, 1), u(0) = u(1) = 0, k(u) = 1 + u², P1 elements with midpoint k:
/// Rᵢ = Σ_{e ∋ i} k(ū_e) (uᵢ − u_other)/h − h f, ū_e the element mean.
struct NonlinearDiffusion {
    n: usize,
    f: f64,
    /// Residual evaluations after which the residual turns NaN at unknown 3 (fault injection).
    nan_after: Option<usize>,
    evaluations: usize,
}

impl NonlinearDiffusion {
    fn new(n: usize, f: f64) -> Self {
        NonlinearDiffusion { n, f, nan_after: None, evaluations: 0 }
    }
    fn h(&self) -> f64 {
        1.0 / (self.n + 1) as f64
    }
    fn assemble(&mut self, u: &[f64], r: &mut [f64], mut k: Option<&mut CsrMatrix>) {
        let (n, h) = (self.n, self.h());
        r.fill(-h * self.f);
        if let Some(k) = k.as_deref_mut() {
            k.values.fill(0.0);
        }
        let val = |i: usize| if i == 0 || i == n + 1 { 0.0 } else { u[i - 1] };
        for e in 0..=n {
            // Element between nodes e and e+1 (node 0 and n+1 are the Dirichlet ends).
            let (ua, ub) = (val(e), val(e + 1));
            let m = 0.5 * (ua + ub);
            let kk = 1.0 + m * m;
            let dk = m; // ∂k/∂ua = ∂k/∂ub = 2m · ½
            let flux = kk * (ua - ub) / h;
            let nodes = [e, e + 1];
            let fe = [flux, -flux];
            // ∂fe_a/∂u_b
            let dflux = [(kk + dk * (ua - ub)) / h, (-kk + dk * (ua - ub)) / h];
            for a in 0..2 {
                if nodes[a] == 0 || nodes[a] == n + 1 {
                    continue;
                }
                let ia = nodes[a] - 1;
                r[ia] += fe[a];
                if let Some(k) = k.as_deref_mut() {
                    let sign = if a == 0 { 1.0 } else { -1.0 };
                    for b in 0..2 {
                        if nodes[b] == 0 || nodes[b] == n + 1 {
                            continue;
                        }
                        let pos = k.find(ia, nodes[b] - 1).unwrap();
                        k.values[pos] += sign * dflux[b];
                    }
                }
            }
        }
        self.evaluations += 1;
        if self.nan_after.is_some_and(|m| self.evaluations > m) {
            r[3] = f64::NAN;
        }
    }
}

impl NonlinearProblem for NonlinearDiffusion {
    fn field(&self) -> &str {
        "thermal"
    }
    fn n_unknowns(&self) -> usize {
        self.n
    }
    fn tangent_pattern(&self) -> CsrMatrix {
        tridiagonal_pattern(self.n)
    }
    fn residual(&mut self, u: &[f64], r: &mut [f64]) {
        self.assemble(u, r, None);
    }
    fn residual_and_tangent(&mut self, u: &[f64], r: &mut [f64], k: &mut CsrMatrix) {
        self.assemble(u, r, Some(k));
    }
    fn describe_dof(&self, dof: usize) -> String {
        format!("node {} at x = {:.4}", dof + 1, (dof + 1) as f64 * self.h())
    }
}

/// Rᵢ = arctan(uᵢ − cᵢ): Newton's full step overshoots (and diverges) for |u − c| > 1.39.
struct Arctan {
    c: Vec<f64>,
}

impl NonlinearProblem for Arctan {
    fn field(&self) -> &str {
        "arctan"
    }
    fn n_unknowns(&self) -> usize {
        self.c.len()
    }
    fn tangent_pattern(&self) -> CsrMatrix {
        let n = self.c.len();
        CsrMatrix::zeros(n, n, (0..=n).collect(), (0..n as u32).collect())
    }
    fn residual(&mut self, u: &[f64], r: &mut [f64]) {
        for ((ri, ui), ci) in r.iter_mut().zip(u).zip(&self.c) {
            *ri = (ui - ci).atan();
        }
    }
    fn residual_and_tangent(&mut self, u: &[f64], r: &mut [f64], k: &mut CsrMatrix) {
        self.residual(u, r);
        for (i, (ui, ci)) in u.iter().zip(&self.c).enumerate() {
            k.values[i] = 1.0 / (1.0 + (ui - ci) * (ui - ci));
        }
    }
}

#[test]
fn nonlinear_diffusion_converges_quadratically() {
    let mut p = NonlinearDiffusion::new(40, 30.0);
    let mut u = vec![0.0; 40];
    let mut s = LuSolver::new("thermal");
    let params = NewtonParams { abs_tol: 1e-11, rel_tol: 0.0, ..Default::default() };
    let info = newton(&mut p, &mut u, &mut s, &params).unwrap();
    let h = &info.residual_history;
    assert!(info.converged && info.iterations <= 8, "{h:?}");
    // From u = 0 the first steps overshoot and are damped; the last ones are full steps.
    let steps = &info.step_lengths;
    assert!(steps[steps.len() - 3..].iter().all(|&a| a == 1.0), "{steps:?}");
    // Quadratic: rₖ₊₁ ≤ C rₖ² in the asymptotic range, and the observed order
    // log(rₖ₊₁/rₖ)/log(rₖ/rₖ₋₁) reaches ≈ 2.
    let orders: Vec<f64> = h
        .windows(3)
        .filter(|w| w[2] > 1e-12)
        .map(|w| (w[2] / w[1]).ln() / (w[1] / w[0]).ln())
        .collect();
    assert!(orders.iter().any(|&q| q > 1.8), "orders {orders:?}, history {h:?}");
    // Measured: 1.03 → 1.9e-2 → 4.5e-6 → 2.2e-13, i.e. rₖ₊₁ ≈ 0.015 rₖ².
    let mut checked = 0;
    for w in h.windows(2).filter(|w| w[0] < 1.1 && w[1] > 1e-12) {
        assert!(w[1] <= 0.05 * w[0] * w[0], "not quadratic: {} -> {} in {h:?}", w[0], w[1]);
        checked += 1;
    }
    assert!(checked >= 2, "{h:?}");
    let mut r = vec![0.0; 40];
    p.residual(&u, &mut r);
    assert!(r.iter().map(|x| x * x).sum::<f64>().sqrt() <= 1e-11);
    // The problem is symmetric about x = ½, so is the solution.
    for i in 0..20 {
        assert!((u[i] - u[39 - i]).abs() < 1e-10);
    }
}

#[test]
fn solver_holds_the_tangent_at_the_converged_state() {
    let n = 20;
    let mut p = NonlinearDiffusion::new(n, 30.0);
    let mut u = vec![0.0; n];
    let mut s = LuSolver::new("thermal");
    newton(&mut p, &mut u, &mut s, &NewtonParams::default()).unwrap();
    // Reference: factor the tangent at u* afresh.
    let mut k = tridiagonal_pattern(n);
    let mut r = vec![0.0; n];
    p.residual_and_tangent(&u, &mut r, &mut k);
    let mut fresh = LuSolver::new("ref");
    fresh.factor(&k).unwrap();
    let b: Vec<f64> = (0..n).map(|i| 1.0 + i as f64).collect();
    let (mut x, mut y) = (b.clone(), b.clone());
    s.solve_transpose_in_place(&mut x).unwrap();
    fresh.solve_transpose_in_place(&mut y).unwrap();
    let d = x.iter().zip(&y).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(d < 1e-12, "adjoint solve differs by {d}");
}

#[test]
fn line_search_rescues_an_overshooting_full_step() {
    let c = vec![0.5, -1.0, 2.0];
    let mut p = Arctan { c: c.clone() };
    let mut u = vec![c[0] + 5.0, c[1] - 4.0, c[2] + 3.0];
    let info =
        newton(&mut p, &mut u, &mut LuSolver::new("arctan"), &NewtonParams::default()).unwrap();
    assert!(info.step_lengths.iter().any(|&a| a < 1.0), "{:?}", info.step_lengths);
    assert!(info.residual_history.windows(2).all(|w| w[1] < w[0]));
    for (ui, ci) in u.iter().zip(&c) {
        assert!((ui - ci).abs() < 1e-9);
    }
}

#[test]
fn divergence_returns_the_whole_history() {
    let mut p = Arctan { c: vec![0.0] };
    // |u₀| > 1.39: the full Newton steps overshoot further and further; ‖R‖ = |arctan u| stays
    // below π/2, so a divergence factor of 1.2 catches the growth.
    let u0 = 1.5;
    let mut u = vec![u0];
    let params = NewtonParams { line_search: false, divergence_factor: 1.2, ..Default::default() };
    match newton(&mut p, &mut u, &mut LuSolver::new("arctan"), &params).unwrap_err() {
        SolverError::NewtonDiverged { field, iterations, residual_history, reason } => {
            assert_eq!(field, "arctan");
            assert_eq!(residual_history.len(), iterations + 1);
            assert!((residual_history[0] - u0.atan()).abs() < 1e-15);
            assert!(residual_history.windows(2).all(|w| w[1] > w[0]), "{residual_history:?}");
            assert!(reason.contains("grew"), "{reason}");
            assert_eq!(iterations, 3, "{residual_history:?}");
        }
        other => panic!("expected NewtonDiverged, got {other:?}"),
    }
    // Max iterations: a slowly converging start with a tight iteration budget.
    let mut u = vec![1.0];
    let params =
        NewtonParams { max_iterations: 2, abs_tol: 1e-300, rel_tol: 1e-300, ..Default::default() };
    match newton(&mut p, &mut u, &mut LuSolver::new("arctan"), &params).unwrap_err() {
        SolverError::NewtonDiverged { iterations, residual_history, reason, .. } => {
            assert_eq!((iterations, residual_history.len()), (2, 3));
            assert!(reason.contains("maximum"), "{reason}");
        }
        other => panic!("expected NewtonDiverged, got {other:?}"),
    }
}

#[test]
fn nan_in_the_residual_at_iteration_2_is_reported_with_the_dof() {
    let n = 10;
    let mut p = NonlinearDiffusion::new(n, 30.0);
    // Evaluations: u₀ (1), u₁ (2), u₂ (3) → NaN at the third.
    p.nan_after = Some(2);
    let mut u = vec![0.0; n];
    let params = NewtonParams { line_search: false, ..Default::default() };
    let err = newton(&mut p, &mut u, &mut LuSolver::new("thermal"), &params).unwrap_err();
    match &err {
        SolverError::NonFinite { field, quantity, dof, dof_description, iteration } => {
            assert_eq!(
                (field.as_str(), *quantity, *dof, *iteration),
                ("thermal", "residual", 3, 2)
            );
            assert_eq!(dof_description, "node 4 at x = 0.3636");
        }
        other => panic!("expected NonFinite, got {other:?}"),
    }
    assert!(err.to_string().contains("node 4"));
    // u holds the finite iterate u₁, not the poisoned u₂.
    assert!(u.iter().all(|x| x.is_finite()) && u.iter().any(|&x| x != 0.0));
}

/// A linear problem R(u) = A u − b converges in one step and is not refactored.
struct Linear {
    a: CsrMatrix,
    b: Vec<f64>,
    tangent_calls: usize,
}

impl NonlinearProblem for Linear {
    fn field(&self) -> &str {
        "linear"
    }
    fn n_unknowns(&self) -> usize {
        self.b.len()
    }
    fn tangent_pattern(&self) -> CsrMatrix {
        self.a.clone()
    }
    fn residual(&mut self, u: &[f64], r: &mut [f64]) {
        self.a.mul_vec_into(u, r);
        for (ri, bi) in r.iter_mut().zip(&self.b) {
            *ri -= bi;
        }
    }
    fn residual_and_tangent(&mut self, u: &[f64], r: &mut [f64], k: &mut CsrMatrix) {
        self.tangent_calls += 1;
        self.residual(u, r);
        k.values.copy_from_slice(&self.a.values);
    }
    fn is_linear(&self) -> bool {
        true
    }
}

#[test]
fn linear_problem_takes_one_step() {
    let mut a = tridiagonal_pattern(5);
    for i in 0..5 {
        let (s, e) = (a.row_ptr[i], a.row_ptr[i + 1]);
        for k in s..e {
            a.values[k] = if a.col_idx[k] as usize == i { 4.0 } else { -1.0 + 0.1 * i as f64 };
        }
    }
    let mut p = Linear { a, b: vec![1.0, 2.0, 3.0, 4.0, 5.0], tangent_calls: 0 };
    let mut u = vec![0.0; 5];
    let info =
        newton(&mut p, &mut u, &mut LuSolver::new("linear"), &NewtonParams::default()).unwrap();
    assert_eq!(info.iterations, 1);
    assert_eq!(info.residual_history.len(), 2);
    assert!(info.residual_history[1] < 1e-13);
    assert_eq!(p.tangent_calls, 1);
}

/// R(u) = u with a deliberately wrong tangent −1 (or a NaN tangent): the "Newton" direction
/// increases ‖R‖ at every step length.
struct WrongTangent {
    tangent: f64,
}

impl NonlinearProblem for WrongTangent {
    fn field(&self) -> &str {
        "wrong"
    }
    fn n_unknowns(&self) -> usize {
        2
    }
    fn tangent_pattern(&self) -> CsrMatrix {
        CsrMatrix::zeros(2, 2, vec![0, 1, 2], vec![0, 1])
    }
    fn residual(&mut self, u: &[f64], r: &mut [f64]) {
        r.copy_from_slice(u);
    }
    fn residual_and_tangent(&mut self, u: &[f64], r: &mut [f64], k: &mut CsrMatrix) {
        r.copy_from_slice(u);
        k.values[0] = -1.0;
        k.values[1] = self.tangent;
    }
    fn describe_dof(&self, dof: usize) -> String {
        format!("component {dof}")
    }
}

#[test]
fn line_search_failure_carries_the_numbers() {
    let mut u = vec![1.0, 2.0];
    let params = NewtonParams { max_line_search_steps: 5, ..Default::default() };
    let err = newton(&mut WrongTangent { tangent: -1.0 }, &mut u, &mut LuSolver::new("w"), &params)
        .unwrap_err();
    match err {
        SolverError::LineSearchFailed {
            field,
            iteration,
            residual,
            best_trial_residual,
            steps,
            ..
        } => {
            assert_eq!((field.as_str(), iteration, steps), ("wrong", 1, 5));
            assert!((residual - 5f64.sqrt()).abs() < 1e-15);
            assert!(best_trial_residual > residual);
        }
        other => panic!("expected LineSearchFailed, got {other:?}"),
    }
    assert_eq!(u, vec![1.0, 2.0], "a failed line search must not move u");
}

#[test]
fn nan_in_the_tangent_is_reported_before_factoring() {
    let mut u = vec![1.0, 2.0];
    let err = newton(
        &mut WrongTangent { tangent: f64::NAN },
        &mut u,
        &mut LuSolver::new("w"),
        &NewtonParams::default(),
    )
    .unwrap_err();
    match err {
        SolverError::NonFinite { quantity, dof, dof_description, iteration, .. } => {
            assert_eq!((quantity, dof, iteration), ("tangent", 1, 0));
            assert_eq!(dof_description, "component 1");
        }
        other => panic!("expected NonFinite, got {other:?}"),
    }
}

#[test]
fn converged_after_a_damped_step_refactors_at_the_solution() {
    // One unknown, arctan: from u₀ = 1.45 the full step overshoots to about −1.55 (‖R‖ grows),
    // the line search halves it; with a loose tolerance Newton stops right after that damped
    // step, where the tangent was not evaluated. The solver must still hold K(u*).
    let mut p = Arctan { c: vec![0.0] };
    let mut u = vec![1.45];
    let params = NewtonParams { abs_tol: 0.2, rel_tol: 0.0, ..Default::default() };
    let info = newton(&mut p, &mut u, &mut LuSolver::new("arctan"), &params).unwrap();
    assert_eq!(info.iterations, 1);
    assert!(info.step_lengths[0] < 1.0, "{:?}", info.step_lengths);
    let mut s = LuSolver::new("arctan");
    newton(&mut Arctan { c: vec![0.0] }, &mut [1.45], &mut s, &params).unwrap();
    let mut b = vec![1.0];
    s.solve_transpose_in_place(&mut b).unwrap();
    // K(u*) = 1/(1 + u*²), so K⁻ᵀ·1 = 1 + u*².
    assert!((b[0] - (1.0 + u[0] * u[0])).abs() < 1e-12, "{} vs {}", b[0], 1.0 + u[0] * u[0]);
}
