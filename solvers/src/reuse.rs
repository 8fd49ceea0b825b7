//! A sparse Cholesky factorization kept across a sequence of nearby symmetric positive definite
//! matrices, used as the preconditioner of CG on the current one.
//!
//! The tangents of one Newton solve change little from iteration to iteration, yet a full
//! Newton method factors each of them. [`ReusedCholesky::solve`] instead solves `A x = b` for
//! the current `A` by conjugate gradients preconditioned with the factorization `L Lᵀ` of an
//! earlier matrix of the sequence. With `A₀ = L Lᵀ` close to `A`, the preconditioned operator
//! `A₀⁻¹ A` has its eigenvalues clustered at 1 and CG converges in a few iterations, each one
//! a product with `A` and a pair of triangular solves with `L`: a small fraction of a
//! factorization. The result solves the *current* system to the requested relative residual,
//! so a Newton iteration built on it keeps its convergence (an inexact Newton method with
//! that forcing term); nothing is approximated beyond that tolerance.
//!
//! When CG would need more work than a new factorization, it is abandoned early and the
//! current matrix is factored (and the solve is then direct). The break-even is estimated
//! from the factorization's structure, not from timings, so the route taken is the same on
//! every run:
//!
//! ```text
//! budget = factor multiply-adds / (SOLVE_COST_RATIO · (2 nnz(L) + nnz(A)))
//! ```
//!
//! CG iterations per solve at most, where `2 nnz(L) + nnz(A)` are the multiply-adds of one
//! iteration (two triangular solves and a product with `A`) and `SOLVE_COST_RATIO` is how much
//! slower a multiply-add runs in those memory-bound kernels than in the factorization's dense
//! blocks (measured, see the constant). CG is abandoned as soon as its observed convergence rate
//! predicts more than `budget` iterations, and a solve that needed more than half the budget
//! makes the next solve start from a new factorization: the held one has grown stale.
//!
//! Written here because it combines this crate's [`CholeskySolver`] and [`pcg_until`]; faer
//! offers the pieces, not the policy.

use std::sync::Mutex;

use crate::cg::{CgParams, CgStop, Preconditioner, pcg_until};
use crate::error::SolverError;
use crate::linear::{CholeskyOrdering, CholeskySolver, LinearSolver};
use crate::sparse::CsrMatrix;

/// How many times longer a multiply-add takes in the triangular solves and the sparse
/// matrix-vector product of a CG iteration than in the numeric factorization (which runs in
/// dense supernodal blocks). Measured on the 9 450-unknown finite-strain Kuhn cube
/// (`examples/bench_ogden.rs`, `--n 14`, nested dissection, one core): factorization 6.8·10⁸
/// multiply-adds in 53 ms, one CG iteration 7.2·10⁶ in 3.3 ms, a ratio of about 6.
pub const SOLVE_COST_RATIO: f64 = 6.0;

/// Bounds of the CG iteration budget per solve.
const MIN_BUDGET: usize = 3;
const MAX_BUDGET: usize = 100;

/// How [`ReusedCholesky::solve`] solved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReuseRoute {
    /// The matrix was factored and the solve was direct.
    Factored,
    /// CG on the matrix, preconditioned with a held factorization of an earlier one.
    Preconditioned {
        /// CG iterations.
        iterations: usize,
    },
}

/// Counters since the solver was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReuseStats {
    /// Numeric factorizations.
    pub factorizations: usize,
    /// Solves done by preconditioned CG with a held factorization.
    pub preconditioned_solves: usize,
    /// CG iterations, those of abandoned attempts included.
    pub cg_iterations: usize,
    /// CG attempts abandoned for a new factorization.
    pub abandoned: usize,
}

/// Sparse Cholesky that keeps its factorization for the next, nearby matrices (module docs).
pub struct ReusedCholesky {
    cholesky: CholeskySolver,
    /// The solver holds a factorization (of some earlier matrix of the sequence).
    held: bool,
    /// The next solve factors first (the held factorization needed too many CG iterations).
    refactor_next: bool,
    stats: ReuseStats,
}

/// The held factorization as a CG preconditioner, z = (L Lᵀ)⁻¹ r. The triangular solves
/// need the solver's scratch space, hence the lock (uncontended: CG applies it sequentially).
struct HeldFactor<'a>(Mutex<&'a mut CholeskySolver>);

impl Preconditioner for HeldFactor<'_> {
    fn apply(&self, r: &[f64], z: &mut [f64]) {
        z.copy_from_slice(r);
        let mut solver = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if solver.solve_in_place(z).is_err() {
            // A non-finite solution: CG stops on it with `CgStop::NonFinite`.
            z.fill(f64::NAN);
        }
    }
}

impl ReusedCholesky {
    /// A solver for the system of `field` (the name appears in errors).
    pub fn new(field: &str) -> Self {
        ReusedCholesky {
            cholesky: CholeskySolver::new(field),
            held: false,
            refactor_next: false,
            stats: ReuseStats::default(),
        }
    }

    /// Use `ordering` for the symbolic analyses to come.
    pub fn with_ordering(mut self, ordering: CholeskyOrdering) -> Self {
        self.cholesky = self.cholesky.with_ordering(ordering);
        self
    }

    /// Drop the held factorization: the next [`Self::solve`] factors. Callers whose results
    /// must not depend on what was solved before (a Newton solve started afresh) call this
    /// first.
    pub fn forget(&mut self) {
        self.held = false;
        self.refactor_next = false;
    }

    /// Factor `a` now; [`Self::solve_factored`] then solves with it exactly, and later
    /// [`Self::solve`] calls precondition with it.
    pub fn factor(&mut self, a: &CsrMatrix) -> Result<(), SolverError> {
        self.held = false;
        self.refactor_next = false;
        self.cholesky.factor(a)?;
        self.stats.factorizations += 1;
        self.held = true;
        Ok(())
    }

    /// Overwrite `b` with (L Lᵀ)⁻¹ b, the exact solve with the held factorization.
    ///
    /// # Panics
    /// When no factorization is held.
    pub fn solve_factored(&mut self, b: &mut [f64]) -> Result<(), SolverError> {
        assert!(self.held, "ReusedCholesky::solve_factored without a held factorization");
        self.cholesky.solve_in_place(b)
    }

    /// Overwrite `b` with the solution x of `a x = b`, to ‖b − a x‖ ≤ `rel_tol` ‖b‖ when CG with
    /// the held factorization gets there within its budget; otherwise (or with nothing held)
    /// `a` is factored and the solve is direct. `a` should be symmetric positive definite: an
    /// indefinite `a` gives [`SolverError::NotPositiveDefinite`] when it is factored (CG stops
    /// on negative curvature and hands over); CG may also converge on a mildly indefinite `a`,
    /// and its x then solves `a x = b` all the same.
    pub fn solve(
        &mut self,
        a: &CsrMatrix,
        b: &mut [f64],
        rel_tol: f64,
    ) -> Result<ReuseRoute, SolverError> {
        if self.held && !self.refactor_next && self.cholesky.factor_nnz() > 0 {
            let budget = self.iteration_budget(a);
            let mut x = vec![0.0; b.len()];
            let params = CgParams { rel_tol, abs_tol: 0.0, max_iterations: budget };
            let slow = |h: &[f64]| predicted_iterations(h, rel_tol) > budget as f64;
            let pre = HeldFactor(Mutex::new(&mut self.cholesky));
            let info = pcg_until(a, b, &mut x, &pre, &params, &slow);
            self.stats.cg_iterations += info.iterations;
            if info.converged {
                b.copy_from_slice(&x);
                self.stats.preconditioned_solves += 1;
                self.refactor_next = 2 * info.iterations > budget;
                return Ok(ReuseRoute::Preconditioned { iterations: info.iterations });
            }
            self.stats.abandoned += 1;
            tracing::debug!(
                iterations = info.iterations,
                budget,
                stop = ?info.stop,
                relative_residual = info.relative_residual(),
                "held Cholesky factorization too stale for CG: factoring the current matrix"
            );
            debug_assert!(info.stop != CgStop::Converged);
        }
        self.factor(a)?;
        self.cholesky.solve_in_place(b)?;
        Ok(ReuseRoute::Factored)
    }

    /// CG iterations worth one factorization of the held structure (module docs).
    pub fn iteration_budget(&self, a: &CsrMatrix) -> usize {
        let per_iteration = 2.0 * self.cholesky.factor_nnz() as f64 + a.nnz() as f64;
        let budget = self.cholesky.factor_flops() / (SOLVE_COST_RATIO * per_iteration.max(1.0));
        (budget as usize).clamp(MIN_BUDGET, MAX_BUDGET)
    }

    /// Counters since the solver was made.
    pub fn stats(&self) -> ReuseStats {
        self.stats
    }

    /// The underlying direct solver (its ordering and factor size).
    pub fn cholesky(&self) -> &CholeskySolver {
        &self.cholesky
    }
}

/// Total CG iterations to reach `rel_tol`, extrapolated from the mean reduction per iteration
/// of the residual history so far (infinite when it does not decrease); 0 before the third
/// iteration, which is too early to tell.
fn predicted_iterations(history: &[f64], rel_tol: f64) -> f64 {
    let k = history.len().saturating_sub(1);
    if k < 3 || history[0] <= 0.0 {
        return 0.0;
    }
    let reduction = history[k] / history[0];
    if reduction.is_nan() || reduction >= 1.0 {
        return f64::INFINITY;
    }
    k as f64 * rel_tol.ln() / reduction.ln()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linear::residual_norm;
    use crate::test_matrices::{ELASTIC, grid_system};

    fn rhs(n: usize) -> Vec<f64> {
        (0..n).map(|i| ((i * 7919) % 101) as f64 / 50.0 - 1.0).collect()
    }

    fn relative_residual(a: &CsrMatrix, x: &[f64], b: &[f64]) -> f64 {
        residual_norm(a, x, b) / b.iter().map(|v| v * v).sum::<f64>().sqrt()
    }

    /// `a` with its values scaled row by row by 1 + ε sin(i): a nearby SPD matrix (a
    /// symmetric diagonal scaling D A D with D = √(1 + ε sin)).
    fn perturbed(a: &CsrMatrix, eps: f64) -> CsrMatrix {
        let d: Vec<f64> = (0..a.n_rows).map(|i| (1.0 + eps * (i as f64).sin()).sqrt()).collect();
        let mut p = a.clone();
        for i in 0..a.n_rows {
            for k in a.row_ptr[i]..a.row_ptr[i + 1] {
                p.values[k] *= d[i] * d[a.col_idx[k] as usize];
            }
        }
        p
    }

    #[test]
    fn nearby_matrix_is_solved_by_cg_with_the_held_factor() {
        let a0 = grid_system(10, &ELASTIC, 0.01);
        let mut solver = ReusedCholesky::new("test");
        let b = rhs(a0.n_rows);
        let mut x = b.clone();
        assert_eq!(solver.solve(&a0, &mut x, 1e-10).unwrap(), ReuseRoute::Factored);
        assert!(relative_residual(&a0, &x, &b) < 1e-12);
        // a 2 % change: CG with the held factorization, to the requested tolerance
        let a1 = perturbed(&a0, 0.02);
        let mut x = b.clone();
        let route = solver.solve(&a1, &mut x, 1e-10).unwrap();
        let ReuseRoute::Preconditioned { iterations } = route else {
            panic!("expected a preconditioned solve, got {route:?}")
        };
        assert!(iterations <= 8, "{iterations} CG iterations");
        let r = relative_residual(&a1, &x, &b);
        assert!(r <= 1e-10, "relative residual {r:e}");
        let stats = solver.stats();
        assert_eq!((stats.factorizations, stats.preconditioned_solves, stats.abandoned), (1, 1, 0));
        assert_eq!(stats.cg_iterations, iterations);
    }

    #[test]
    fn distant_matrix_is_factored_after_an_abandoned_cg() {
        let a0 = grid_system(10, &ELASTIC, 0.01);
        let mut solver = ReusedCholesky::new("test");
        let b = rhs(a0.n_rows);
        solver.factor(&a0).unwrap();
        // a ±90 % change: CG with the old factorization would take long, it is abandoned
        let a1 = perturbed(&a0, 0.9);
        let mut x = b.clone();
        assert_eq!(solver.solve(&a1, &mut x, 1e-12).unwrap(), ReuseRoute::Factored);
        assert!(relative_residual(&a1, &x, &b) < 1e-12);
        let stats = solver.stats();
        assert_eq!((stats.factorizations, stats.abandoned), (2, 1));
        assert!(stats.cg_iterations <= solver.iteration_budget(&a1));
        // … and the new factorization is held: the same matrix again takes no CG iteration
        // beyond the first
        let mut x = b.clone();
        let route = solver.solve(&a1, &mut x, 1e-12).unwrap();
        assert!(matches!(route, ReuseRoute::Preconditioned { iterations } if iterations <= 1));
    }

    #[test]
    fn forget_makes_the_next_solve_factor() {
        let a = grid_system(6, &ELASTIC, 0.01);
        let mut solver = ReusedCholesky::new("test");
        let mut x = rhs(a.n_rows);
        solver.solve(&a, &mut x, 1e-10).unwrap();
        solver.forget();
        let mut x = rhs(a.n_rows);
        assert_eq!(solver.solve(&a, &mut x, 1e-10).unwrap(), ReuseRoute::Factored);
        assert_eq!(solver.stats().factorizations, 2);
    }

    #[test]
    fn indefinite_matrix_is_reported_not_solved() {
        let a0 = grid_system(5, &ELASTIC, 0.01);
        let mut solver = ReusedCholesky::new("test");
        solver.factor(&a0).unwrap();
        let mut a1 = a0.clone();
        a1.values.iter_mut().for_each(|v| *v = -*v);
        let mut x = rhs(a1.n_rows);
        let err = solver.solve(&a1, &mut x, 1e-10).unwrap_err();
        assert!(matches!(err, SolverError::NotPositiveDefinite { .. }), "{err}");
    }

    #[test]
    fn budget_scales_with_the_factorization_work() {
        let small = grid_system(5, &ELASTIC, 0.01);
        let large = grid_system(14, &ELASTIC, 0.01);
        let budget = |a: &CsrMatrix| {
            let mut s = ReusedCholesky::new("test").with_ordering(CholeskyOrdering::Amd);
            s.factor(a).unwrap();
            s.iteration_budget(a)
        };
        let (b_small, b_large) = (budget(&small), budget(&large));
        assert!(b_large > b_small, "budget {b_large} (14³ grid) vs {b_small} (5³)");
        // The formula of the module docs, unclamped on the larger grid.
        let mut s = ReusedCholesky::new("test").with_ordering(CholeskyOrdering::Amd);
        s.factor(&large).unwrap();
        let per_iteration = 2.0 * s.cholesky().factor_nnz() as f64 + large.nnz() as f64;
        let expected = s.cholesky().factor_flops() / (SOLVE_COST_RATIO * per_iteration);
        assert!(expected > MIN_BUDGET as f64 && expected < MAX_BUDGET as f64, "{expected}");
        assert_eq!(b_large, expected as usize);
    }

    #[test]
    fn prediction_extrapolates_the_mean_rate() {
        assert_eq!(predicted_iterations(&[1.0, 0.1, 0.01], 1e-10), 0.0);
        let p = predicted_iterations(&[1.0, 0.1, 0.01, 0.001], 1e-10);
        assert!((p - 10.0).abs() < 1e-9, "{p}");
        assert_eq!(predicted_iterations(&[1.0, 2.0, 3.0, 4.0], 1e-10), f64::INFINITY);
    }
}
