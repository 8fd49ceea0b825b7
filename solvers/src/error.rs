//! Errors of the solvers crate.
//!
//! Every variant names the field (`"thermal"`, `"electrical"`, ...) whose system failed and
//! carries the numbers that explain the failure (iteration, residual, unknown), so that a caller
//! can report it without re-running anything.

use thiserror::Error;

/// Numerical failure of a linear or nonlinear solve, carrying where it happened.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SolverError {
    /// The system matrix is (numerically or structurally) singular.
    #[error("{field}: singular system matrix{}: {detail}", fmt_dof(*dof))]
    Singular {
        /// Field whose system failed.
        field: String,
        /// The unknown (row or column of the factorized matrix) where the zero pivot appeared,
        /// when the factorization reports it.
        dof: Option<usize>,
        /// What was observed (zero pivot, non-finite solution of a probe solve, ...).
        detail: String,
    },

    /// A Cholesky factorization (or a CG iteration) met a matrix that is not symmetric
    /// positive definite.
    #[error("{field}: matrix is not symmetric positive definite: {detail}")]
    NotPositiveDefinite {
        /// Field whose system failed.
        field: String,
        /// Where it failed (pivot index, curvature pᵀAp, ...).
        detail: String,
    },

    /// A NaN or infinity appeared in a residual, tangent, solution or right-hand side.
    ///
    /// `iteration` is the Newton iteration (0 = the initial state) when raised by Newton, and 0
    /// for a stand-alone linear solve.
    #[error(
        "{field}: non-finite {quantity} at unknown {dof} ({dof_description}) in iteration {iteration}"
    )]
    NonFinite {
        /// Field whose system failed.
        field: String,
        /// Which quantity: `"residual"`, `"tangent"`, `"matrix"`, `"solution"`, `"update"` or
        /// `"right-hand side"`.
        quantity: &'static str,
        /// First offending unknown (for a matrix: its row).
        dof: usize,
        /// Human description of the unknown from the physics layer (node, tag, position).
        dof_description: String,
        /// Newton iteration, or 0 outside Newton.
        iteration: usize,
    },

    /// A stop was requested ([`crate::interrupt`]) and the computation ended at a safe point.
    #[error("{field}: interrupted at {at}")]
    Interrupted {
        /// Field (or computation) that stopped.
        field: String,
        /// Where it stopped (Newton iteration, time step, …).
        at: String,
    },

    /// Newton's method did not reach the tolerance: it diverged or ran out of iterations.
    #[error(
        "{field}: Newton did not converge after {iterations} iterations ({reason}); \
         residual norms: {}",
        fmt_history(residual_history)
    )]
    NewtonDiverged {
        /// Field whose system failed.
        field: String,
        /// Iterations done.
        iterations: usize,
        /// ‖R‖₂ at every iterate, starting with the initial guess.
        residual_history: Vec<f64>,
        /// Why it stopped (`"maximum iterations reached"`, `"residual grew past ..."`).
        reason: String,
    },

    /// The backtracking line search found no step length that decreases the residual.
    #[error(
        "{field}: line search failed in Newton iteration {iteration}: ‖R‖ = {residual:.6e}, \
         best trial ‖R‖ = {best_trial_residual:.6e} at step length {best_step:.3e} after {steps} halvings"
    )]
    LineSearchFailed {
        /// Field whose system failed.
        field: String,
        /// Newton iteration in which the line search ran.
        iteration: usize,
        /// ‖R‖₂ at the current iterate.
        residual: f64,
        /// Smallest ‖R‖₂ among the trial points.
        best_trial_residual: f64,
        /// Step length of that best trial point.
        best_step: f64,
        /// Number of step halvings tried.
        steps: usize,
    },

    /// An iterative linear solver (e.g. AMG-preconditioned CG) did not reach its tolerance.
    #[error(
        "{field}: iterative solver did not converge in {iterations} iterations \
         (relative residual {residual:.6e})"
    )]
    IterativeNoConvergence {
        /// Field whose system failed.
        field: String,
        /// Iterations done.
        iterations: usize,
        /// Final residual (relative, as the solver measures it).
        residual: f64,
    },

    /// A parameter struct (`NewtonParams`, ...) holds an invalid value.
    #[error("invalid solver parameter {name} = {value}: {reason}")]
    InvalidParameter {
        /// Parameter name, e.g. `"NewtonParams::rel_tol"`.
        name: &'static str,
        /// The offending value, formatted.
        value: String,
        /// What is required.
        reason: &'static str,
    },

    /// Any other failure, described in words.
    #[error("{field}: {message}")]
    Other {
        /// Field whose system failed.
        field: String,
        /// What happened.
        message: String,
    },
}

fn fmt_dof(dof: Option<usize>) -> String {
    dof.map_or_else(String::new, |d| format!(" at unknown {d}"))
}

/// Formats a residual history compactly: all entries when short, else the first 3 and last 5.
fn fmt_history(h: &[f64]) -> String {
    let f = |v: &[f64]| v.iter().map(|r| format!("{r:.3e}")).collect::<Vec<_>>().join(", ");
    if h.len() <= 10 {
        format!("[{}]", f(h))
    } else {
        format!("[{}, ... ({} more), {}]", f(&h[..3]), h.len() - 8, f(&h[h.len() - 5..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_the_numbers() {
        let e = SolverError::NewtonDiverged {
            field: "thermal".into(),
            iterations: 3,
            residual_history: vec![1.0, 2.0, 4.0, 8.0],
            reason: "residual grew".into(),
        };
        let s = e.to_string();
        assert!(
            s.contains("thermal") && s.contains("8.000e0") && s.contains("3 iterations"),
            "{s}"
        );
        let e = SolverError::NonFinite {
            field: "thermal".into(),
            quantity: "residual",
            dof: 17,
            dof_description: "node 17 (tag 18)".into(),
            iteration: 2,
        };
        let s = e.to_string();
        assert!(
            s.contains("unknown 17") && s.contains("tag 18") && s.contains("iteration 2"),
            "{s}"
        );
        let long: Vec<f64> = (0..20).map(f64::from).collect();
        assert!(fmt_history(&long).contains("12 more"));
    }
}
