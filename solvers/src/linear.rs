//! The linear-solver trait: factor (or set up) once, then solve and solve-transpose many times.
//!
//! (Implementations in progress.)

use crate::error::SolverError;
use crate::sparse::CsrMatrix;

/// A linear solver for one field's system matrix.
///
/// `factor` is called each time the matrix values change (its sparsity pattern stays the same,
/// so symbolic work is done once and reused); `solve_in_place` and `solve_transpose_in_place`
/// then may be called any number of times. The adjoint engine calls `solve_transpose_in_place`
/// with the factorization of the converged forward state.
pub trait LinearSolver: Send {
    /// Factor (or set up a preconditioner for) `a`. `a` keeps the same pattern across calls.
    fn factor(&mut self, a: &CsrMatrix) -> Result<(), SolverError>;
    /// Overwrite `b` with A⁻¹ b.
    fn solve_in_place(&mut self, b: &mut [f64]) -> Result<(), SolverError>;
    /// Overwrite `b` with A⁻ᵀ b.
    fn solve_transpose_in_place(&mut self, b: &mut [f64]) -> Result<(), SolverError>;
    /// A short name for logs and `Info` (`"cholesky"`, `"lu"`, `"amg-cg"`).
    fn name(&self) -> &'static str;
}
