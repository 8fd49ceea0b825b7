//! Newton's method with a backtracking line search for R(u) = 0.
//!
//! Iteration k solves K(uₖ) δ = −R(uₖ) with the tangent K = ∂R/∂u, then takes
//! uₖ₊₁ = uₖ + α δ, where α ∈ {1, ½, ¼, …} is the first step length with sufficient decrease
//! ‖R(uₖ + α δ)‖₂ ≤ (1 − c α) ‖R(uₖ)‖₂, c = 10⁻⁴ (Armijo's condition on the merit function
//! ‖R‖₂; the Newton direction is a descent direction for it). It stops when
//! ‖R‖₂ ≤ max(abs_tol, rel_tol · ‖R(u₀)‖₂).
//!
//! The solver is left holding the factorization of the tangent at the converged state (unless
//! [`NewtonParams::factor_at_solution`] is off), so that the adjoint engine can solve
//! K(u*)ᵀ λ = ū at once with [`LinearSolver::solve_transpose_in_place`].

use crate::error::SolverError;
use crate::linear::LinearSolver;
use crate::sparse::CsrMatrix;
use std::time::Instant;

/// Armijo constant c of the sufficient-decrease test ‖R(u + αδ)‖ ≤ (1 − cα)‖R(u)‖.
pub const ARMIJO_C: f64 = 1e-4;

/// A nonlinear system R(u) = 0 for one field (or one monolithic group of fields).
pub trait NonlinearProblem {
    /// Name of the field, e.g. `"thermal"`, used in errors.
    fn field(&self) -> &str;
    /// Number of unknowns.
    fn n_unknowns(&self) -> usize;
    /// A matrix with the sparsity pattern of the tangent (values arbitrary); Newton allocates
    /// its tangent from it once.
    fn tangent_pattern(&self) -> CsrMatrix;
    /// Writes R(u) into `r`.
    fn residual(&mut self, u: &[f64], r: &mut [f64]);
    /// Writes R(u) into `r` and the tangent ∂R/∂u into the values of `k` (pattern of
    /// [`tangent_pattern`](Self::tangent_pattern)).
    fn residual_and_tangent(&mut self, u: &[f64], r: &mut [f64], k: &mut CsrMatrix);
    /// A human description of unknown `dof` for error messages, e.g.
    /// `"node 17 (tag 18) at (0.1, 0, 0)"`.
    fn describe_dof(&self, dof: usize) -> String {
        format!("unknown {dof}")
    }
    /// True when R is affine in u: Newton then takes one full step (no line search), never
    /// re-assembles the tangent and checks ‖R‖ once more.
    fn is_linear(&self) -> bool {
        false
    }
}

/// Parameters of [`newton`].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NewtonParams {
    /// Absolute tolerance on ‖R‖₂.
    pub abs_tol: f64,
    /// Tolerance on ‖R‖₂ relative to ‖R(u₀)‖₂.
    pub rel_tol: f64,
    /// Maximum number of Newton iterations (linear solves).
    pub max_iterations: usize,
    /// Backtracking line search on ‖R‖₂ (halving the step).
    pub line_search: bool,
    /// Maximum number of step halvings per iteration.
    pub max_line_search_steps: usize,
    /// Stop as diverged when ‖R‖₂ > divergence_factor · ‖R(u₀)‖₂.
    pub divergence_factor: f64,
    /// On success, leave the solver holding the factorization of the tangent at the converged
    /// state (for adjoint solves).
    pub factor_at_solution: bool,
}

impl Default for NewtonParams {
    fn default() -> Self {
        NewtonParams {
            abs_tol: 1e-10,
            rel_tol: 1e-9,
            max_iterations: 30,
            line_search: true,
            max_line_search_steps: 12,
            divergence_factor: 1e6,
            factor_at_solution: true,
        }
    }
}

impl NewtonParams {
    /// Checks that tolerances are finite and non-negative (not both zero), that
    /// `max_iterations ≥ 1`, `divergence_factor > 1` and, with line search on,
    /// `max_line_search_steps ≥ 1`.
    pub fn validate(&self) -> Result<(), SolverError> {
        let bad = |name, value: String, reason| {
            Err(SolverError::InvalidParameter { name, value, reason })
        };
        if !(self.abs_tol.is_finite() && self.abs_tol >= 0.0) {
            return bad(
                "NewtonParams::abs_tol",
                self.abs_tol.to_string(),
                "must be finite and ≥ 0",
            );
        }
        if !(self.rel_tol.is_finite() && self.rel_tol >= 0.0) {
            return bad(
                "NewtonParams::rel_tol",
                self.rel_tol.to_string(),
                "must be finite and ≥ 0",
            );
        }
        if self.abs_tol == 0.0 && self.rel_tol == 0.0 {
            return bad(
                "NewtonParams::abs_tol",
                "0".into(),
                "abs_tol and rel_tol cannot both be 0",
            );
        }
        if self.max_iterations == 0 {
            return bad("NewtonParams::max_iterations", "0".into(), "must be ≥ 1");
        }
        if self.divergence_factor.is_nan() || self.divergence_factor <= 1.0 {
            return bad(
                "NewtonParams::divergence_factor",
                self.divergence_factor.to_string(),
                "must be > 1",
            );
        }
        if self.line_search && self.max_line_search_steps == 0 {
            return bad(
                "NewtonParams::max_line_search_steps",
                "0".into(),
                "must be ≥ 1 with line search",
            );
        }
        Ok(())
    }
}

/// What [`newton`] did.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct NewtonInfo {
    /// Newton iterations (linear solves) done.
    pub iterations: usize,
    /// ‖R‖₂ at u₀, u₁, … (length `iterations + 1`).
    pub residual_history: Vec<f64>,
    /// Step length α of each iteration (1 = full Newton step).
    pub step_lengths: Vec<f64>,
    /// Whether the tolerance was reached (always true in an `Ok`).
    pub converged: bool,
    /// Seconds spent in residual and tangent evaluations.
    pub time_residual_s: f64,
    /// Seconds spent in factorizations.
    pub time_factor_s: f64,
    /// Seconds spent in linear solves.
    pub time_solve_s: f64,
    /// The linear solver's name at the end ([`crate::linear::LinearSolver::name`]; a solver
    /// that fell back to LU says `lu`). Empty when no solve ran.
    pub linear_solver: &'static str,
}

fn norm2(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

fn check_finite(
    problem: &dyn NonlinearProblem,
    values: &[f64],
    quantity: &'static str,
    iteration: usize,
    to_dof: impl Fn(usize) -> usize,
) -> Result<(), SolverError> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(k) => {
            let dof = to_dof(k);
            Err(SolverError::NonFinite {
                field: problem.field().to_string(),
                quantity,
                dof,
                dof_description: problem.describe_dof(dof),
                iteration,
            })
        }
    }
}

fn check_tangent(
    problem: &dyn NonlinearProblem,
    k: &CsrMatrix,
    iteration: usize,
) -> Result<(), SolverError> {
    check_finite(problem, &k.values, "tangent", iteration, |pos| {
        k.row_ptr.partition_point(|&p| p <= pos) - 1
    })
}

/// Solves R(u) = 0 by Newton's method with backtracking line search, starting from and
/// overwriting `u`.
///
/// Iteration numbers in errors: a residual or tangent evaluated at uᵢ reports iteration `i`
/// (u₀ = the initial guess); a non-finite update computed at uᵢ reports `i + 1`. `u` only ever
/// receives finite, accepted iterates: after an error it holds the last one.
///
/// Errors: [`SolverError::NonFinite`] (residual, tangent or update), the linear solver's errors,
/// [`SolverError::LineSearchFailed`], [`SolverError::NewtonDiverged`] (growth past
/// `divergence_factor · ‖R₀‖` or `max_iterations` reached, with the whole residual history),
/// [`SolverError::InvalidParameter`].
pub fn newton(
    problem: &mut dyn NonlinearProblem,
    u: &mut [f64],
    solver: &mut dyn LinearSolver,
    params: &NewtonParams,
) -> Result<NewtonInfo, SolverError> {
    params.validate()?;
    let n = problem.n_unknowns();
    assert_eq!(u.len(), n, "u has {} entries for {n} unknowns", u.len());
    let field = problem.field().to_string();
    let linear = problem.is_linear();
    let mut info = NewtonInfo::default();
    let mut k = problem.tangent_pattern();
    assert!(
        k.n_rows == n && k.n_cols == n,
        "tangent pattern is {}×{} for {n} unknowns",
        k.n_rows,
        k.n_cols
    );
    let mut r = vec![0.0; n];
    let mut r_trial = vec![0.0; n];
    let mut u_trial = vec![0.0; n];
    let mut du = vec![0.0; n];

    let t = Instant::now();
    problem.residual_and_tangent(u, &mut r, &mut k);
    info.time_residual_s += t.elapsed().as_secs_f64();
    check_finite(problem, &r, "residual", 0, |i| i)?;
    let norm0 = norm2(&r);
    let tol = params.abs_tol.max(params.rel_tol * norm0);
    let mut norm = norm0;
    info.residual_history.push(norm0);
    tracing::debug!(field = %field, iteration = 0, residual = norm0, tol, "newton");

    // Whether `solver` holds the factorization of the tangent at the current `u`.
    let mut factored_at_u = false;
    // Whether `k` holds the tangent at the current `u`.
    let mut tangent_at_u = true;
    let mut iteration = 0;
    while norm > tol {
        crate::interrupt::check(&field, || format!("Newton iteration {iteration}"))?;
        if iteration == params.max_iterations {
            return Err(SolverError::NewtonDiverged {
                field,
                iterations: iteration,
                residual_history: info.residual_history,
                reason: format!(
                    "maximum of {} iterations reached, ‖R‖ = {norm:.3e} > tolerance {tol:.3e}",
                    params.max_iterations
                ),
            });
        }
        if !factored_at_u {
            debug_assert!(tangent_at_u);
            check_tangent(problem, &k, iteration)?;
            let t = Instant::now();
            if linear {
                // A linear problem's tangent is never assembled or read again: the solver may
                // keep it instead of a copy (AMG-CG's finest level).
                solver.factor_owned(std::mem::replace(
                    &mut k,
                    CsrMatrix::zeros(0, 0, vec![0], Vec::new()),
                ))?;
            } else {
                solver.factor(&k)?;
            }
            info.time_factor_s += t.elapsed().as_secs_f64();
        }
        for (d, ri) in du.iter_mut().zip(&r) {
            *d = -ri;
        }
        let t = Instant::now();
        solver.solve_in_place(&mut du)?;
        info.time_solve_s += t.elapsed().as_secs_f64();
        iteration += 1;
        check_finite(problem, &du, "update", iteration, |i| i)?;

        // Line search.
        let mut alpha = 1.0;
        let mut steps = 0;
        let (mut best_norm, mut best_alpha) = (f64::INFINITY, 1.0);
        let search = params.line_search && !linear;
        let (trial_norm, trial_has_tangent) = loop {
            for ((ut, ui), di) in u_trial.iter_mut().zip(u.iter()).zip(&du) {
                *ut = ui + alpha * di;
            }
            let t = Instant::now();
            // The first (full) trial also evaluates the tangent: it is accepted most times.
            let with_tangent = !linear && steps == 0;
            if with_tangent {
                problem.residual_and_tangent(&u_trial, &mut r_trial, &mut k);
            } else {
                problem.residual(&u_trial, &mut r_trial);
            }
            info.time_residual_s += t.elapsed().as_secs_f64();
            check_finite(problem, &r_trial, "residual", iteration, |i| i)?;
            let trial_norm = norm2(&r_trial);
            if !search || trial_norm <= (1.0 - ARMIJO_C * alpha) * norm {
                break (trial_norm, with_tangent);
            }
            if trial_norm < best_norm {
                (best_norm, best_alpha) = (trial_norm, alpha);
            }
            if steps == params.max_line_search_steps {
                return Err(SolverError::LineSearchFailed {
                    field,
                    iteration,
                    residual: norm,
                    best_trial_residual: best_norm,
                    best_step: best_alpha,
                    steps,
                });
            }
            steps += 1;
            alpha *= 0.5;
        };
        u.copy_from_slice(&u_trial);
        std::mem::swap(&mut r, &mut r_trial);
        norm = trial_norm;
        tangent_at_u = linear || trial_has_tangent;
        factored_at_u = linear;
        info.residual_history.push(norm);
        info.step_lengths.push(alpha);
        tracing::debug!(field = %field, iteration, residual = norm, step = alpha, "newton");

        if norm > params.divergence_factor * norm0 {
            return Err(SolverError::NewtonDiverged {
                field,
                iterations: iteration,
                residual_history: info.residual_history,
                reason: format!(
                    "‖R‖ = {norm:.3e} grew past divergence_factor {} × ‖R₀‖ = {norm0:.3e}",
                    params.divergence_factor
                ),
            });
        }
        if norm > tol && !tangent_at_u {
            let t = Instant::now();
            problem.residual_and_tangent(u, &mut r, &mut k);
            info.time_residual_s += t.elapsed().as_secs_f64();
            check_finite(problem, &r, "residual", iteration, |i| i)?;
            tangent_at_u = true;
        }
    }

    if params.factor_at_solution && !factored_at_u {
        if !tangent_at_u {
            let t = Instant::now();
            problem.residual_and_tangent(u, &mut r, &mut k);
            info.time_residual_s += t.elapsed().as_secs_f64();
        }
        check_tangent(problem, &k, iteration)?;
        let t = Instant::now();
        solver.factor(&k)?;
        info.time_factor_s += t.elapsed().as_secs_f64();
    }
    info.iterations = iteration;
    info.converged = true;
    info.linear_solver = solver.name();
    tracing::debug!(
        field = %field,
        iterations = iteration,
        residual = norm,
        time_residual_s = info.time_residual_s,
        time_factor_s = info.time_factor_s,
        time_solve_s = info.time_solve_s,
        "newton converged"
    );
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_params_are_valid_and_bad_ones_are_named() {
        NewtonParams::default().validate().unwrap();
        let p = NewtonParams { rel_tol: -1.0, ..Default::default() };
        match p.validate() {
            Err(SolverError::InvalidParameter { name, .. }) => {
                assert_eq!(name, "NewtonParams::rel_tol")
            }
            other => panic!("expected InvalidParameter, got {other:?}"),
        }
        let p = NewtonParams { divergence_factor: 0.5, ..Default::default() };
        assert!(p.validate().is_err());
    }
}
