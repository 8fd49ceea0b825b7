//! The linear-solver trait (factor once, then solve and solve-transpose many times) and its
//! direct implementations on faer's sparse Cholesky ([`CholeskySolver`]) and LU ([`LuSolver`]).
//!
//! Both keep the symbolic analysis (fill-reducing ordering, elimination tree, supernodes) of the
//! first factorization and reuse it while the sparsity pattern stays the same, so a Newton step
//! pays only the numeric factorization. The pattern is compared cheaply (sizes plus a hash of
//! `row_ptr` and `col_idx`); a changed pattern triggers a new symbolic analysis.
//!
//! Our [`CsrMatrix`] arrays are handed to faer as the compressed-sparse-*column* arrays of the
//! transpose, without copying the pattern: for a matrix `A` stored by rows, the same arrays read
//! by columns describe `Aᵀ`. Cholesky is unaffected (`A = Aᵀ`); the LU solver factors `Aᵀ` and
//! swaps solve and transpose-solve accordingly.
//!
//! Solves run sequentially (`Par::Seq`): on 2 cores faer's parallel triangular solves were
//! 10–25× slower. The numeric factorization runs sequentially by default as well: on the 3D P1
//! Laplacian of a 30³ Kuhn cube (24 389 unknowns, 2 busy cores, `examples/bench_assembly.rs`)
//! Cholesky refactorization took 0.21 s sequential vs 0.27 s with rayon, LU 1.18 s vs 1.41 s;
//! see [`CholeskySolver::with_parallel_factorization`] to switch.

use crate::error::SolverError;
use crate::sparse::CsrMatrix;
use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::cholesky::llt::factor::{LltError as DenseLltError, LltRegularization};
use faer::sparse::linalg::LuError;
use faer::sparse::linalg::cholesky::{
    LltRef, SymbolicCholesky, SymbolicCholeskyRaw, SymmetricOrdering, factorize_symbolic_cholesky,
};
use faer::sparse::linalg::lu::{LuRef, NumericLu, SymbolicLu, factorize_symbolic_lu};
use faer::sparse::{SparseColMatRef, SymbolicSparseColMatRef};
use faer::{Conj, MatMut, Par, Side};

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

/// ‖A x − b‖₂, the residual norm of a linear solve.
pub fn residual_norm(a: &CsrMatrix, x: &[f64], b: &[f64]) -> f64 {
    assert_eq!(b.len(), a.n_rows, "b has {} entries for {} rows", b.len(), a.n_rows);
    let mut ax = vec![0.0; a.n_rows];
    a.mul_vec_into(x, &mut ax);
    ax.iter().zip(b).map(|(p, q)| (p - q) * (p - q)).sum::<f64>().sqrt()
}

/// Sizes plus a hash of the pattern arrays: enough to notice a changed pattern in O(nnz)
/// integer operations, far below the cost of a numeric factorization.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PatternKey {
    n: usize,
    nnz: usize,
    hash: u64,
}

impl PatternKey {
    fn of(a: &CsrMatrix) -> Self {
        // FNV-1a style mixing over whole words.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &v in a.row_ptr.iter().chain(&a.col_idx) {
            h = (h ^ v as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        PatternKey { n: a.n_rows, nnz: a.nnz(), hash: h }
    }
}

fn check_square(a: &CsrMatrix) {
    assert_eq!(
        a.n_rows, a.n_cols,
        "a direct solver needs a square matrix, got {}×{}",
        a.n_rows, a.n_cols
    );
    assert_eq!(
        a.values.len(),
        a.col_idx.len(),
        "matrix has {} values for {} entries",
        a.values.len(),
        a.col_idx.len()
    );
}

/// First row holding a NaN or infinity, if any.
fn first_non_finite_row(a: &CsrMatrix) -> Option<usize> {
    let k = a.values.iter().position(|v| !v.is_finite())?;
    Some(a.row_ptr.partition_point(|&p| p <= k) - 1)
}

fn non_finite(field: &str, quantity: &'static str, dof: usize) -> SolverError {
    SolverError::NonFinite {
        field: field.to_string(),
        quantity,
        dof,
        dof_description: format!("unknown {dof}"),
        iteration: 0,
    }
}

fn check_rhs(field: &str, n: usize, b: &[f64]) -> Result<(), SolverError> {
    assert_eq!(b.len(), n, "right-hand side has {} entries for {n} unknowns", b.len());
    match b.iter().position(|v| !v.is_finite()) {
        Some(k) => Err(non_finite(field, "right-hand side", k)),
        None => Ok(()),
    }
}

/// The CSR arrays of `a` read as CSC: this is `Aᵀ` for faer.
fn transpose_view(a: &CsrMatrix) -> SparseColMatRef<'_, usize, f64> {
    let sym =
        SymbolicSparseColMatRef::new_checked(a.n_cols, a.n_rows, &a.row_ptr, None, &a.col_idx);
    SparseColMatRef::new(sym, &a.values)
}

/// Sparse Cholesky (LLᵀ) solver for symmetric positive definite systems, on faer.
///
/// Reads the upper triangle of `A` (row `i`, columns `j ≥ i`; the lower triangle of `Aᵀ` in
/// faer's column view). Transpose-solves equal solves. A non-positive pivot gives
/// [`SolverError::NotPositiveDefinite`] naming the field and the pivot.
pub struct CholeskySolver {
    field: String,
    par_factor: Par,
    symbolic: Option<(PatternKey, SymbolicCholesky<usize>)>,
    l_values: Vec<f64>,
    factor_stack: MemBuffer,
    solve_stack: MemBuffer,
    n: usize,
    factored: bool,
    n_symbolic: usize,
}

impl CholeskySolver {
    /// A solver for the system of `field` (the name appears in errors).
    pub fn new(field: &str) -> Self {
        CholeskySolver {
            field: field.to_string(),
            par_factor: Par::Seq,
            symbolic: None,
            l_values: Vec::new(),
            factor_stack: MemBuffer::new(faer::dyn_stack::StackReq::EMPTY),
            solve_stack: MemBuffer::new(faer::dyn_stack::StackReq::EMPTY),
            n: 0,
            factored: false,
            n_symbolic: 0,
        }
    }

    /// Run the numeric factorization on rayon's global pool (solves stay sequential).
    pub fn with_parallel_factorization(mut self, parallel: bool) -> Self {
        self.par_factor = if parallel { Par::rayon(0) } else { Par::Seq };
        self
    }

    /// How many symbolic analyses have been done (1 while the pattern never changed).
    pub fn symbolic_count(&self) -> usize {
        self.n_symbolic
    }

    /// Number of stored entries of the factor L (0 before the first factorization).
    pub fn factor_nnz(&self) -> usize {
        self.l_values.len()
    }

    fn solve(&mut self, b: &mut [f64]) -> Result<(), SolverError> {
        assert!(self.factored, "{}: solve called before a successful factor", self.field);
        check_rhs(&self.field, self.n, b)?;
        if self.n == 0 {
            return Ok(());
        }
        let (_, symbolic) = self.symbolic.as_ref().expect("factored implies symbolic");
        let llt = LltRef::<usize, f64>::new(symbolic, &self.l_values);
        let n = self.n;
        llt.solve_in_place_with_conj(
            Conj::No,
            MatMut::from_column_major_slice_mut(b, n, 1),
            Par::Seq,
            MemStack::new(&mut self.solve_stack),
        );
        match b.iter().position(|v| !v.is_finite()) {
            Some(k) => Err(non_finite(&self.field, "solution", k)),
            None => Ok(()),
        }
    }
}

impl LinearSolver for CholeskySolver {
    fn factor(&mut self, a: &CsrMatrix) -> Result<(), SolverError> {
        check_square(a);
        self.factored = false;
        if let Some(row) = first_non_finite_row(a) {
            return Err(non_finite(&self.field, "matrix", row));
        }
        self.n = a.n_rows;
        if self.n == 0 {
            self.factored = true;
            return Ok(());
        }
        let key = PatternKey::of(a);
        let at = transpose_view(a);
        if self.symbolic.as_ref().is_none_or(|(k, _)| *k != key) {
            let t = std::time::Instant::now();
            let symbolic = factorize_symbolic_cholesky(
                at.symbolic(),
                Side::Lower,
                SymmetricOrdering::Amd,
                Default::default(),
            )
            .map_err(|e| SolverError::Other {
                field: self.field.clone(),
                message: format!("symbolic Cholesky analysis failed: {e:?}"),
            })?;
            self.factor_stack = MemBuffer::new(
                symbolic.factorize_numeric_llt_scratch::<f64>(self.par_factor, Default::default()),
            );
            self.solve_stack = MemBuffer::new(symbolic.solve_in_place_scratch::<f64>(1, Par::Seq));
            self.l_values = vec![0.0; symbolic.len_val()];
            self.n_symbolic += 1;
            tracing::debug!(
                field = %self.field,
                n = self.n,
                nnz_a = a.nnz(),
                nnz_l = symbolic.len_val(),
                seconds = t.elapsed().as_secs_f64(),
                "symbolic Cholesky"
            );
            self.symbolic = Some((key, symbolic));
        }
        let (_, symbolic) = self.symbolic.as_ref().unwrap();
        let t = std::time::Instant::now();
        let result = symbolic.factorize_numeric_llt::<f64>(
            &mut self.l_values,
            at,
            Side::Lower,
            LltRegularization::default(),
            self.par_factor,
            MemStack::new(&mut self.factor_stack),
            Default::default(),
        );
        match result {
            Ok(_) => {}
            Err(DenseLltError::NonPositivePivot { index }) => {
                // faer 0.24 reports the pivot 1-based from its simplicial and 0-based from its
                // supernodal factorization, in the fill-reducing order; fwd maps it back.
                let pivot = match symbolic.raw() {
                    SymbolicCholeskyRaw::Simplicial(_) => index.saturating_sub(1),
                    SymbolicCholeskyRaw::Supernodal(_) => index,
                };
                let unknown = match symbolic.perm() {
                    Some(p) => p.arrays().0.get(pivot).copied(),
                    None => (pivot < self.n).then_some(pivot),
                };
                let at = unknown.map_or_else(String::new, |u| format!(" (unknown {u})"));
                return Err(SolverError::NotPositiveDefinite {
                    field: self.field.clone(),
                    detail: format!("Cholesky pivot {pivot} of {}{at} is not positive", self.n),
                });
            }
        }
        tracing::debug!(field = %self.field, seconds = t.elapsed().as_secs_f64(), "numeric Cholesky");
        self.factored = true;
        Ok(())
    }

    fn solve_in_place(&mut self, b: &mut [f64]) -> Result<(), SolverError> {
        self.solve(b)
    }

    fn solve_transpose_in_place(&mut self, b: &mut [f64]) -> Result<(), SolverError> {
        self.solve(b)
    }

    fn name(&self) -> &'static str {
        "cholesky"
    }
}

/// Sparse LU solver with partial pivoting for general (non-symmetric) systems, on faer.
///
/// Factors `Aᵀ = L U` (faer's column view of our row storage), so `A x = b` is solved as
/// `Uᵀ Lᵀ x = b` and `Aᵀ x = b` as `L U x = b`. A (numerically) singular matrix gives
/// [`SolverError::Singular`]: exact zero pivots are detected right after the factorization by a
/// probe solve with a vector of ones (one extra triangular solve pair, a small fraction of the
/// factorization cost), since faer's numeric LU does not report them itself.
pub struct LuSolver {
    field: String,
    par_factor: Par,
    symbolic: Option<(PatternKey, SymbolicLu<usize>)>,
    numeric: NumericLu<usize, f64>,
    factor_stack: MemBuffer,
    solve_stack: MemBuffer,
    n: usize,
    factored: bool,
    n_symbolic: usize,
}

impl LuSolver {
    /// A solver for the system of `field` (the name appears in errors).
    pub fn new(field: &str) -> Self {
        LuSolver {
            field: field.to_string(),
            par_factor: Par::Seq,
            symbolic: None,
            numeric: NumericLu::new(),
            factor_stack: MemBuffer::new(faer::dyn_stack::StackReq::EMPTY),
            solve_stack: MemBuffer::new(faer::dyn_stack::StackReq::EMPTY),
            n: 0,
            factored: false,
            n_symbolic: 0,
        }
    }

    /// Run the numeric factorization on rayon's global pool (solves stay sequential).
    pub fn with_parallel_factorization(mut self, parallel: bool) -> Self {
        self.par_factor = if parallel { Par::rayon(0) } else { Par::Seq };
        self
    }

    /// How many symbolic analyses have been done (1 while the pattern never changed).
    pub fn symbolic_count(&self) -> usize {
        self.n_symbolic
    }

    /// Solves with the factorization of `Aᵀ`: `transpose_of_factored` = true solves
    /// (Aᵀ)ᵀ x = A x = b.
    fn solve_raw(&mut self, b: &mut [f64], transpose_of_factored: bool) {
        let (_, symbolic) = self.symbolic.as_ref().expect("factored implies symbolic");
        let lu = LuRef::<usize, f64>::new_unchecked(symbolic, &self.numeric);
        let rhs = MatMut::from_column_major_slice_mut(b, self.n, 1);
        let stack = MemStack::new(&mut self.solve_stack);
        if transpose_of_factored {
            lu.solve_transpose_in_place_with_conj(Conj::No, rhs, Par::Seq, stack);
        } else {
            lu.solve_in_place_with_conj(Conj::No, rhs, Par::Seq, stack);
        }
    }

    fn solve(&mut self, b: &mut [f64], transpose: bool) -> Result<(), SolverError> {
        assert!(self.factored, "{}: solve called before a successful factor", self.field);
        check_rhs(&self.field, self.n, b)?;
        if self.n == 0 {
            return Ok(());
        }
        // We factored Aᵀ: A x = b is the transpose solve of the factored matrix.
        self.solve_raw(b, !transpose);
        match b.iter().position(|v| !v.is_finite()) {
            Some(k) => Err(SolverError::Singular {
                field: self.field.clone(),
                dof: None,
                detail: format!("the LU solve produced a non-finite value at unknown {k}"),
            }),
            None => Ok(()),
        }
    }
}

impl LinearSolver for LuSolver {
    fn factor(&mut self, a: &CsrMatrix) -> Result<(), SolverError> {
        check_square(a);
        self.factored = false;
        if let Some(row) = first_non_finite_row(a) {
            return Err(non_finite(&self.field, "matrix", row));
        }
        self.n = a.n_rows;
        if self.n == 0 {
            self.factored = true;
            return Ok(());
        }
        let key = PatternKey::of(a);
        let at = transpose_view(a);
        if self.symbolic.as_ref().is_none_or(|(k, _)| *k != key) {
            let t = std::time::Instant::now();
            let symbolic =
                factorize_symbolic_lu(at.symbolic(), Default::default()).map_err(|e| {
                    SolverError::Other {
                        field: self.field.clone(),
                        message: format!("symbolic LU analysis failed: {e:?}"),
                    }
                })?;
            self.factor_stack = MemBuffer::new(
                symbolic.factorize_numeric_lu_scratch::<f64>(self.par_factor, Default::default()),
            );
            self.solve_stack = MemBuffer::new(
                symbolic
                    .solve_in_place_scratch::<f64>(1, Par::Seq)
                    .or(symbolic.solve_transpose_in_place_scratch::<f64>(1, Par::Seq)),
            );
            self.numeric = NumericLu::new();
            self.n_symbolic += 1;
            tracing::debug!(
                field = %self.field,
                n = self.n,
                nnz_a = a.nnz(),
                seconds = t.elapsed().as_secs_f64(),
                "symbolic LU"
            );
            self.symbolic = Some((key, symbolic));
        }
        let (_, symbolic) = self.symbolic.as_ref().unwrap();
        let t = std::time::Instant::now();
        let result = symbolic.factorize_numeric_lu::<f64>(
            &mut self.numeric,
            at,
            self.par_factor,
            MemStack::new(&mut self.factor_stack),
            Default::default(),
        );
        match result {
            Ok(_) => {}
            Err(LuError::SymbolicSingular { index }) => {
                return Err(SolverError::Singular {
                    field: self.field.clone(),
                    dof: None,
                    detail: format!(
                        "no nonzero pivot found at elimination step {index} of {} (structurally singular)",
                        self.n
                    ),
                });
            }
            Err(LuError::Generic(e)) => {
                return Err(SolverError::Other {
                    field: self.field.clone(),
                    message: format!("LU factorization failed: {e:?}"),
                });
            }
        }
        // Probe for exact zero pivots, which faer's numeric LU does not report.
        let mut probe = vec![1.0; self.n];
        self.solve_raw(&mut probe, false);
        if let Some(k) = probe.iter().position(|v| !v.is_finite()) {
            return Err(SolverError::Singular {
                field: self.field.clone(),
                dof: None,
                detail: format!(
                    "zero pivot: a probe solve with a vector of ones gave {} at unknown {k}",
                    probe[k]
                ),
            });
        }
        tracing::debug!(field = %self.field, seconds = t.elapsed().as_secs_f64(), "numeric LU");
        self.factored = true;
        Ok(())
    }

    fn solve_in_place(&mut self, b: &mut [f64]) -> Result<(), SolverError> {
        self.solve(b, false)
    }

    fn solve_transpose_in_place(&mut self, b: &mut [f64]) -> Result<(), SolverError> {
        self.solve(b, true)
    }

    fn name(&self) -> &'static str {
        "lu"
    }
}
