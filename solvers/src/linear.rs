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
//!
//! The Cholesky fill-reducing ordering is chosen by [`CholeskyOrdering`] (see
//! [`crate::ordering`]): by default AMD, and from the second factorization of a large pattern
//! on nested dissection (METIS) where it needs clearly fewer multiply-adds. On the 3D
//! finite-strain Kuhn cube of `examples/bench_ogden.rs` (`--n 14`, 9 450 unknowns) nested
//! dissection stores 3.38·10⁶ entries in `L` instead of 4.08·10⁶ and needs 6.8·10⁸
//! multiply-adds instead of 9.6·10⁸; a numeric factorization takes 37 ms instead of 44 ms
//! (sequential, 2 busy cores).

use crate::error::SolverError;
pub use crate::ordering::CholeskyOrdering;
use crate::ordering::{AUTO_FLOP_RATIO, AUTO_MIN_FLOPS, nested_dissection};
use crate::sparse::CsrMatrix;
use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::cholesky::llt::factor::{LltError as DenseLltError, LltRegularization};
use faer::perm::PermRef;
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
    /// [`Self::factor`] of a matrix the caller has no further use for: a solver that keeps A
    /// (AMG-CG multiplies by it) keeps this one instead of a copy. The default factors a
    /// borrow and drops `a`.
    fn factor_owned(&mut self, a: CsrMatrix) -> Result<(), SolverError> {
        self.factor(&a)
    }
    /// Overwrite `b` with A⁻¹ b.
    fn solve_in_place(&mut self, b: &mut [f64]) -> Result<(), SolverError>;
    /// Overwrite `b` with A⁻ᵀ b.
    fn solve_transpose_in_place(&mut self, b: &mut [f64]) -> Result<(), SolverError>;
    /// A short name for logs and `Info` (`"cholesky"`, `"lu"`, `"amg-cg"`).
    fn name(&self) -> &'static str;
    /// Iterations of the last solve for iterative solvers (`None` for direct ones, and
    /// before the first solve).
    fn last_iterations(&self) -> Option<usize> {
        None
    }
    /// Transposed solves answered from a forward solution without solving (the self-adjoint
    /// shortcut of [`crate::route::SpdSolver`]; 0 for solvers without it).
    fn self_adjoint_solves(&self) -> usize {
        0
    }
    /// How many solves the caller expects per factorization from now on (default: a forward
    /// and an adjoint, 2; a field solved at every state of a time run with one matrix: many).
    /// A solver that chooses its method by predicted cost ([`crate::route::SpdSolver`])
    /// predicts for this count; others ignore it.
    fn expect_solves(&mut self, per_factorization: usize) {
        let _ = per_factorization;
    }
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
pub struct PatternKey {
    n: usize,
    nnz: usize,
    hash: u64,
}

impl PatternKey {
    /// The key of `a`'s sparsity pattern (its values play no part).
    pub fn of(a: &CsrMatrix) -> Self {
        // FNV-1a style mixing over whole words.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for v in a.row_ptr.iter().map(|&p| p as u64).chain(a.col_idx.iter().map(|&j| j as u64)) {
            h = (h ^ v).wrapping_mul(0x0000_0100_0000_01b3);
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
pub(crate) fn first_non_finite_row(a: &CsrMatrix) -> Option<usize> {
    let k = a.values.iter().position(|v| !v.is_finite())?;
    Some(a.row_ptr.partition_point(|&p| p <= k) - 1)
}

pub(crate) fn non_finite(field: &str, quantity: &'static str, dof: usize) -> SolverError {
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
    check_finite_vector(field, "right-hand side", b)
}

/// [`SolverError::NonFinite`] naming the first NaN or infinity of `v` (its `quantity`, e.g.
/// `"right-hand side"`, by unknown), or `Ok`: the check a linear solver makes of its input.
pub fn check_finite_vector(
    field: &str,
    quantity: &'static str,
    v: &[f64],
) -> Result<(), SolverError> {
    match v.iter().position(|x| !x.is_finite()) {
        Some(k) => Err(non_finite(field, quantity, k)),
        None => Ok(()),
    }
}

/// [`SolverError::NonFinite`] naming the first NaN or infinity of the matrix `a` by its row and
/// column, or `Ok`: the check an iterative solver makes before its set-up.
pub fn check_finite_matrix(field: &str, a: &CsrMatrix) -> Result<(), SolverError> {
    let Some(k) = a.values.iter().position(|v| !v.is_finite()) else { return Ok(()) };
    let row = a.row_ptr.partition_point(|&p| p <= k) - 1;
    Err(SolverError::NonFinite {
        field: field.to_string(),
        quantity: "matrix",
        dof: row,
        dof_description: format!("entry ({row}, {})", a.col_idx[k]),
        iteration: 0,
    })
}

/// `a`'s column indices widened to faer's index type (its views take one index type for the
/// pointers and the indices): a copy that lives for one factorization.
fn wide_cols(a: &CsrMatrix) -> Vec<usize> {
    a.col_idx.iter().map(|&j| j as usize).collect()
}

/// The CSR arrays of `a` (with its columns widened, [`wide_cols`]) read as CSC: this is `Aᵀ`
/// for faer.
fn transpose_view<'a>(a: &'a CsrMatrix, cols: &'a [usize]) -> SparseColMatRef<'a, usize, f64> {
    let sym = SymbolicSparseColMatRef::new_checked(a.n_cols, a.n_rows, &a.row_ptr, None, cols);
    SparseColMatRef::new(sym, &a.values)
}

/// Multiply-adds of one numeric factorization with the structure `symbolic`:
/// `Σ_j c_j (c_j + 1) / 2` over the columns of `L`, `c_j` the entries of column `j` on and
/// below the diagonal (explicit zeros of relaxed supernodes included, as they are computed).
fn factor_flops(symbolic: &SymbolicCholesky<usize>) -> f64 {
    let column = |c: usize| (c as f64) * (c as f64 + 1.0) / 2.0;
    match symbolic.raw() {
        SymbolicCholeskyRaw::Simplicial(s) => {
            s.col_ptr().windows(2).map(|w| column(w[1] - w[0])).sum()
        }
        SymbolicCholeskyRaw::Supernodal(s) => {
            let rows = s.col_ptr_for_row_idx();
            (0..s.n_supernodes())
                .map(|k| {
                    let width = s.supernode_end()[k] - s.supernode_begin()[k];
                    let below = rows[k + 1] - rows[k];
                    (1..=width).map(|c| column(c + below)).sum::<f64>()
                })
                .sum()
        }
    }
}

/// The symbolic analysis of one pattern, with the ordering it used.
struct Analysis {
    key: PatternKey,
    symbolic: SymbolicCholesky<usize>,
    /// [`CholeskyOrdering::Amd`] or [`CholeskyOrdering::NestedDissection`].
    used: CholeskyOrdering,
    /// `Auto` chose AMD for a large factorization and has not tried nested dissection yet.
    nd_pending: bool,
    /// A numeric factorization has used this analysis (an [`CholeskySolver::analyse`] alone
    /// does not count: nested dissection is tried at the second factorization).
    factored: bool,
}

/// Sparse Cholesky (LLᵀ) solver for symmetric positive definite systems, on faer.
///
/// Reads the upper triangle of `A` (row `i`, columns `j ≥ i`; the lower triangle of `Aᵀ` in
/// faer's column view). Transpose-solves equal solves. A non-positive pivot gives
/// [`SolverError::NotPositiveDefinite`] naming the field and the pivot. The fill-reducing
/// ordering is set by [`CholeskySolver::with_ordering`] (default [`CholeskyOrdering::Auto`]).
pub struct CholeskySolver {
    field: String,
    par_factor: Par,
    ordering: CholeskyOrdering,
    symbolic: Option<Analysis>,
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
            ordering: CholeskyOrdering::Auto,
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

    /// Use `ordering` as the fill-reducing ordering of the symbolic analyses to come.
    pub fn with_ordering(mut self, ordering: CholeskyOrdering) -> Self {
        self.ordering = ordering;
        self
    }

    /// The ordering of the current symbolic analysis: [`CholeskyOrdering::Amd`] or
    /// [`CholeskyOrdering::NestedDissection`] (what [`CholeskyOrdering::Auto`] uses so far: AMD
    /// at the first factorization of a pattern, possibly nested dissection from the second on),
    /// or `None` before the first factorization of a non-empty matrix.
    pub fn ordering_used(&self) -> Option<CholeskyOrdering> {
        self.symbolic.as_ref().map(|a| a.used)
    }

    /// How many symbolic analyses have been kept: 1 while the pattern never changed, plus one
    /// where [`CholeskyOrdering::Auto`] switched a pattern to nested dissection at its second
    /// factorization.
    pub fn symbolic_count(&self) -> usize {
        self.n_symbolic
    }

    /// Number of stored entries of the factor L (0 before the first factorization).
    pub fn factor_nnz(&self) -> usize {
        self.l_values.len()
    }

    /// Estimated multiply-adds of one numeric factorization, `Σ_j c_j (c_j + 1) / 2` over the
    /// columns of `L` with `c_j` entries each (0 before the first factorization).
    pub fn factor_flops(&self) -> f64 {
        self.symbolic.as_ref().map_or(0.0, |a| factor_flops(&a.symbolic))
    }

    /// The symbolic analysis of `a`'s pattern with `ordering` (`Auto` means AMD), done now and
    /// kept for the factorizations to come (an analysis of the same pattern and ordering is
    /// reused); returns the multiply-adds of one numeric factorization and the entries of L.
    /// Under [`CholeskyOrdering::Auto`] an AMD analysis may still switch to nested dissection
    /// at the second factorization, as in [`LinearSolver::factor`].
    pub fn analyse(
        &mut self,
        a: &CsrMatrix,
        ordering: CholeskyOrdering,
    ) -> Result<(f64, usize), SolverError> {
        check_square(a);
        self.factored = false;
        self.n = a.n_rows;
        if self.n == 0 {
            return Ok((0.0, 0));
        }
        let used = match ordering {
            CholeskyOrdering::Auto => CholeskyOrdering::Amd,
            concrete => concrete,
        };
        let key = PatternKey::of(a);
        if let Some(an) = &self.symbolic
            && an.key == key
            && an.used == used
        {
            return Ok((factor_flops(&an.symbolic), an.symbolic.len_val()));
        }
        self.symbolic = None;
        let cols = wide_cols(a);
        let symbolic = self.analyse_with(a, transpose_view(a, &cols), used)?;
        let flops = factor_flops(&symbolic);
        let nnz = symbolic.len_val();
        let nd_pending = self.ordering == CholeskyOrdering::Auto
            && used == CholeskyOrdering::Amd
            && flops >= AUTO_MIN_FLOPS;
        self.install(key, symbolic, used, nd_pending);
        Ok((flops, nnz))
    }

    /// Symbolic analysis of `at` (the column view of `a`) with one concrete ordering.
    fn analyse_with(
        &self,
        a: &CsrMatrix,
        at: SparseColMatRef<'_, usize, f64>,
        ordering: CholeskyOrdering,
    ) -> Result<SymbolicCholesky<usize>, SolverError> {
        let t = std::time::Instant::now();
        let failed = |what: String| SolverError::Other {
            field: self.field.clone(),
            message: format!("symbolic Cholesky analysis failed: {what}"),
        };
        let symbolic = if ordering == CholeskyOrdering::NestedDissection {
            let perm = nested_dissection(a).map_err(|e| failed(e.to_string()))?;
            let perm = PermRef::new_checked(&perm.forward, &perm.inverse, self.n);
            factorize_symbolic_cholesky(
                at.symbolic(),
                Side::Lower,
                SymmetricOrdering::Custom(perm),
                Default::default(),
            )
        } else {
            factorize_symbolic_cholesky(
                at.symbolic(),
                Side::Lower,
                SymmetricOrdering::Amd,
                Default::default(),
            )
        }
        .map_err(|e| failed(format!("{e:?}")))?;
        tracing::debug!(
            field = %self.field,
            ordering = ?ordering,
            n = self.n,
            nnz_a = a.nnz(),
            nnz_l = symbolic.len_val(),
            flops = factor_flops(&symbolic),
            seconds = t.elapsed().as_secs_f64(),
            "symbolic Cholesky"
        );
        Ok(symbolic)
    }

    /// Make `symbolic` the analysis of the pattern `key` and size the buffers for it.
    fn install(
        &mut self,
        key: PatternKey,
        symbolic: SymbolicCholesky<usize>,
        used: CholeskyOrdering,
        nd_pending: bool,
    ) {
        self.factor_stack = MemBuffer::new(
            symbolic.factorize_numeric_llt_scratch::<f64>(self.par_factor, Default::default()),
        );
        self.solve_stack = MemBuffer::new(symbolic.solve_in_place_scratch::<f64>(1, Par::Seq));
        self.l_values = vec![0.0; symbolic.len_val()];
        self.n_symbolic += 1;
        self.symbolic = Some(Analysis { key, symbolic, used, nd_pending, factored: false });
    }

    /// Under [`CholeskyOrdering::Auto`], at the second factorization of a pattern whose AMD
    /// factorization is large: analyse with nested dissection and switch to it if it needs at
    /// most [`AUTO_FLOP_RATIO`] of AMD's multiply-adds. A failed nested dissection keeps AMD
    /// (logged as a warning), since AMD already works for this pattern.
    fn try_nested_dissection(&mut self, a: &CsrMatrix, at: SparseColMatRef<'_, usize, f64>) {
        let Some(analysis) = self.symbolic.as_mut() else { return };
        analysis.nd_pending = false;
        let key = analysis.key;
        let amd_flops = factor_flops(&analysis.symbolic);
        let amd_nnz = analysis.symbolic.len_val();
        match self.analyse_with(a, at, CholeskyOrdering::NestedDissection) {
            Ok(nd) => {
                let nd_flops = factor_flops(&nd);
                let switch = nd_flops <= AUTO_FLOP_RATIO * amd_flops;
                tracing::debug!(
                    field = %self.field,
                    nnz_l_amd = amd_nnz,
                    nnz_l_nd = nd.len_val(),
                    flops_amd = amd_flops,
                    flops_nd = nd_flops,
                    switch,
                    "Cholesky ordering: AMD or nested dissection"
                );
                if switch {
                    self.install(key, nd, CholeskyOrdering::NestedDissection, false);
                }
            }
            Err(e) => tracing::warn!(field = %self.field, error = %e, "keeping the AMD ordering"),
        }
    }

    fn solve(&mut self, b: &mut [f64]) -> Result<(), SolverError> {
        assert!(self.factored, "{}: solve called before a successful factor", self.field);
        check_rhs(&self.field, self.n, b)?;
        if self.n == 0 {
            return Ok(());
        }
        let symbolic = &self.symbolic.as_ref().expect("factored implies symbolic").symbolic;
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
        let cols = wide_cols(a);
        let at = transpose_view(a, &cols);
        if self.symbolic.as_ref().is_none_or(|an| an.key != key) {
            // A failed analysis must not leave the previous pattern's analysis in place.
            self.symbolic = None;
            let used = match self.ordering {
                CholeskyOrdering::Auto => CholeskyOrdering::Amd,
                concrete => concrete,
            };
            let symbolic = self.analyse_with(a, at, used)?;
            let nd_pending = self.ordering == CholeskyOrdering::Auto
                && factor_flops(&symbolic) >= AUTO_MIN_FLOPS;
            self.install(key, symbolic, used, nd_pending);
        } else if self.symbolic.as_ref().is_some_and(|an| an.nd_pending && an.factored) {
            self.try_nested_dissection(a, at);
        }
        let symbolic = &self.symbolic.as_ref().unwrap().symbolic;
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
        if let Some(analysis) = self.symbolic.as_mut() {
            analysis.factored = true;
        }
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
        let cols = wide_cols(a);
        let at = transpose_view(a, &cols);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_matrices::{ELASTIC, csr, grid_system};
    use rstest::rstest;

    fn relative_residual_of_solve(solver: &mut CholeskySolver, a: &CsrMatrix) -> f64 {
        let b: Vec<f64> = (0..a.n_rows).map(|i| ((i * 7919) % 101) as f64 / 50.0 - 1.0).collect();
        let mut x = b.clone();
        solver.factor(a).unwrap();
        solver.solve_in_place(&mut x).unwrap();
        residual_norm(a, &x, &b) / b.iter().map(|v| v * v).sum::<f64>().sqrt()
    }

    #[rstest]
    #[case::laplacian_amd(1, 9, CholeskyOrdering::Amd)]
    #[case::laplacian_nd(1, 9, CholeskyOrdering::NestedDissection)]
    #[case::laplacian_auto(1, 13, CholeskyOrdering::Auto)]
    #[case::elastic_amd(3, 7, CholeskyOrdering::Amd)]
    #[case::elastic_nd(3, 7, CholeskyOrdering::NestedDissection)]
    #[case::elastic_auto(3, 10, CholeskyOrdering::Auto)]
    fn ordered_cholesky_solves_grid_systems(
        #[case] b: usize,
        #[case] m: usize,
        #[case] ordering: CholeskyOrdering,
    ) {
        let block = if b == 1 { &[&[1.0][..]][..] } else { &ELASTIC[..] };
        let a = grid_system(m, block, 0.01);
        let mut solver = CholeskySolver::new("test").with_ordering(ordering);
        // Twice: `Auto` may switch orderings at the second factorization.
        for round in 0..2 {
            let r = relative_residual_of_solve(&mut solver, &a);
            assert!(r < 1e-12, "relative residual {r:e} with {ordering:?} in round {round}");
        }
        let used = solver.ordering_used().unwrap();
        if ordering != CholeskyOrdering::Auto {
            assert_eq!(used, ordering);
        }
    }

    #[rstest]
    #[case::small_laplacian(1, 8)]
    #[case::large_laplacian(1, 20)]
    #[case::small_elastic(3, 5)]
    #[case::large_elastic(3, 10)]
    fn auto_follows_the_multiply_add_rule(#[case] b: usize, #[case] m: usize) {
        let block = if b == 1 { &[&[1.0][..]][..] } else { &ELASTIC[..] };
        let a = grid_system(m, block, 0.01);
        let analysed = |ordering| {
            let mut solver = CholeskySolver::new("test").with_ordering(ordering);
            solver.factor(&a).unwrap();
            (solver.factor_flops(), solver.factor_nnz())
        };
        let (amd, nd) =
            (analysed(CholeskyOrdering::Amd), analysed(CholeskyOrdering::NestedDissection));
        let expected = if amd.0 >= AUTO_MIN_FLOPS && nd.0 <= AUTO_FLOP_RATIO * amd.0 {
            CholeskyOrdering::NestedDissection
        } else {
            CholeskyOrdering::Amd
        };
        // AMD first; the second factorization of the pattern may switch, later ones keep it.
        let mut auto = CholeskySolver::new("test");
        auto.factor(&a).unwrap();
        assert_eq!(auto.ordering_used(), Some(CholeskyOrdering::Amd));
        assert_eq!((auto.factor_flops(), auto.factor_nnz()), amd);
        for _ in 0..2 {
            auto.factor(&a).unwrap();
            assert_eq!(
                auto.ordering_used(),
                Some(expected),
                "flops AMD {:e}, ND {:e}",
                amd.0,
                nd.0
            );
        }
        let chosen = if expected == CholeskyOrdering::Amd { amd } else { nd };
        assert_eq!((auto.factor_flops(), auto.factor_nnz()), chosen);
        let analyses = if expected == CholeskyOrdering::Amd { 1 } else { 2 };
        assert_eq!(auto.symbolic_count(), analyses);
        // The small systems stay with AMD, the 20³ Laplacian goes to nested dissection.
        match (b, m) {
            (1, 8) | (3, 5) => assert_eq!(expected, CholeskyOrdering::Amd),
            (1, 20) => assert_eq!(expected, CholeskyOrdering::NestedDissection),
            _ => {}
        }
    }

    #[test]
    fn factor_flops_counts_a_dense_factor() {
        // A dense SPD n × n matrix: column j of L has n − j entries, Σ c(c+1)/2 = n(n+1)(n+2)/6.
        let n = 12;
        let rows = (0..n)
            .map(|i| (0..n).map(|j| (j, if i == j { n as f64 + 1.0 } else { 1.0 })).collect())
            .collect();
        let mut solver = CholeskySolver::new("test").with_ordering(CholeskyOrdering::Amd);
        solver.factor(&csr(rows)).unwrap();
        assert_eq!(solver.factor_flops(), (n * (n + 1) * (n + 2) / 6) as f64);
    }

    #[test]
    fn nested_dissection_fills_less_than_amd_on_a_3d_grid() {
        let a = grid_system(20, &[&[1.0]], 0.01);
        let nnz = |ordering| {
            let mut solver = CholeskySolver::new("test").with_ordering(ordering);
            solver.factor(&a).unwrap();
            solver.factor_nnz()
        };
        let (amd, nd) = (nnz(CholeskyOrdering::Amd), nnz(CholeskyOrdering::NestedDissection));
        assert!((nd as f64) < 0.9 * amd as f64, "nnz(L): nested dissection {nd}, AMD {amd}");
        let mut auto = CholeskySolver::new("test");
        auto.factor(&a).unwrap();
        auto.factor(&a).unwrap();
        assert_eq!(auto.ordering_used(), Some(CholeskyOrdering::NestedDissection));
        assert_eq!(auto.factor_nnz(), nd);
        // An analysis ahead of the first factorization (a router pricing the routes) is not a
        // factorization: nested dissection still waits for the second one.
        let mut priced = CholeskySolver::new("test");
        priced.analyse(&a, CholeskyOrdering::Amd).unwrap();
        priced.factor(&a).unwrap();
        assert_eq!(priced.ordering_used(), Some(CholeskyOrdering::Amd));
        priced.factor(&a).unwrap();
        assert_eq!(priced.ordering_used(), Some(CholeskyOrdering::NestedDissection));
    }

    #[test]
    fn symbolic_analysis_is_reused_across_refactorizations() {
        // Same pattern, other values (a larger shift): one analysis serves both factorizations.
        let mut solver =
            CholeskySolver::new("test").with_ordering(CholeskyOrdering::NestedDissection);
        let first = relative_residual_of_solve(&mut solver, &grid_system(10, &ELASTIC, 0.01));
        let used = solver.ordering_used();
        assert_eq!(used, Some(CholeskyOrdering::NestedDissection));
        let second = relative_residual_of_solve(&mut solver, &grid_system(10, &ELASTIC, 0.5));
        assert!(first < 1e-12 && second < 1e-12, "{first:e}, {second:e}");
        assert_eq!(solver.symbolic_count(), 1);
        assert_eq!(solver.ordering_used(), used);
        // A new pattern triggers a new analysis.
        let third = relative_residual_of_solve(&mut solver, &grid_system(9, &ELASTIC, 0.01));
        assert!(third < 1e-12, "{third:e}");
        assert_eq!(solver.symbolic_count(), 2);
    }

    #[rstest]
    #[case::amd(CholeskyOrdering::Amd)]
    #[case::nd(CholeskyOrdering::NestedDissection)]
    fn empty_and_single_unknown_systems(#[case] ordering: CholeskyOrdering) {
        let mut solver = CholeskySolver::new("test").with_ordering(ordering);
        solver.factor(&csr(vec![])).unwrap();
        solver.solve_in_place(&mut []).unwrap();
        assert_eq!(solver.ordering_used(), None);
        let mut solver = CholeskySolver::new("test").with_ordering(ordering);
        solver.factor(&csr(vec![vec![(0, 4.0)]])).unwrap();
        let mut x = [2.0];
        solver.solve_in_place(&mut x).unwrap();
        assert_eq!(x, [0.5]);
    }

    #[test]
    fn nested_dissection_solves_a_disconnected_system() {
        // Two decoupled 3D Laplacians and an isolated unknown.
        let g = grid_system(6, &[&[1.0]], 0.01);
        let m = g.n_rows;
        let row = |i: usize| -> Vec<(usize, f64)> {
            (g.row_ptr[i]..g.row_ptr[i + 1]).map(|k| (g.col_idx[k] as usize, g.values[k])).collect()
        };
        let mut rows: Vec<_> = (0..m).map(row).collect();
        rows.push(vec![(m, 3.0)]);
        rows.extend(
            (0..m).map(|i| row(i).into_iter().map(|(j, v)| (j + m + 1, 2.0 * v)).collect()),
        );
        let a = csr(rows);
        let mut solver =
            CholeskySolver::new("test").with_ordering(CholeskyOrdering::NestedDissection);
        let r = relative_residual_of_solve(&mut solver, &a);
        assert!(r < 1e-12, "relative residual {r:e}");
    }

    #[test]
    fn indefinite_matrix_names_the_original_unknown_under_nested_dissection() {
        let mut a = grid_system(6, &[&[1.0]], 0.01);
        let k = a.row_ptr[100]
            + a.col_idx[a.row_ptr[100]..a.row_ptr[101]].partition_point(|&j| j < 100);
        a.values[k] = -50.0;
        let mut solver =
            CholeskySolver::new("test").with_ordering(CholeskyOrdering::NestedDissection);
        match solver.factor(&a) {
            // Every pivot eliminated before unknown 100 belongs to a positive definite
            // principal submatrix, so the first bad pivot is unknown 100's, wherever ND put it.
            Err(SolverError::NotPositiveDefinite { detail, .. }) => {
                assert!(detail.contains("(unknown 100)"), "{detail}");
            }
            other => panic!("expected NotPositiveDefinite, got {other:?}"),
        }
    }
}
