//! Smoothed-aggregation algebraic multigrid (Vaněk, Mandel, Brezina 1996) as a preconditioner
//! for conjugate gradients, for symmetric positive definite systems too large to factor (3D
//! Poisson, heat, elasticity with 10⁵–10⁷ unknowns).
//!
//! Written by hand because no maintained pure-Rust AMG crate exists (the few on crates.io are
//! unmaintained experiments without smoothed aggregation or parallel kernels), and binding
//! hypre/ML/AMGX would add a C/C++ toolchain dependency the project avoids.
//!
//! # Setup, level by level (A₀ = A)
//!
//! 1. **Strength of connection** between nodes I ≠ J (a node is `block_size` consecutive
//!    unknowns): I–J is strong when s_IJ > θ √(s_II s_JJ), s_IJ = ‖A_IJ‖_F (|a_ij| for scalars).
//! 2. **Aggregation** (three phases): (1) every node whose strong neighbours are all free
//!    starts an aggregate with them; (2) left-over nodes join the neighbouring phase-1 aggregate
//!    they are most strongly tied to; (3) what remains forms aggregates with its free neighbours.
//!    A last pass puts nodes without strong neighbours into the aggregate of their most strongly
//!    coupled neighbour; only nodes with no off-diagonal coupling at all (e.g. identity rows)
//!    stay outside the coarse space, where the smoother alone handles them.
//! 3. **Tentative prolongator** from the near-nullspace. Without one given: the constant per
//!    component (translations), P_tent(I·b + c, K·b + c) = 1/√|K| for node I in aggregate K, and
//!    the constant again on the coarse levels. With a [`NearNullspace`] B of k vectors (the six
//!    rigid-body modes of elasticity, [`NearNullspace::rigid_body_modes`]): the rows of B on each
//!    aggregate are factored B_K = Q_K R_K (modified Gram–Schmidt, twice; columns that depend on
//!    those before are dropped, so an aggregate of one or two nodes carries only what it can),
//!    P_tent holds Q_K, and R_K is the near-nullspace of the coarse node K, which has as many
//!    unknowns as kept columns. Aggregation then works on the nodes of B (its `node_ptr`) on
//!    every level, with the Frobenius norms of the node blocks as strengths.
//! 4. **Smoothed prolongator** P = (I − ω D⁻¹ A) P_tent with ω = 4 / (3 ρ(D⁻¹ A)), ρ estimated
//!    by Lanczos. The unfiltered A is used (as PyAMG does by default): on the test problems,
//!    filtering weak entries into the diagonal gave no fewer iterations.
//! 5. **Galerkin coarse operator** A_c = Pᵀ A P by two parallel sparse products (A P, then Pᵀ (A P)).
//! 6. Stop when the level has at most `coarse_size` unknowns (or `max_levels` is reached, or
//!    aggregation stalls); the coarsest level is solved by a dense Cholesky factorization (`dense::DenseCholesky`).
//!
//! With translations only, CG on 3D elasticity needs 34–49 iterations on the unit cube (N = 8 to
//! 32) and 55–121 on an 8:1 cantilever as it is refined; with the rigid-body modes 19–23 and
//! 18–30 (`tests/amg_elasticity.rs`). On the peers' `elastic3d` at N = 31 (95 232 unknowns)
//! symmetric Gauss–Seidel needed 26 iterations, Chebyshev of degree 2 (the default) 23 and of
//! degree 3 21 at 1.5× the work per cycle; a strength threshold θ of 0 gave 27, 0.05 22 at a
//! higher set-up cost, 0.1 coarsened too slowly (operator complexity 13).
//!
//! # Cycle
//!
//! One symmetric V-cycle per preconditioner application, from a zero initial guess:
//! pre-smoothing, restriction of the residual by Pᵀ, recursive coarse correction, prolongation by
//! P, post-smoothing. The smoothers keep the cycle symmetric positive definite, as CG needs:
//! Chebyshev (a polynomial in D⁻¹A, the same before and after) or symmetric Gauss–Seidel
//! (forward sweeps before, backward after). Chebyshev parallelizes (each step is one fused pass
//! r ← r − A d, d ← a d + c D⁻¹ r, x ← x + d); Gauss–Seidel is sequential.
//!
//! Level 0 keeps its own compact copy of A (32-bit column indices) without the entries that are
//! numerically zero, |a_ij| ≤ 1e-12 √(|a_ii a_jj|) (P1 stiffness matrices of right-angled
//! tetrahedra hold many such entries). The preconditioner is thereby changed by a relative 1e-12,
//! which is irrelevant to CG; CG itself multiplies by the exact A.

// Index loops over several arrays at once read closer to the formulas than zipped iterators.
#![allow(clippy::needless_range_loop)]

use std::sync::{Arc, Mutex};

use gradfem_kernel::split_runs;
use rayon::prelude::*;

use crate::cg::{
    CHUNK, CgHooks, CgInfo, CgParams, CgStop, ConjugateDirections, PAR_MIN, Preconditioner,
    pcg_with,
};
use crate::error::SolverError;
use crate::linear::LinearSolver;
use crate::sparse::CsrMatrix;

/// Entries with |a_ij| ≤ `DROP_TOL` √(|a_ii a_jj|) are dropped from the AMG's copies of A.
const DROP_TOL: f64 = 1e-12;
/// Lanczos steps for the spectral radius estimates.
const LANCZOS_STEPS: usize = 10;
/// Largest coarsest level that is factored densely; above it, the coarsest level is smoothed.
const MAX_DENSE: usize = 3000;
/// Rows per task in the parallel sparse products.
const PRODUCT_ROWS: usize = 4096;
/// Node marker: in no aggregate.
const NONE: u32 = u32::MAX;

/// The smoother of every level but the coarsest.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Smoother {
    /// Chebyshev polynomial of the given degree in D⁻¹A, targeting the eigenvalue interval
    /// [λ/`ratio`, λ] with λ = 1.1 · (Lanczos estimate of ρ(D⁻¹A)). Parallel.
    Chebyshev {
        /// Polynomial degree (matrix-vector products per sweep), typically 2–3.
        degree: usize,
        /// Ratio λ_max / λ_min of the damped interval, typically 20–30.
        ratio: f64,
    },
    /// Gauss–Seidel: forward sweeps before the coarse correction, backward sweeps after
    /// (so the V-cycle stays symmetric). Sequential.
    SymmetricGaussSeidel,
}

/// Parameters of [`AmgHierarchy`].
#[derive(Clone, Debug, PartialEq)]
pub struct AmgParams {
    /// θ of the strength test s_IJ > θ √(s_II s_JJ) (default 0.02). Measured on 3D Poisson
    /// (N = 79): θ = 0 gives too aggressive coarsening of the wide coarse stencils (17 CG
    /// iterations), 0.02 gives 14, 0.05 gives 15 with a higher operator complexity, 0.1 slows
    /// coarsening of the second level to a crawl (operator complexity ~6).
    pub strength_threshold: f64,
    /// Most levels, including the finest and the coarsest (default 10).
    pub max_levels: usize,
    /// Stop coarsening at or below this many unknowns (default 400).
    pub coarse_size: usize,
    /// Smoother (default Chebyshev of degree 2, ratio 6: on 3D Poisson, degree 2 with ratio 6
    /// needed 13 iterations at N = 46 against 20 with the often-quoted ratio 30, and degree 3
    /// or 4 saved an iteration or two for 50–100 % more work per cycle).
    pub smoother: Smoother,
    /// Smoother sweeps before the coarse correction (default 1).
    pub pre_sweeps: usize,
    /// Smoother sweeps after the coarse correction (default 1). With Chebyshev it must equal
    /// `pre_sweeps`, or the V-cycle is not symmetric.
    pub post_sweeps: usize,
    /// Unknowns per node (1 for scalar fields, 3 for 3D elasticity with interleaved x, y, z):
    /// aggregation works on nodes, and the near-nullspace is the constant in each component.
    pub block_size: usize,
}

impl Default for AmgParams {
    fn default() -> Self {
        AmgParams {
            strength_threshold: 0.02,
            max_levels: 10,
            coarse_size: 400,
            smoother: Smoother::Chebyshev { degree: 2, ratio: 6.0 },
            pre_sweeps: 1,
            post_sweeps: 1,
            block_size: 1,
        }
    }
}

impl AmgParams {
    fn validate(&self) -> Result<(), SolverError> {
        let bad = |name, value: String, reason| {
            Err(SolverError::InvalidParameter { name, value, reason })
        };
        if !(self.strength_threshold >= 0.0 && self.strength_threshold < 1.0) {
            return bad(
                "AmgParams::strength_threshold",
                self.strength_threshold.to_string(),
                "must lie in [0, 1)",
            );
        }
        if self.max_levels == 0 {
            return bad("AmgParams::max_levels", "0".into(), "must be at least 1");
        }
        if self.block_size == 0 {
            return bad("AmgParams::block_size", "0".into(), "must be at least 1");
        }
        if self.pre_sweeps == 0 || self.post_sweeps == 0 {
            return bad(
                "AmgParams::pre_sweeps/post_sweeps",
                format!("{}/{}", self.pre_sweeps, self.post_sweeps),
                "must be at least 1",
            );
        }
        if let Smoother::Chebyshev { degree, ratio } = self.smoother {
            if degree == 0 || ratio.is_nan() || ratio <= 1.0 {
                return bad(
                    "AmgParams::smoother",
                    format!("{:?}", self.smoother),
                    "Chebyshev needs degree ≥ 1 and ratio > 1",
                );
            }
            if self.pre_sweeps != self.post_sweeps {
                return bad(
                    "AmgParams::post_sweeps",
                    self.post_sweeps.to_string(),
                    "must equal pre_sweeps with a Chebyshev smoother (symmetric V-cycle for CG)",
                );
            }
        }
        Ok(())
    }
}

/// Vectors that the operator nearly annihilates (for elasticity the six rigid-body modes),
/// which the coarse spaces must represent, and the nodes whose unknowns aggregation keeps
/// together.
///
/// `k` vectors over `n` unknowns, stored row by row (`values[i·k + j]` is entry i of vector j);
/// node `I` holds the consecutive unknowns `node_ptr[I]..node_ptr[I + 1]`.
#[derive(Clone, Debug, PartialEq)]
pub struct NearNullspace {
    dim: usize,
    node_ptr: Vec<usize>,
    values: Vec<f64>,
}

impl NearNullspace {
    /// `k` vectors given row by row over the unknowns grouped into nodes by `node_ptr`.
    ///
    /// Errors (`InvalidParameter`): `k` = 0, `node_ptr` not starting at 0 or not increasing,
    /// `values` not `k` times the number of unknowns, or a non-finite entry.
    pub fn new(k: usize, node_ptr: Vec<usize>, values: Vec<f64>) -> Result<Self, SolverError> {
        let bad = |name, value: String, reason| {
            Err(SolverError::InvalidParameter { name, value, reason })
        };
        if k == 0 {
            return bad("NearNullspace::k", "0".into(), "needs at least one vector");
        }
        if node_ptr.first() != Some(&0) || node_ptr.windows(2).any(|w| w[1] <= w[0]) {
            return bad(
                "NearNullspace::node_ptr",
                format!("{} entries", node_ptr.len()),
                "must start at 0 and increase strictly (every node holds an unknown)",
            );
        }
        let n = *node_ptr.last().unwrap();
        if values.len() != n * k {
            return bad(
                "NearNullspace::values",
                format!("{} entries", values.len()),
                "must hold k entries per unknown",
            );
        }
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return bad(
                "NearNullspace::values",
                format!("{} at unknown {}", values[i], i / k),
                "must be finite",
            );
        }
        Ok(NearNullspace { dim: k, node_ptr, values })
    }

    /// The six rigid-body modes of 3D elasticity (three translations, three rotations about
    /// the centroid of the nodes involved, scaled by their largest distance from it) on the
    /// unknowns `unknowns[i] = (node, component)`: the displacement component `component ∈
    /// {0, 1, 2}` of the node at `coords[node]`. Unknowns of one node must be consecutive and in
    /// increasing component order; nodes with every component constrained simply have no
    /// unknowns.
    ///
    /// Errors (`InvalidParameter`): no unknowns, a node outside `coords`, a component above 2,
    /// unknowns out of order, or non-finite coordinates.
    pub fn rigid_body_modes(
        coords: &[[f64; 3]],
        unknowns: &[(usize, usize)],
    ) -> Result<Self, SolverError> {
        let bad = |value: String, reason| {
            Err(SolverError::InvalidParameter {
                name: "NearNullspace::rigid_body_modes",
                value,
                reason,
            })
        };
        if unknowns.is_empty() {
            return bad("no unknowns".into(), "needs at least one unknown");
        }
        let mut node_ptr = vec![0usize];
        for (i, &(node, c)) in unknowns.iter().enumerate() {
            if node >= coords.len() || c > 2 {
                return bad(
                    format!("unknown {i} = (node {node}, component {c})"),
                    "node must exist and component lie in 0..3",
                );
            }
            if i > 0 {
                let (prev, pc) = unknowns[i - 1];
                if node < prev || (node == prev && c <= pc) {
                    return bad(
                        format!("unknown {i} = (node {node}, component {c})"),
                        "unknowns must be ordered by node, then component",
                    );
                }
                if node != prev {
                    node_ptr.push(i);
                }
            }
        }
        node_ptr.push(unknowns.len());
        let nodes: Vec<usize> =
            node_ptr[..node_ptr.len() - 1].iter().map(|&i| unknowns[i].0).collect();
        let mut centre = [0.0; 3];
        for &n in &nodes {
            for d in 0..3 {
                centre[d] += coords[n][d] / nodes.len() as f64;
            }
        }
        let mut radius: f64 = 0.0;
        for &n in &nodes {
            let r2: f64 = (0..3).map(|d| (coords[n][d] - centre[d]).powi(2)).sum();
            radius = radius.max(r2.sqrt());
        }
        if !(radius.is_finite() && centre.iter().all(|c| c.is_finite())) {
            return bad("coordinates".into(), "must be finite");
        }
        let scale = if radius > 0.0 { 1.0 / radius } else { 1.0 };
        let mut values = vec![0.0; 6 * unknowns.len()];
        for (i, &(node, c)) in unknowns.iter().enumerate() {
            let x = [0, 1, 2].map(|d| (coords[node][d] - centre[d]) * scale);
            let row = &mut values[6 * i..6 * i + 6];
            row[c] = 1.0;
            // rotations about x, y, z: (0, −z, y), (z, 0, −x), (−y, x, 0)
            match c {
                0 => {
                    row[4] = x[2];
                    row[5] = -x[1];
                }
                1 => {
                    row[3] = -x[2];
                    row[5] = x[0];
                }
                _ => {
                    row[3] = x[1];
                    row[4] = -x[0];
                }
            }
        }
        NearNullspace::new(6, node_ptr, values)
    }

    /// The number of vectors.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The number of unknowns.
    pub fn n_unknowns(&self) -> usize {
        *self.node_ptr.last().unwrap_or(&0)
    }

    /// The number of nodes.
    pub fn n_nodes(&self) -> usize {
        self.node_ptr.len() - 1
    }

    fn check_size(&self, n: usize) -> Result<(), SolverError> {
        if self.n_unknowns() == n {
            return Ok(());
        }
        Err(SolverError::InvalidParameter {
            name: "NearNullspace",
            value: format!("{} unknowns", self.n_unknowns()),
            reason: "must have as many unknowns as the matrix has rows",
        })
    }
}

/// A first coarse level the caller knows: the interpolation P₀ from a coarser discretization
/// of the same field onto its unknowns, and that space's near-nullspace. For quadratic cells,
/// the field on the vertices interpolated to the mid-edge (face, centre) nodes: p-multigrid,
/// whose coarse operator P₀ᵀAP₀ is the linear cells' and is then coarsened by aggregation.
#[derive(Clone, Debug)]
pub struct CoarseSpace {
    p: Csr32,
    near_nullspace: NearNullspace,
}

impl CoarseSpace {
    /// P₀ (rows: the fine unknowns, columns: the coarse ones) and the coarse near-nullspace.
    ///
    /// Errors (`InvalidParameter`): the near-nullspace has another number of unknowns than
    /// P₀ has columns, P₀ has no fewer columns than rows, or a non-finite entry.
    pub fn new(p: &CsrMatrix, near_nullspace: NearNullspace) -> Result<Self, SolverError> {
        let bad = |value: String, reason| {
            Err(SolverError::InvalidParameter { name: "CoarseSpace", value, reason })
        };
        if near_nullspace.n_unknowns() != p.n_cols {
            return bad(
                format!("{} columns, near-nullspace of {}", p.n_cols, near_nullspace.n_unknowns()),
                "the near-nullspace must live on the coarse unknowns",
            );
        }
        if p.n_cols >= p.n_rows {
            return bad(format!("{}×{}", p.n_rows, p.n_cols), "must have fewer columns than rows");
        }
        if p.values.iter().any(|v| !v.is_finite()) {
            return bad("a non-finite entry".into(), "entries must be finite");
        }
        Ok(CoarseSpace { p: Csr32::from_csr(p, false), near_nullspace })
    }

    /// Fine unknowns (rows of P₀).
    pub fn n_fine(&self) -> usize {
        self.p.n_rows
    }

    /// Coarse unknowns (columns of P₀).
    pub fn n_coarse(&self) -> usize {
        self.p.n_cols
    }
}

/// A sparse matrix with 32-bit column indices (the AMG's own storage: a third less memory
/// traffic per product than `CsrMatrix`).
#[derive(Clone, Debug, Default)]
struct Csr32 {
    n_rows: usize,
    n_cols: usize,
    row_ptr: Vec<usize>,
    col: Vec<u32>,
    val: Vec<f64>,
}

impl Csr32 {
    fn nnz(&self) -> usize {
        self.col.len()
    }

    /// Copy of `a`; with `drop` set, entries |a_ij| ≤ DROP_TOL √(|a_ii a_jj|) (i ≠ j) are left out.
    fn from_csr(a: &CsrMatrix, drop: bool) -> Self {
        assert!(a.n_cols < u32::MAX as usize, "{} columns do not fit 32-bit indices", a.n_cols);
        if !drop {
            return Csr32 {
                n_rows: a.n_rows,
                n_cols: a.n_cols,
                row_ptr: a.row_ptr.clone(),
                col: a.col_idx.clone(),
                val: a.values.clone(),
            };
        }
        let diag = a.diagonal();
        let n_chunks = a.n_rows.div_ceil(PRODUCT_ROWS);
        let parts: Vec<(Vec<usize>, Vec<u32>, Vec<f64>)> = (0..n_chunks)
            .into_par_iter()
            .map(|c| {
                let rows = c * PRODUCT_ROWS..((c + 1) * PRODUCT_ROWS).min(a.n_rows);
                let (mut lens, mut col, mut val) = (Vec::new(), Vec::new(), Vec::new());
                for i in rows {
                    let (cols, vals) = a.row(i);
                    let before = col.len();
                    for (&j, &v) in cols.iter().zip(vals) {
                        if j as usize == i
                            || v.abs() > DROP_TOL * (diag[i] * diag[j as usize]).abs().sqrt()
                        {
                            col.push(j);
                            val.push(v);
                        }
                    }
                    lens.push(col.len() - before);
                }
                (lens, col, val)
            })
            .collect();
        let (row_ptr, col, val) = concat_rows(a.n_rows, parts);
        Csr32 { n_rows: a.n_rows, n_cols: a.n_cols, row_ptr, col, val }
    }

    /// The entries of `a` that [`Self::from_csr`] with `drop` leaves out (i ≠ j with
    /// |a_ij| ≤ DROP_TOL √(|a_ii a_jj|)): with that copy it sums to `a`.
    fn dropped_of(a: &CsrMatrix) -> Self {
        assert!(a.n_cols < u32::MAX as usize, "{} columns do not fit 32-bit indices", a.n_cols);
        let diag = a.diagonal();
        let n_chunks = a.n_rows.div_ceil(PRODUCT_ROWS);
        let parts: Vec<(Vec<usize>, Vec<u32>, Vec<f64>)> = (0..n_chunks)
            .into_par_iter()
            .map(|c| {
                let rows = c * PRODUCT_ROWS..((c + 1) * PRODUCT_ROWS).min(a.n_rows);
                let (mut lens, mut col, mut val) = (Vec::new(), Vec::new(), Vec::new());
                for i in rows {
                    let (cols, vals) = a.row(i);
                    let before = col.len();
                    for (&j, &v) in cols.iter().zip(vals) {
                        if j as usize != i
                            && v.abs() <= DROP_TOL * (diag[i] * diag[j as usize]).abs().sqrt()
                        {
                            col.push(j);
                            val.push(v);
                        }
                    }
                    lens.push(col.len() - before);
                }
                (lens, col, val)
            })
            .collect();
        let (row_ptr, col, val) = concat_rows(a.n_rows, parts);
        Csr32 { n_rows: a.n_rows, n_cols: a.n_cols, row_ptr, col, val }
    }

    /// `a` split without a copy: what [`Self::from_csr`] with `drop` keeps, compacted in
    /// `a`'s own arrays, and what [`Self::dropped_of`] gives (numerically zero entries, few).
    fn split_owned(a: CsrMatrix) -> (Self, Self) {
        assert!(a.n_cols < u32::MAX as usize, "{} columns do not fit 32-bit indices", a.n_cols);
        let diag = a.diagonal();
        let CsrMatrix { n_rows, n_cols, mut row_ptr, col_idx: mut col, values: mut val } = a;
        let keep = |i: usize, j: u32, v: f64| {
            j as usize == i || v.abs() > DROP_TOL * (diag[i] * diag[j as usize]).abs().sqrt()
        };
        // Counted first: the dropped entries are up to half of a P1 Kuhn-mesh Laplacian, and a
        // growing vector would hold up to twice that.
        let n_rest: usize = (0..n_rows)
            .into_par_iter()
            .map(|i| (row_ptr[i]..row_ptr[i + 1]).filter(|&k| !keep(i, col[k], val[k])).count())
            .sum();
        let mut rest = Csr32 {
            n_rows,
            n_cols,
            row_ptr: Vec::with_capacity(n_rows + 1),
            col: Vec::with_capacity(n_rest),
            val: Vec::with_capacity(n_rest),
        };
        rest.row_ptr.push(0);
        let mut kept = 0;
        for i in 0..n_rows {
            let (start, end) = (row_ptr[i], row_ptr[i + 1]);
            row_ptr[i] = kept;
            for k in start..end {
                let (j, v) = (col[k], val[k]);
                if keep(i, j, v) {
                    col[kept] = j;
                    val[kept] = v;
                    kept += 1;
                } else {
                    rest.col.push(j);
                    rest.val.push(v);
                }
            }
            rest.row_ptr.push(rest.col.len());
        }
        row_ptr[n_rows] = kept;
        col.truncate(kept);
        val.truncate(kept);
        col.shrink_to_fit();
        val.shrink_to_fit();
        (Csr32 { n_rows, n_cols, row_ptr, col, val }, rest)
    }

    /// `self + other` for two matrices with disjoint patterns, as a `CsrMatrix`.
    fn merged(&self, other: &Csr32) -> CsrMatrix {
        let mut row_ptr = Vec::with_capacity(self.n_rows + 1);
        row_ptr.push(0);
        let mut col_idx = Vec::with_capacity(self.nnz() + other.nnz());
        let mut values = Vec::with_capacity(self.nnz() + other.nnz());
        for i in 0..self.n_rows {
            let mut row: Vec<(u32, f64)> = (self.row_ptr[i]..self.row_ptr[i + 1])
                .map(|k| (self.col[k], self.val[k]))
                .chain(
                    (other.row_ptr[i]..other.row_ptr[i + 1]).map(|k| (other.col[k], other.val[k])),
                )
                .collect();
            row.sort_unstable_by_key(|e| e.0);
            for (j, v) in row {
                col_idx.push(j);
                values.push(v);
            }
            row_ptr.push(col_idx.len());
        }
        CsrMatrix { n_rows: self.n_rows, n_cols: self.n_cols, row_ptr, col_idx, values }
    }

    fn diagonal(&self) -> Vec<f64> {
        (0..self.n_rows)
            .map(|i| {
                let r = self.row_ptr[i]..self.row_ptr[i + 1];
                self.col[r.clone()]
                    .binary_search(&(i as u32))
                    .map_or(0.0, |k| self.val[r.start + k])
            })
            .collect()
    }

    /// Row `i` of A times `x`, with four partial sums (the additions of one sum wait on each
    /// other; four hide that latency). The order is fixed, so the result is too.
    #[inline]
    fn row_dot(&self, i: usize, x: &[f64]) -> f64 {
        let r = self.row_ptr[i]..self.row_ptr[i + 1];
        let (cols, vals) = (&self.col[r.clone()], &self.val[r]);
        let mut acc = [0.0f64; 4];
        let mut c4 = cols.chunks_exact(4);
        let mut v4 = vals.chunks_exact(4);
        for (c, v) in (&mut c4).zip(&mut v4) {
            for k in 0..4 {
                acc[k] += v[k] * x[c[k] as usize];
            }
        }
        for (&j, &v) in c4.remainder().iter().zip(v4.remainder()) {
            acc[0] += v * x[j as usize];
        }
        (acc[0] + acc[1]) + (acc[2] + acc[3])
    }

    /// y = A x (parallel over row chunks, deterministic).
    fn spmv(&self, x: &[f64], y: &mut [f64]) {
        debug_assert!(x.len() == self.n_cols && y.len() == self.n_rows);
        if self.nnz() < PAR_MIN {
            for (i, yi) in y.iter_mut().enumerate() {
                *yi = self.row_dot(i, x);
            }
        } else {
            y.par_chunks_mut(CHUNK).enumerate().for_each(|(c, ys)| {
                for (k, yi) in ys.iter_mut().enumerate() {
                    *yi = self.row_dot(c * CHUNK + k, x);
                }
            });
        }
    }

    /// y += A x.
    fn spmv_add(&self, x: &[f64], y: &mut [f64]) {
        if self.nnz() < PAR_MIN {
            for (i, yi) in y.iter_mut().enumerate() {
                *yi += self.row_dot(i, x);
            }
        } else {
            y.par_chunks_mut(CHUNK).enumerate().for_each(|(c, ys)| {
                for (k, yi) in ys.iter_mut().enumerate() {
                    *yi += self.row_dot(c * CHUNK + k, x);
                }
            });
        }
    }

    /// Aᵀ as a new matrix (sorted columns come out of the row-order scan).
    fn transpose(&self) -> Csr32 {
        let mut count = vec![0usize; self.n_cols + 1];
        for &j in &self.col {
            count[j as usize + 1] += 1;
        }
        for j in 0..self.n_cols {
            count[j + 1] += count[j];
        }
        let row_ptr = count.clone();
        let mut next = count;
        let mut col = vec![0u32; self.nnz()];
        let mut val = vec![0.0; self.nnz()];
        for i in 0..self.n_rows {
            for k in self.row_ptr[i]..self.row_ptr[i + 1] {
                let j = self.col[k] as usize;
                col[next[j]] = i as u32;
                val[next[j]] = self.val[k];
                next[j] += 1;
            }
        }
        Csr32 { n_rows: self.n_cols, n_cols: self.n_rows, row_ptr, col, val }
    }

    /// Aᵀ when A's columns are grouped by `groups` (every row holds all columns of a group
    /// or none, as a fitted prolongator's rows do): the rows of Aᵀ of one group have the same
    /// columns, so the scatter runs over (row, group) pairs, a sixth of the entries for
    /// elasticity, and the values are filled in parallel, group by group, into contiguous
    /// runs. The same matrix as [`Self::transpose`], entry for entry.
    fn transpose_grouped(&self, groups: &Runs) -> Csr32 {
        let n_groups = groups.count(self.n_cols);
        let walk = |i: usize, f: &mut dyn FnMut(u32, u32)| {
            let cols = &self.col[self.row_ptr[i]..self.row_ptr[i + 1]];
            let mut q = 0;
            while q < cols.len() {
                let g = groups.of(cols[q]);
                f(g, q as u32);
                q += groups.span(g).1;
            }
        };
        // the rows holding each group, in increasing order, and where the group starts in them
        let mut group_ptr = vec![0usize; n_groups + 1];
        for i in 0..self.n_rows {
            walk(i, &mut |g, _| group_ptr[g as usize + 1] += 1);
        }
        for g in 0..n_groups {
            group_ptr[g + 1] += group_ptr[g];
        }
        let mut next = group_ptr.clone();
        let mut holders = vec![(0u32, 0u32); group_ptr[n_groups]];
        for i in 0..self.n_rows {
            walk(i, &mut |g, q| {
                holders[next[g as usize]] = (i as u32, q);
                next[g as usize] += 1;
            });
        }
        drop(next);
        let mut row_ptr = Vec::with_capacity(self.n_cols + 1);
        row_ptr.push(0);
        for g in 0..n_groups {
            let len = group_ptr[g + 1] - group_ptr[g];
            for _ in 0..groups.span(g as u32).1 {
                row_ptr.push(row_ptr.last().unwrap() + len);
            }
        }
        let mut col = vec![0u32; self.nnz()];
        let mut val = vec![0.0; self.nnz()];
        let sizes = (0..n_groups).map(|g| {
            let (first, w) = groups.span(g as u32);
            row_ptr[first + w] - row_ptr[first]
        });
        let col_runs = split_runs(&mut col, sizes.clone());
        let val_runs = split_runs(&mut val, sizes);
        col_runs.into_par_iter().zip(val_runs).enumerate().for_each(|(g, (col_here, val_here))| {
            let held = &holders[group_ptr[g]..group_ptr[g + 1]];
            let w = groups.span(g as u32).1;
            for t in 0..w {
                let rows = t * held.len()..(t + 1) * held.len();
                for ((c, v), &(i, q)) in
                    col_here[rows.clone()].iter_mut().zip(&mut val_here[rows]).zip(held)
                {
                    *c = i;
                    *v = self.val[self.row_ptr[i as usize] + q as usize + t];
                }
            }
        });
        Csr32 { n_rows: self.n_cols, n_cols: self.n_rows, row_ptr, col, val }
    }

    /// A B, in parallel over chunks of rows of A (dense accumulator of B's width per chunk);
    /// exact zeros produced by cancellation are kept (they are rare and harmless). `rows` and
    /// `cols` group A's rows and B's columns ([`Self::product_rows`]).
    fn matmul(&self, b: &impl Rows, rows: &impl Groups, cols: &impl Groups) -> Csr32 {
        let parts = self.product_rows(rows.count(self.n_rows), |g| g, b, rows, cols);
        let (row_ptr, col, val) = concat_rows(self.n_rows, parts);
        Csr32 { n_rows: self.n_rows, n_cols: b.n_cols(), row_ptr, col, val }
    }

    /// A B as the row chunks that computed it, not joined: for an intermediate product read
    /// row by row (A P of the Galerkin product R (A P)), which then never exists twice (the
    /// chunks and their joined copy were the peak of the hierarchy's set-up).
    fn matmul_chunked(&self, b: &impl Rows, rows: &impl Groups, cols: &impl Groups) -> ChunkedRows {
        let parts = self.product_rows(rows.count(self.n_rows), |g| g, b, rows, cols);
        ChunkedRows::new(b.n_cols(), parts)
    }

    /// The rows of row groups `group_at(0)`, …, `group_at(count − 1)` of A B, in that order,
    /// as chunks of [`chunk_len`] groups computed in parallel (row lengths, columns, values).
    /// `rows` groups A's rows: the rows of a group are walked together, column by column of
    /// the union of their columns, so each row of B they read is read once for all of them
    /// (a node's three rows of elasticity, a coarse node's six). `cols` groups B's columns (a
    /// row of B holds all columns of a group or none): one mark and one index lookup per group.
    /// Each row's product has the columns and the values of its own product to the bit: a row
    /// without an entry at a column of the union adds zeros, and a column group enters its
    /// row only when one of the row's own entries reached it.
    #[allow(clippy::type_complexity)]
    fn product_rows(
        &self,
        count: usize,
        group_at: impl Fn(usize) -> usize + Sync,
        b: &impl Rows,
        rows: &impl Groups,
        cols: &impl Groups,
    ) -> Vec<(Vec<usize>, Vec<u32>, Vec<f64>)> {
        assert_eq!(
            self.n_cols,
            b.n_rows(),
            "product of {}×{} and {}×{}",
            self.n_rows,
            self.n_cols,
            b.n_rows(),
            b.n_cols()
        );
        match rows.max_size() {
            0 | 1 => self.product_rows_in::<1>(count, &group_at, b, rows, cols),
            2 => self.product_rows_in::<2>(count, &group_at, b, rows, cols),
            3 => self.product_rows_in::<3>(count, &group_at, b, rows, cols),
            4 => self.product_rows_in::<4>(count, &group_at, b, rows, cols),
            5 | 6 => self.product_rows_in::<6>(count, &group_at, b, rows, cols),
            7 | 8 => self.product_rows_in::<8>(count, &group_at, b, rows, cols),
            h => unreachable!("row groups of {h} > {MAX_GROUP} rows (Runs::new refuses them)"),
        }
    }

    /// [`Self::product_rows`] with row groups of up to `H` rows: the accumulator holds the
    /// `H` rows of a column side by side, so an entry of B's row updates them in one pass (a
    /// group of fewer rows runs with zeros in the rest).
    #[allow(clippy::type_complexity)]
    fn product_rows_in<const H: usize>(
        &self,
        count: usize,
        group_at: &(impl Fn(usize) -> usize + Sync),
        b: &impl Rows,
        rows: &impl Groups,
        cols: &impl Groups,
    ) -> Vec<(Vec<usize>, Vec<u32>, Vec<f64>)> {
        let width = b.n_cols();
        let per_chunk = chunk_len(count, H);
        let n_chunks = count.div_ceil(per_chunk);
        // A sparse accumulator: the column groups a row group reaches get slots in the order
        // they are reached (`slot_of`, per group of B's columns, NONE when unreached), each
        // slot holding its group's columns × H rows; `reached` per slot, bit r set when row r
        // of the group reached it. Only `slot_of` spans B's width (4 bytes per group, one per
        // rayon job), where a dense accumulator would hold H × width values (11 MB per job on
        // the fine level of elastic3d N = 54) and be scattered over.
        let stride = H * cols.max_size().max(1);
        let fresh = || (vec![NONE; cols.count(width)], Vec::<f64>::new(), Vec::<u8>::new());
        (0..n_chunks)
            .into_par_iter()
            .map_init(fresh, |(slot_of, acc, reached), c| {
                let range = c * per_chunk..((c + 1) * per_chunk).min(count);
                let (mut next, mut end) = ([0usize; H], [0usize; H]);
                let mut touched: Vec<u32> = Vec::new();
                let mut lens = Vec::with_capacity(range.len() * H);
                let mut col = Vec::new();
                let mut val = Vec::new();
                for g in range.map(group_at) {
                    let (first, h) = rows.span(g as u32);
                    for r in 0..h {
                        (next[r], end[r]) = (self.row_ptr[first + r], self.row_ptr[first + r + 1]);
                    }
                    let mut a = [0.0f64; H];
                    loop {
                        // the smallest column under the rows' cursors, and who has it
                        let mut j = u32::MAX;
                        for r in 0..h {
                            if next[r] < end[r] {
                                j = j.min(self.col[next[r]]);
                            }
                        }
                        if j == u32::MAX {
                            break;
                        }
                        let mut present = 0u8;
                        for r in 0..h {
                            a[r] = 0.0;
                            if next[r] < end[r] && self.col[next[r]] == j {
                                a[r] = self.val[next[r]];
                                next[r] += 1;
                                present |= 1 << r;
                            }
                        }
                        let (bc, bv) = b.row(j as usize);
                        let mut q = 0;
                        while q < bc.len() {
                            let cg = cols.of(bc[q]);
                            let w = cols.span(cg).1;
                            let mut k = slot_of[cg as usize] as usize;
                            if k == NONE as usize {
                                k = touched.len();
                                slot_of[cg as usize] = k as u32;
                                touched.push(cg);
                                if acc.len() < (k + 1) * stride {
                                    acc.resize((k + 1) * stride, 0.0);
                                    reached.resize(k + 1, 0);
                                }
                            }
                            reached[k] |= present;
                            let block = &mut acc[k * stride..k * stride + w * H];
                            for (cell, &y) in block.chunks_exact_mut(H).zip(&bv[q..q + w]) {
                                for r in 0..H {
                                    cell[r] += a[r] * y;
                                }
                            }
                            q += w;
                        }
                    }
                    touched.sort_unstable();
                    for r in 0..h {
                        let before = col.len();
                        for &cg in &touched {
                            let k = slot_of[cg as usize] as usize;
                            if reached[k] >> r & 1 == 1 {
                                let (s, w) = cols.span(cg);
                                for t in 0..w {
                                    col.push((s + t) as u32);
                                    val.push(acc[k * stride + t * H + r]);
                                }
                            }
                        }
                        lens.push(col.len() - before);
                    }
                    for &cg in &touched {
                        let k = slot_of[cg as usize] as usize;
                        acc[k * stride..(k + 1) * stride].fill(0.0);
                        reached[k] = 0;
                        slot_of[cg as usize] = NONE;
                    }
                    touched.clear();
                }
                col.shrink_to_fit();
                val.shrink_to_fit();
                (lens, col, val)
            })
            .collect()
    }

    /// Whether every row holds all columns of a group of `groups` or none, each group's
    /// columns in order (true of a prolongator fitted to a near-nullspace, whose rows hold
    /// all the coarse unknowns of their aggregates, and of its product with any matrix).
    fn columns_grouped(&self, groups: &impl Groups) -> bool {
        (0..self.n_rows).into_par_iter().all(|i| {
            let cols = &self.col[self.row_ptr[i]..self.row_ptr[i + 1]];
            let mut q = 0;
            while q < cols.len() {
                let (s, w) = groups.span(groups.of(cols[q]));
                if q + w > cols.len() || (0..w).any(|t| cols[q + t] as usize != s + t) {
                    return false;
                }
                q += w;
            }
            true
        })
    }
}

/// Row groups per chunk of a set-up product of `count` groups of up to `height` rows: about
/// [`PRODUCT_ROWS`] rows, fewer when that would leave fewer than 8 chunks (a coarse level's
/// Galerkin rows are few but each reads hundreds of rows of A P). Smaller chunks were
/// measured to cost memory: their outputs, below the allocator's mmap threshold, stay with
/// the allocator after they are freed (elastic3d N = 54: 1.49 GB peak with 64 chunks at
/// least, 1.43 GB with 8). It depends on the sizes only, and a row's entries do not depend on
/// the chunks anyway.
fn chunk_len(count: usize, height: usize) -> usize {
    (PRODUCT_ROWS / height).min(count.div_ceil(8)).max(1)
}

/// How the rows or columns of a matrix of the set-up's products group into runs of
/// consecutive indices (see [`Csr32::product_rows`]).
trait Groups: Sync {
    /// The group of index `i`.
    fn of(&self, i: u32) -> u32;
    /// The first index and the size of group `g`.
    fn span(&self, g: u32) -> (usize, usize);
    /// The number of groups of `n` indices.
    fn count(&self, n: usize) -> usize;
    /// The size of the largest group.
    fn max_size(&self) -> usize;
}

/// The coarse unknowns of a level grouped by coarse node (aggregate): node `g` holds
/// `ptr[g]..ptr[g + 1]`, `of[i]` is the node of unknown `i`. With a near-nullspace of k
/// vectors a group has up to k unknowns, so the products of the set-up handle up to k (A P)
/// or k × k (R (A P)) values per index operation.
struct Runs<'a> {
    ptr: &'a [usize],
    of: &'a [u32],
    max: usize,
}

impl<'a> Runs<'a> {
    /// `None` when a group has more than [`MAX_GROUP`] unknowns (the products then run
    /// ungrouped).
    fn new(ptr: &'a [usize], of: &'a [u32]) -> Option<Self> {
        let max = ptr.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(1);
        (max <= MAX_GROUP).then_some(Runs { ptr, of, max })
    }

    /// The nodes of `layout` as groups (`None` for a uniform layout, whose products run
    /// ungrouped, or nodes of more than [`MAX_GROUP`] unknowns).
    fn of_layout(layout: &'a Layout) -> Option<Self> {
        match layout {
            Layout::Nodes { ptr, of } => Runs::new(ptr, of),
            Layout::Uniform(_) => None,
        }
    }
}

/// Runs where known, else every index its own group.
impl Groups for Option<Runs<'_>> {
    #[inline]
    fn of(&self, i: u32) -> u32 {
        self.as_ref().map_or(i, |g| g.of(i))
    }
    #[inline]
    fn span(&self, g: u32) -> (usize, usize) {
        self.as_ref().map_or((g as usize, 1), |runs| runs.span(g))
    }
    fn count(&self, n: usize) -> usize {
        self.as_ref().map_or(n, |g| g.count(n))
    }
    fn max_size(&self) -> usize {
        self.as_ref().map_or(1, |g| g.max_size())
    }
}

/// The most unknowns of a [`Runs`] group (near-nullspaces of up to 8 vectors: 3D elasticity
/// has 6).
const MAX_GROUP: usize = 8;

impl Groups for Runs<'_> {
    #[inline]
    fn of(&self, i: u32) -> u32 {
        self.of[i as usize]
    }
    #[inline]
    fn span(&self, g: u32) -> (usize, usize) {
        let g = g as usize;
        (self.ptr[g], self.ptr[g + 1] - self.ptr[g])
    }
    fn count(&self, _n: usize) -> usize {
        self.ptr.len() - 1
    }
    fn max_size(&self) -> usize {
        self.max
    }
}

/// The Galerkin product R A P of a level (R = Pᵀ), by blocks of coarse rows when A is large:
/// each block computes the rows of A P that its rows of R read (their support), multiplies,
/// and drops them, so A P, the largest matrix of the set-up (2–3 × A for elasticity's six
/// rigid-body modes), never exists whole. Rows of A P in two blocks' supports are computed
/// twice; while the supports overlap so much that this would cost more than half of A P again
/// (thin blocks of a large mesh, an ordering without locality), the blocks are halved in
/// number ([`galerkin_blocks`]). A row's entries are summed in the same order either way: the
/// result does not depend on the blocking.
///
/// `a_rows` groups A's rows (the level's nodes) and `groups` P's columns and so R's rows (the
/// coarse nodes when P was fitted to a near-nullspace): [`Runs`], or `None` for one index
/// each. The product is the same to the bit either way ([`Csr32::product_rows`]).
fn galerkin_product(
    r: &Csr32,
    a: &Csr32,
    p: &Csr32,
    a_rows: &Option<Runs>,
    groups: &Option<Runs>,
) -> Csr32 {
    galerkin_product_in_blocks(r, a, p, a_rows, groups, GALERKIN_BLOCK_NNZ)
}

/// [`galerkin_product`] with blocks of about `block_nnz` entries of A.
fn galerkin_product_in_blocks(
    r: &Csr32,
    a: &Csr32,
    p: &Csr32,
    a_rows: &Option<Runs>,
    groups: &Option<Runs>,
    block_nnz: usize,
) -> Csr32 {
    let supports = galerkin_blocks(r, a, groups, block_nnz);
    let parts = if supports.len() <= 1 {
        let ap = a.matmul_chunked(p, a_rows, groups);
        r.product_rows(groups.count(r.n_rows), |g| g, &ap, groups, groups)
    } else {
        let mut local = vec![NONE; a.n_rows];
        let mut parts = Vec::new();
        for (block_groups, support) in supports {
            // whole groups of A's rows (a group's rows are computed together)
            let mut support_groups: Vec<u32> = support.iter().map(|&i| a_rows.of(i)).collect();
            support_groups.dedup();
            let mut k = 0u32;
            for &g in &support_groups {
                let (s, h) = a_rows.span(g);
                for i in s..s + h {
                    local[i] = k;
                    k += 1;
                }
            }
            let at = |k| support_groups[k] as usize;
            let ap = ChunkedRows::new(
                p.n_cols,
                a.product_rows(support_groups.len(), at, p, a_rows, groups),
            );
            let block = SupportRows { rows: &ap, local: &local, n_rows: a.n_rows };
            let at = |k| block_groups.start + k;
            parts.extend(r.product_rows(block_groups.len(), at, &block, groups, groups));
            for &g in &support_groups {
                let (s, h) = a_rows.span(g);
                local[s..s + h].fill(NONE);
            }
        }
        parts
    };
    let (row_ptr, col, val) = concat_rows(r.n_rows, parts);
    Csr32 { n_rows: r.n_rows, n_cols: p.n_cols, row_ptr, col, val }
}

/// Entries of A per block of the blocked Galerkin product ([`galerkin_product`]): a block's
/// rows of A P take about 2–3 times as many.
const GALERKIN_BLOCK_NNZ: usize = 4 << 20;

/// The blocks of [`galerkin_product`] as ranges of R's row groups, with the fine rows each
/// reads (sorted): about `block_nnz` entries of A per block, halved in number until their
/// supports add up to at most 1.5 times A's rows; none (one block, no supports) when A is
/// small or even two blocks overlap more.
#[allow(clippy::type_complexity)]
fn galerkin_blocks(
    r: &Csr32,
    a: &Csr32,
    groups: &impl Groups,
    block_nnz: usize,
) -> Vec<(std::ops::Range<usize>, Vec<u32>)> {
    let n_groups = groups.count(r.n_rows);
    let mut n_blocks = a.nnz().div_ceil(block_nnz).min(n_groups);
    // Thin blocks of a large mesh read supports much wider than themselves (a slab of the
    // aggregates and the smoothed prolongator's reach on both sides): fewer, thicker blocks
    // overlap less, at more memory per block; one block only when even two overlap too much.
    while n_blocks > 1 {
        let size = n_groups.div_ceil(n_blocks);
        let blocks: Vec<_> = (0..n_groups.div_ceil(size))
            .into_par_iter()
            .map(|b| {
                let block_groups = b * size..((b + 1) * size).min(n_groups);
                // the rows of a group have the same columns: the first row's stand for them all
                let mut read = vec![false; a.n_rows];
                for g in block_groups.clone() {
                    let first = groups.span(g as u32).0;
                    for &i in &r.col[r.row_ptr[first]..r.row_ptr[first + 1]] {
                        read[i as usize] = true;
                    }
                }
                let support: Vec<u32> =
                    (0..a.n_rows as u32).filter(|&i| read[i as usize]).collect();
                (block_groups, support)
            })
            .collect();
        let read: usize = blocks.iter().map(|(_, s)| s.len()).sum();
        if 2 * read <= 3 * a.n_rows {
            return blocks;
        }
        n_blocks /= 2;
    }
    Vec::new()
}

/// The rows of A P that one block of [`galerkin_product`] computed, addressed by fine row
/// (`local[i]`: the position of row i among them; only rows of the block's support are read).
struct SupportRows<'a> {
    rows: &'a ChunkedRows,
    local: &'a [u32],
    n_rows: usize,
}

impl Rows for SupportRows<'_> {
    fn n_rows(&self) -> usize {
        self.n_rows
    }
    fn n_cols(&self) -> usize {
        self.rows.n_cols
    }
    #[inline]
    fn row(&self, i: usize) -> (&[u32], &[f64]) {
        self.rows.row(self.local[i] as usize)
    }
}

/// Row access to a sparse matrix with u32 columns: a [`Csr32`] or [`ChunkedRows`].
trait Rows: Sync {
    fn n_rows(&self) -> usize;
    fn n_cols(&self) -> usize;
    /// The columns and values of row i.
    fn row(&self, i: usize) -> (&[u32], &[f64]);
}

impl Rows for Csr32 {
    fn n_rows(&self) -> usize {
        self.n_rows
    }
    fn n_cols(&self) -> usize {
        self.n_cols
    }
    #[inline]
    fn row(&self, i: usize) -> (&[u32], &[f64]) {
        let r = self.row_ptr[i]..self.row_ptr[i + 1];
        (&self.col[r.clone()], &self.val[r])
    }
}

/// The rows of a product as computed, chunk by chunk (row lengths, columns, values), the
/// rows numbered through the chunks in order.
struct ChunkedRows {
    n_cols: usize,
    /// Per row: its chunk.
    chunk_of: Vec<u32>,
    /// Per chunk: its first row.
    first: Vec<usize>,
    /// Per chunk: the offsets of its rows into its own arrays (lengths turned into starts).
    starts: Vec<Vec<usize>>,
    parts: Vec<(Vec<usize>, Vec<u32>, Vec<f64>)>,
}

impl ChunkedRows {
    fn new(n_cols: usize, parts: Vec<(Vec<usize>, Vec<u32>, Vec<f64>)>) -> Self {
        let mut chunk_of = Vec::new();
        let mut first = Vec::with_capacity(parts.len());
        let mut starts = Vec::with_capacity(parts.len());
        for (c, (lens, _, _)) in parts.iter().enumerate() {
            first.push(chunk_of.len());
            chunk_of.resize(chunk_of.len() + lens.len(), c as u32);
            let mut s = Vec::with_capacity(lens.len() + 1);
            s.push(0);
            for l in lens {
                s.push(s.last().unwrap() + l);
            }
            starts.push(s);
        }
        ChunkedRows { n_cols, chunk_of, first, starts, parts }
    }
}

impl Rows for ChunkedRows {
    fn n_rows(&self) -> usize {
        self.chunk_of.len()
    }
    fn n_cols(&self) -> usize {
        self.n_cols
    }
    #[inline]
    fn row(&self, i: usize) -> (&[u32], &[f64]) {
        let c = self.chunk_of[i] as usize;
        let k = i - self.first[c];
        let r = self.starts[c][k]..self.starts[c][k + 1];
        let (_, col, val) = &self.parts[c];
        (&col[r.clone()], &val[r])
    }
}

/// Joins per-chunk rows (row lengths, columns, values), in chunk order, into CSR arrays.
#[allow(clippy::type_complexity)]
fn concat_rows(
    n_rows: usize,
    parts: Vec<(Vec<usize>, Vec<u32>, Vec<f64>)>,
) -> (Vec<usize>, Vec<u32>, Vec<f64>) {
    let nnz = parts.iter().map(|p| p.1.len()).sum();
    let mut row_ptr = Vec::with_capacity(n_rows + 1);
    row_ptr.push(0);
    for (lens, _, _) in &parts {
        for l in lens {
            row_ptr.push(row_ptr.last().unwrap() + l);
        }
    }
    // The copies run in parallel: at the set-up's sizes (10⁸ bytes) the first touch of the
    // fresh pages costs more than the copy itself, and it divides between the threads. Each
    // chunk is freed once copied, so the product does not exist twice.
    let mut col = vec![0u32; nnz];
    let mut val = vec![0.0; nnz];
    let col_runs = split_runs(&mut col, parts.iter().map(|p| p.1.len()));
    let val_runs = split_runs(&mut val, parts.iter().map(|p| p.2.len()));
    (col_runs, val_runs, parts).into_par_iter().for_each(|(col_here, val_here, (_, c, v))| {
        col_here.copy_from_slice(&c);
        val_here.copy_from_slice(&v);
    });
    (row_ptr, col, val)
}

/// Aggregates of one level: the aggregate of each node (`NONE` if it belongs to none).
#[derive(Clone, Debug)]
struct Aggregates {
    of_node: Vec<u32>,
    count: usize,
}

/// How the unknowns of a level group into nodes (the vertices of aggregation).
#[derive(Clone, Debug, PartialEq)]
enum Layout {
    /// `b` consecutive unknowns per node.
    Uniform(usize),
    /// Node `I` holds unknowns `ptr[I]..ptr[I + 1]`; `of[i]` is the node of unknown `i`.
    Nodes { ptr: Vec<usize>, of: Vec<u32> },
}

impl Layout {
    /// The layout of consecutive runs `ptr` (starting at 0, ending at the number of unknowns).
    fn from_ptr(ptr: Vec<usize>) -> Self {
        let mut of = vec![0u32; *ptr.last().unwrap_or(&0)];
        for (node, w) in ptr.windows(2).enumerate() {
            of[w[0]..w[1]].fill(node as u32);
        }
        Layout::Nodes { ptr, of }
    }

    fn n_nodes(&self, n_unknowns: usize) -> usize {
        match self {
            Layout::Uniform(b) => n_unknowns / b,
            Layout::Nodes { ptr, .. } => ptr.len() - 1,
        }
    }

    #[inline]
    fn unknowns(&self, node: usize) -> std::ops::Range<usize> {
        match self {
            Layout::Uniform(b) => node * b..(node + 1) * b,
            Layout::Nodes { ptr, .. } => ptr[node]..ptr[node + 1],
        }
    }

    #[inline]
    fn node_of(&self, unknown: u32) -> u32 {
        match self {
            Layout::Uniform(b) => unknown / *b as u32,
            Layout::Nodes { of, .. } => of[unknown as usize],
        }
    }

    fn is_scalar(&self) -> bool {
        matches!(self, Layout::Uniform(1))
    }
}

/// Frobenius norms of the node blocks of `a` (the blocks of `layout`), as a node-level CSR, and
/// the norms of the diagonal blocks.
#[allow(clippy::type_complexity)]
fn block_norms<'a>(
    a: &'a Csr32,
    layout: &Layout,
) -> (std::borrow::Cow<'a, [usize]>, std::borrow::Cow<'a, [u32]>, Vec<f64>, Vec<f64>) {
    let n_nodes = layout.n_nodes(a.n_rows);
    let mut node_ptr = vec![0usize; n_nodes + 1];
    let mut node_col: Vec<u32> = Vec::new();
    let mut node_val: Vec<f64> = Vec::new();
    let mut diag = vec![0.0; n_nodes];
    let mut acc: Vec<f64> = Vec::new();
    let mut mark = vec![u32::MAX; n_nodes];
    let mut touched: Vec<u32> = Vec::new();
    for node in 0..n_nodes {
        for i in layout.unknowns(node) {
            for k in a.row_ptr[i]..a.row_ptr[i + 1] {
                let jn = layout.node_of(a.col[k]);
                if mark[jn as usize] == u32::MAX {
                    mark[jn as usize] = touched.len() as u32;
                    touched.push(jn);
                    acc.push(0.0);
                }
                acc[mark[jn as usize] as usize] += a.val[k] * a.val[k];
            }
        }
        let mut pairs: Vec<(u32, f64)> =
            touched.iter().zip(&acc).map(|(&j, &s)| (j, s.sqrt())).collect();
        pairs.sort_unstable_by_key(|p| p.0);
        for &(j, s) in &pairs {
            if j as usize == node {
                diag[node] = s;
            }
            node_col.push(j);
            node_val.push(s);
            mark[j as usize] = u32::MAX;
        }
        node_ptr[node + 1] = node_col.len();
        touched.clear();
        acc.clear();
    }
    (node_ptr.into(), node_col.into(), node_val, diag)
}

/// The strong node graph of one level (CSR without self-connections) and, for every node, its
/// most strongly coupled neighbour among all (weak included; `NONE` if it has no off-diagonal
/// coupling at all).
struct Strength {
    ptr: Vec<usize>,
    col: Vec<u32>,
    val: Vec<f64>,
    strongest: Vec<u32>,
}

/// Strength of connection: I–J strong when s_IJ > θ √(s_II s_JJ) (and s_IJ > 0).
fn strength(a: &Csr32, layout: &Layout, theta: f64) -> Strength {
    let n_nodes = layout.n_nodes(a.n_rows);
    // node-level norms s_IJ for every stored block (for scalars: |a_ij| in place)
    let (node_ptr, node_col, node_val, diag) = if layout.is_scalar() {
        let val: Vec<f64> = a.val.iter().map(|v| v.abs()).collect();
        let diag = a.diagonal().iter().map(|d| d.abs()).collect::<Vec<_>>();
        (
            std::borrow::Cow::Borrowed(&a.row_ptr[..]),
            std::borrow::Cow::Borrowed(&a.col[..]),
            val,
            diag,
        )
    } else {
        block_norms(a, layout)
    };
    let mut g = Strength {
        ptr: vec![0usize; n_nodes + 1],
        col: Vec::with_capacity(node_col.len()),
        val: Vec::with_capacity(node_col.len()),
        strongest: vec![NONE; n_nodes],
    };
    for node in 0..n_nodes {
        let mut best = 0.0;
        for k in node_ptr[node]..node_ptr[node + 1] {
            let j = node_col[k] as usize;
            if j == node || node_val[k].is_nan() || node_val[k] <= 0.0 {
                continue;
            }
            if node_val[k] > best {
                best = node_val[k];
                g.strongest[node] = j as u32;
            }
            if node_val[k] > theta * (diag[node] * diag[j]).sqrt() {
                g.col.push(j as u32);
                g.val.push(node_val[k]);
            }
        }
        g.ptr[node + 1] = g.col.len();
    }
    g
}

/// Three-phase aggregation of the strong node graph (Vaněk–Mandel–Brezina), plus a last pass
/// in which nodes without strong neighbours join the aggregate of their most strongly coupled
/// neighbour (so that only truly decoupled nodes stay outside the coarse space).
fn aggregate(g: &Strength) -> Aggregates {
    let n = g.ptr.len() - 1;
    let mut of_node = vec![NONE; n];
    let mut count = 0u32;
    let nbrs = |i: usize| &g.col[g.ptr[i]..g.ptr[i + 1]];
    // phase 1: root nodes whose strong neighbourhood is entirely free
    for i in 0..n {
        if of_node[i] != NONE || nbrs(i).is_empty() {
            continue;
        }
        if nbrs(i).iter().all(|&j| of_node[j as usize] == NONE) {
            of_node[i] = count;
            for &j in nbrs(i) {
                of_node[j as usize] = count;
            }
            count += 1;
        }
    }
    // phase 2: join the most strongly connected phase-1 aggregate
    let phase1 = of_node.clone();
    for i in 0..n {
        if of_node[i] != NONE {
            continue;
        }
        let mut best = (NONE, f64::NEG_INFINITY);
        for k in g.ptr[i]..g.ptr[i + 1] {
            let agg = phase1[g.col[k] as usize];
            if agg != NONE && g.val[k] > best.1 {
                best = (agg, g.val[k]);
            }
        }
        of_node[i] = best.0;
    }
    // phase 3: new aggregates from what is left (only nodes with strong neighbours)
    for i in 0..n {
        if of_node[i] != NONE || nbrs(i).is_empty() {
            continue;
        }
        of_node[i] = count;
        for &j in nbrs(i) {
            if of_node[j as usize] == NONE {
                of_node[j as usize] = count;
            }
        }
        count += 1;
    }
    // last passes: weakly coupled nodes follow their strongest neighbour (repeated, so chains
    // of such nodes reach an aggregate); pairs that only point at each other form one.
    loop {
        let mut changed = false;
        for i in 0..n {
            let j = g.strongest[i];
            if of_node[i] == NONE && j != NONE && of_node[j as usize] != NONE {
                of_node[i] = of_node[j as usize];
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    for i in 0..n {
        let j = g.strongest[i];
        if of_node[i] == NONE && j != NONE {
            of_node[i] = count;
            if of_node[j as usize] == NONE {
                of_node[j as usize] = count;
            }
            count += 1;
        }
    }
    Aggregates { of_node, count: count as usize }
}

/// Tentative prolongator: constant per component on each aggregate, columns normalized.
fn tentative_prolongator(aggs: &Aggregates, block: usize) -> Csr32 {
    let mut size = vec![0usize; aggs.count];
    for &g in &aggs.of_node {
        if g != NONE {
            size[g as usize] += 1;
        }
    }
    let n = aggs.of_node.len() * block;
    let mut row_ptr = Vec::with_capacity(n + 1);
    row_ptr.push(0);
    let mut col = Vec::with_capacity(n);
    let mut val = Vec::with_capacity(n);
    for &g in &aggs.of_node {
        for c in 0..block {
            if g != NONE {
                col.push(g * block as u32 + c as u32);
                val.push(1.0 / (size[g as usize] as f64).sqrt());
            }
            row_ptr.push(col.len());
        }
    }
    Csr32 { n_rows: n, n_cols: aggs.count * block, row_ptr, col, val }
}

/// A tentative prolongator fitted to a near-nullspace, with the next level's near-nullspace.
struct Fitted {
    /// T: orthonormal columns on each aggregate, T B_c = B (on the aggregated unknowns).
    t: Csr32,
    /// The coarse nodes (one per aggregate) and their unknowns.
    coarse_ptr: Vec<usize>,
    /// B_c, row-major (coarse unknowns × k).
    coarse_b: Vec<f64>,
}

/// Columns of an aggregate's block of B whose norm after orthogonalization against the
/// columns before is below this fraction of their norm are linearly dependent: dropped.
const RANK_TOL: f64 = 1e-10;

/// Local QR of B on each aggregate (Vaněk–Mandel–Brezina; "fit candidates" in PyAMG): the
/// rows of B of aggregate K form B_K = Q_K R_K with Q_K orthonormal (m_K × k_K) and R_K
/// (k_K × k); T holds Q_K in the k_K columns of the coarse node K and the coarse near-nullspace
/// holds R_K in its rows. Modified Gram–Schmidt, twice, drops columns in the span of those
/// before (a small aggregate cannot carry all rotations), so k_K ≤ k varies by aggregate.
fn fit_near_nullspace(aggs: &Aggregates, layout: &Layout, b: &[f64], k: usize) -> Fitted {
    let n_nodes = aggs.of_node.len();
    // the unknowns of every aggregate, in increasing order
    let mut agg_ptr = vec![0usize; aggs.count + 1];
    for node in 0..n_nodes {
        let g = aggs.of_node[node];
        if g != NONE {
            agg_ptr[g as usize + 1] += layout.unknowns(node).len();
        }
    }
    for g in 0..aggs.count {
        agg_ptr[g + 1] += agg_ptr[g];
    }
    let mut fill = agg_ptr.clone();
    let mut members = vec![0u32; agg_ptr[aggs.count]];
    for node in 0..n_nodes {
        let g = aggs.of_node[node];
        if g != NONE {
            for i in layout.unknowns(node) {
                members[fill[g as usize]] = i as u32;
                fill[g as usize] += 1;
            }
        }
    }
    // per aggregate: Q (m × kept, row-major) and R (kept × k)
    let fits: Vec<(Vec<f64>, Vec<f64>, usize)> = (0..aggs.count)
        .into_par_iter()
        .map(|g| {
            let rows = &members[agg_ptr[g]..agg_ptr[g + 1]];
            let m = rows.len();
            let mut q: Vec<f64> = Vec::with_capacity(m * k);
            let mut r = vec![0.0; k * k];
            let mut kept = 0usize;
            let mut v = vec![0.0; m];
            for j in 0..k {
                for (vi, &row) in v.iter_mut().zip(rows) {
                    *vi = b[row as usize * k + j];
                }
                let norm0 = v.iter().map(|x| x * x).sum::<f64>().sqrt();
                for _pass in 0..2 {
                    for c in 0..kept {
                        let qc = &q[c * m..(c + 1) * m];
                        let p: f64 = qc.iter().zip(&v).map(|(a, b)| a * b).sum();
                        for (vi, qi) in v.iter_mut().zip(qc) {
                            *vi -= p * qi;
                        }
                        r[c * k + j] += p;
                    }
                }
                let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
                if norm > RANK_TOL * norm0 && norm > 0.0 {
                    r[kept * k + j] = norm;
                    q.extend(v.iter().map(|x| x / norm));
                    kept += 1;
                }
            }
            r.truncate(kept * k);
            (q, r, kept)
        })
        .collect();
    let mut coarse_ptr = Vec::with_capacity(aggs.count + 1);
    coarse_ptr.push(0usize);
    let mut coarse_b = Vec::new();
    for (_, r, kept) in &fits {
        coarse_ptr.push(coarse_ptr.last().unwrap() + kept);
        coarse_b.extend_from_slice(r);
    }
    // rows of T: unknown i of aggregate g at local position p holds Q_g[p, :]
    let n = layout_len(layout, n_nodes);
    let mut local = vec![u32::MAX; n];
    for g in 0..aggs.count {
        for (p, &i) in members[agg_ptr[g]..agg_ptr[g + 1]].iter().enumerate() {
            local[i as usize] = p as u32;
        }
    }
    let mut row_ptr = Vec::with_capacity(n + 1);
    row_ptr.push(0);
    let mut col = Vec::with_capacity(n * k);
    let mut val = Vec::with_capacity(n * k);
    for node in 0..n_nodes {
        let g = aggs.of_node[node];
        for i in layout.unknowns(node) {
            if g != NONE {
                let (q, _, kept) = &fits[g as usize];
                let m = agg_ptr[g as usize + 1] - agg_ptr[g as usize];
                let p = local[i] as usize;
                for c in 0..*kept {
                    col.push((coarse_ptr[g as usize] + c) as u32);
                    val.push(q[c * m + p]);
                }
            }
            row_ptr.push(col.len());
        }
    }
    let nc = *coarse_ptr.last().unwrap();
    Fitted { t: Csr32 { n_rows: n, n_cols: nc, row_ptr, col, val }, coarse_ptr, coarse_b }
}

/// Number of unknowns of `n_nodes` nodes laid out as `layout`.
fn layout_len(layout: &Layout, n_nodes: usize) -> usize {
    match layout {
        Layout::Uniform(b) => n_nodes * b,
        Layout::Nodes { ptr, .. } => ptr[n_nodes],
    }
}

/// Estimate of ρ(D⁻¹A) (= λ_max of D^{-1/2} A D^{-1/2}) by Lanczos; the largest Ritz value,
/// found by bisection on the Sturm sequence of the tridiagonal matrix. A lower bound of ρ.
fn spectral_radius(a: &Csr32, inv_diag: &[f64]) -> f64 {
    let n = a.n_rows;
    if n == 0 {
        return 1.0;
    }
    let isd: Vec<f64> = inv_diag.iter().map(|d| d.abs().sqrt()).collect();
    // deterministic pseudo-random start
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut v: Vec<f64> = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64 + 0.5
        })
        .collect();
    let norm = dot(&v, &v).sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
    let mut v_prev = vec![0.0; n];
    let (mut w, mut t) = (vec![0.0; n], vec![0.0; n]);
    let (mut alphas, mut betas) = (Vec::new(), Vec::new());
    let mut beta = 0.0;
    for _ in 0..LANCZOS_STEPS.min(n) {
        for i in 0..n {
            t[i] = v[i] * isd[i];
        }
        a.spmv(&t, &mut w);
        for i in 0..n {
            w[i] *= isd[i];
        }
        let alpha = dot(&w, &v);
        for i in 0..n {
            w[i] -= alpha * v[i] + beta * v_prev[i];
        }
        alphas.push(alpha);
        beta = dot(&w, &w).sqrt();
        if beta.is_nan() || beta <= 1e-10 * alpha.abs() {
            break;
        }
        betas.push(beta);
        std::mem::swap(&mut v_prev, &mut v);
        for i in 0..n {
            v[i] = w[i] / beta;
        }
    }
    betas.truncate(alphas.len() - 1);
    largest_tridiagonal_eigenvalue(&alphas, &betas)
}

/// Largest eigenvalue of the symmetric tridiagonal matrix with diagonal `a` and off-diagonal `b`.
fn largest_tridiagonal_eigenvalue(a: &[f64], b: &[f64]) -> f64 {
    let m = a.len();
    let off = |i: usize| if i < b.len() { b[i].abs() } else { 0.0 };
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for i in 0..m {
        let r = off(i) + if i > 0 { off(i - 1) } else { 0.0 };
        lo = lo.min(a[i] - r);
        hi = hi.max(a[i] + r);
    }
    // number of eigenvalues < x (Sturm count)
    let count_below = |x: f64| {
        let mut c = 0;
        let mut q = a[0] - x;
        if q < 0.0 {
            c += 1;
        }
        for i in 1..m {
            let denom = if q == 0.0 { 1e-300 } else { q };
            q = a[i] - x - b[i - 1] * b[i - 1] / denom;
            if q < 0.0 {
                c += 1;
            }
        }
        c
    };
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if count_below(mid) == m {
            hi = mid;
        } else {
            lo = mid;
        }
        if hi - lo <= 1e-12 * hi.abs() {
            break;
        }
    }
    hi
}

fn dot(x: &[f64], y: &[f64]) -> f64 {
    crate::cg::par_dot(x, y)
}

/// One level of the hierarchy.
#[derive(Debug)]
struct Level {
    a: Csr32,
    inv_diag: Vec<f64>,
    /// 1.1 × Lanczos estimate of ρ(D⁻¹A).
    lambda_max: f64,
}

/// Transfer between level l and l + 1.
#[derive(Debug)]
struct Transfer {
    aggregates: Aggregates,
    p: Csr32,
    r: Csr32,
}

#[derive(Debug)]
enum CoarseSolver {
    /// Our own dense Cholesky: a few hundred unknowns, no workspace. (faer's blocked one
    /// reserves ~200 MB of matrix-product buffers for such a matrix: few of those pages are
    /// touched, so resident memory hardly changes, but they were half of every heap profile
    /// of a 10⁵-unknown solve and hid what the memory is really spent on.)
    Dense(crate::dense::DenseCholesky),
    /// The coarsest level is too large to factor (aggregation stalled): smooth it instead.
    Smooth,
}

/// Work vectors of one level (allocated once; reused by every V-cycle).
#[derive(Debug, Default)]
struct Work {
    r: Vec<f64>,
    d: Vec<f64>,
    d2: Vec<f64>,
    /// Right-hand side and solution of the next coarser level.
    bc: Vec<f64>,
    xc: Vec<f64>,
}

/// The Chebyshev smoother's interval [λ_max/ratio, λ_max] as its centre θ, half-width δ and
/// σ = θ/δ (the recurrence's constants).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChebyshevInterval {
    /// Centre of the interval.
    pub theta: f64,
    /// Half-width of the interval.
    pub delta: f64,
    /// θ / δ.
    pub sigma: f64,
}

impl ChebyshevInterval {
    /// The interval [`lambda_max` / `ratio`, `lambda_max`].
    pub fn new(lambda_max: f64, ratio: f64) -> Self {
        let lambda_min = lambda_max / ratio;
        let theta = 0.5 * (lambda_max + lambda_min);
        let delta = 0.5 * (lambda_max - lambda_min);
        ChebyshevInterval { theta, delta, sigma: theta / delta }
    }
}

/// One level of an exported hierarchy ([`AmgHierarchy::export`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ExportedLevel {
    /// The level's operator A_l (the finest: the matrix without its numerically zero entries).
    pub a: CsrMatrix,
    /// 1 / diag(A_l).
    pub inv_diag: Vec<f64>,
    /// The Chebyshev smoother's upper bound on ρ(D⁻¹A_l) (1.1 × the Lanczos estimate).
    pub lambda_max: f64,
}

/// A built hierarchy's numbers ([`AmgHierarchy::export`]). Its V-cycle: on each level but the
/// coarsest, `pre_sweeps` smoother sweeps from x = 0, the residual restricted by R_l, the
/// coarser level's cycle prolongated by P_l and added, `post_sweeps` sweeps; the coarsest
/// level solved by `coarse` (or smoothed as the others when it is `None`).
#[derive(Clone, Debug, PartialEq)]
pub struct HierarchyExport {
    /// The levels, finest first.
    pub levels: Vec<ExportedLevel>,
    /// (P_l, R_l = P_lᵀ) between level l and l + 1.
    pub transfers: Vec<(CsrMatrix, CsrMatrix)>,
    /// The Cholesky factor of the coarsest operator (`None`: coarsening stalled; smoothed).
    pub coarse: Option<crate::dense::DenseCholesky>,
    /// The smoother of every level.
    pub smoother: Smoother,
    /// Sweeps before the coarse correction.
    pub pre_sweeps: usize,
    /// Sweeps after the coarse correction.
    pub post_sweeps: usize,
}

/// A smoothed-aggregation AMG hierarchy; as a [`Preconditioner`] it applies one V-cycle.
#[derive(Debug)]
pub struct AmgHierarchy {
    params: AmgParams,
    levels: Vec<Level>,
    transfers: Vec<Transfer>,
    coarse: CoarseSolver,
    work: Mutex<Vec<Work>>,
    near_nullspace: Option<Arc<NearNullspace>>,
    /// The given first coarse level ([`AmgHierarchy::with_coarse_space`]).
    coarse_space: Option<Arc<CoarseSpace>>,
}

impl AmgHierarchy {
    /// Builds the hierarchy for the SPD matrix `a`.
    ///
    /// Errors: invalid parameters (`InvalidParameter`); a non-positive or non-finite diagonal
    /// entry on some level (`NotPositiveDefinite`, naming level and row); a coarsest matrix
    /// whose Cholesky factorization fails (`NotPositiveDefinite`). Errors name the field `"amg"`;
    /// [`AmgCgSolver`] renames them to its own field. Panics if `a` is not square or its
    /// size is not a multiple of `block_size`.
    pub fn new(a: &CsrMatrix, params: &AmgParams) -> Result<Self, SolverError> {
        params.validate()?;
        Self::from_kept(Csr32::from_csr(a, true), params, None, None)
    }

    /// [`Self::new`], [`Self::with_near_nullspace`] (`nns`) or [`Self::with_coarse_space`]
    /// (`coarse`, which then carries the near-nullspace) on the finest level's own matrix (A
    /// without its numerically zero entries), which the hierarchy keeps.
    fn from_kept(
        a: Csr32,
        params: &AmgParams,
        nns: Option<Arc<NearNullspace>>,
        coarse: Option<Arc<CoarseSpace>>,
    ) -> Result<Self, SolverError> {
        params.validate()?;
        assert_eq!(a.n_rows, a.n_cols, "AMG needs a square matrix, got {}×{}", a.n_rows, a.n_cols);
        if let Some(c) = &coarse
            && c.n_fine() != a.n_rows
        {
            return Err(SolverError::InvalidParameter {
                name: "CoarseSpace",
                value: format!("{} fine unknowns", c.n_fine()),
                reason: "must have as many fine unknowns as the matrix has rows",
            });
        }
        match &nns {
            Some(b) if coarse.is_none() => b.check_size(a.n_rows)?,
            Some(_) => {}
            None => assert_eq!(
                a.n_rows % params.block_size,
                0,
                "{} rows are not a multiple of block_size {}",
                a.n_rows,
                params.block_size
            ),
        }
        Self::build(a, params, None, nns, coarse)
    }

    /// Builds the hierarchy for the SPD matrix `a` with the near-nullspace `nns` (the rigid-body
    /// modes of elasticity, [`NearNullspace::rigid_body_modes`]): aggregation on the nodes of
    /// `nns`, tentative prolongators fitted to its vectors aggregate by aggregate, coarse nodes
    /// with as many unknowns as independent vectors their aggregate carries
    /// (`params.block_size` is not used).
    ///
    /// Errors as [`Self::new`], and `InvalidParameter` when `nns` has another number of
    /// unknowns than `a`. Panics if `a` is not square.
    pub fn with_near_nullspace(
        a: &CsrMatrix,
        params: &AmgParams,
        nns: Arc<NearNullspace>,
    ) -> Result<Self, SolverError> {
        params.validate()?;
        Self::from_kept(Csr32::from_csr(a, true), params, Some(nns), None)
    }

    /// Builds the hierarchy for the SPD matrix `a` whose first coarse level is `coarse`
    /// (p-multigrid: A₁ = P₀ᵀAP₀ on the coarser discretization's unknowns), coarsened from
    /// there by aggregation with the coarse space's near-nullspace as
    /// [`Self::with_near_nullspace`] does.
    ///
    /// Errors as [`Self::new`], and `InvalidParameter` when P₀ has another number of rows than
    /// `a`. Panics if `a` is not square.
    pub fn with_coarse_space(
        a: &CsrMatrix,
        params: &AmgParams,
        coarse: Arc<CoarseSpace>,
    ) -> Result<Self, SolverError> {
        params.validate()?;
        Self::from_kept(Csr32::from_csr(a, true), params, None, Some(coarse))
    }

    /// Number of levels, the finest and the coarsest included.
    pub fn levels(&self) -> usize {
        self.levels.len()
    }

    /// Unknowns per level, finest first.
    pub fn level_sizes(&self) -> Vec<usize> {
        self.levels.iter().map(|l| l.a.n_rows).collect()
    }

    /// Operator complexity Σ_l nnz(A_l) / nnz(A_0) (A_0 without its numerically zero entries).
    pub fn operator_complexity(&self) -> f64 {
        let total: usize = self.levels.iter().map(|l| l.a.nnz()).sum();
        total as f64 / self.levels[0].a.nnz().max(1) as f64
    }

    /// New values for a matrix with the same sparsity pattern (a Newton step, a scaled
    /// material): keeps the aggregates and recomputes everything numeric (prolongators,
    /// coarse operators, spectral estimates, coarse factorization). Errors as [`Self::new`].
    pub fn refresh_values(&mut self, a: &CsrMatrix) -> Result<(), SolverError> {
        self.refresh_kept(Csr32::from_csr(a, true))
    }

    /// [`Self::refresh_values`] on the finest level's own matrix (A without its numerically
    /// zero entries), which the hierarchy keeps.
    fn refresh_kept(&mut self, a: Csr32) -> Result<(), SolverError> {
        assert_eq!(
            a.n_rows, self.levels[0].a.n_rows,
            "refresh with {} rows for a hierarchy of {}",
            a.n_rows, self.levels[0].a.n_rows
        );
        let aggs: Vec<Aggregates> = self.transfers.drain(..).map(|t| t.aggregates).collect();
        let nns = self.near_nullspace.take();
        let coarse = self.coarse_space.take();
        *self = Self::build(a, &self.params, Some(aggs), nns, coarse)?;
        Ok(())
    }

    /// The numbers of the hierarchy, finest level first, for running its V-cycle elsewhere
    /// (the GPU backend copies them once): every level's operator, inverse diagonal and
    /// smoother bound, the transfers, the coarsest level's factor and the cycle's settings.
    pub fn export(&self) -> HierarchyExport {
        let csr = |m: &Csr32| CsrMatrix {
            n_rows: m.n_rows,
            n_cols: m.n_cols,
            row_ptr: m.row_ptr.clone(),
            col_idx: m.col.clone(),
            values: m.val.clone(),
        };
        HierarchyExport {
            levels: self
                .levels
                .iter()
                .map(|l| ExportedLevel {
                    a: csr(&l.a),
                    inv_diag: l.inv_diag.clone(),
                    lambda_max: l.lambda_max,
                })
                .collect(),
            transfers: self.transfers.iter().map(|t| (csr(&t.p), csr(&t.r))).collect(),
            coarse: match &self.coarse {
                CoarseSolver::Dense(c) => Some(c.clone()),
                CoarseSolver::Smooth => None,
            },
            smoother: self.params.smoother,
            pre_sweeps: self.params.pre_sweeps,
            post_sweeps: self.params.post_sweeps,
        }
    }

    /// The near-nullspace the hierarchy was built with (`None`: the constant per component).
    pub fn near_nullspace(&self) -> Option<&NearNullspace> {
        self.near_nullspace.as_deref()
    }

    fn build(
        a0: Csr32,
        params: &AmgParams,
        reuse: Option<Vec<Aggregates>>,
        nns: Option<Arc<NearNullspace>>,
        coarse_space: Option<Arc<CoarseSpace>>,
    ) -> Result<Self, SolverError> {
        let block = params.block_size;
        let mut levels: Vec<Level> = Vec::new();
        let mut transfers: Vec<Transfer> = Vec::new();
        let mut a = a0;
        let mut reuse = reuse.map(|v| v.into_iter());
        // With a near-nullspace: the node layout and the vectors of the current level (with a
        // given coarse space, its near-nullspace from the level after it).
        let mut fitted: Option<(Layout, Vec<f64>)> = match &coarse_space {
            Some(_) => None,
            None => nns.as_ref().map(|b| (Layout::from_ptr(b.node_ptr.clone()), b.values.clone())),
        };
        let k = match &coarse_space {
            Some(c) => c.near_nullspace.dim,
            None => nns.as_ref().map_or(0, |b| b.dim),
        };
        let uniform = Layout::Uniform(block);
        loop {
            let lvl = levels.len();
            let diag = a.diagonal();
            if let Some((row, d)) =
                diag.iter().enumerate().find(|(_, d)| !(**d > 0.0 && d.is_finite()))
            {
                return Err(SolverError::NotPositiveDefinite {
                    field: "amg".into(),
                    detail: format!("diagonal entry {d:e} at row {row} of AMG level {lvl}"),
                });
            }
            let inv_diag: Vec<f64> = diag.iter().map(|d| 1.0 / d).collect();
            let rho = spectral_radius(&a, &inv_diag);
            let n = a.n_rows;
            let last = n <= params.coarse_size || lvl + 1 >= params.max_levels;
            if let Some(c) = coarse_space.as_ref().filter(|_| lvl == 0 && !last) {
                // The given first level: no aggregates (a placeholder keeps the reused list
                // aligned), no smoothing of P₀.
                if let Some(it) = reuse.as_mut() {
                    it.next();
                }
                let p = c.p.clone();
                let r = p.transpose();
                let ac = galerkin_product(&r, &a, &p, &None, &None);
                tracing::debug!(n, nnz = a.nnz(), coarse = ac.n_rows, "AMG: given coarse space");
                levels.push(Level { a, inv_diag, lambda_max: 1.1 * rho });
                let none = Aggregates { of_node: Vec::new(), count: 0 };
                transfers.push(Transfer { aggregates: none, p, r });
                let b = &c.near_nullspace;
                fitted = Some((Layout::from_ptr(b.node_ptr.clone()), b.values.clone()));
                a = ac;
                continue;
            }
            let aggs = if last {
                None
            } else {
                let layout = fitted.as_ref().map_or(&uniform, |f| &f.0);
                let aggs = match reuse.as_mut().and_then(|it| it.next()) {
                    Some(g) => g,
                    None => aggregate(&strength(&a, layout, params.strength_threshold)),
                };
                let coarse = if fitted.is_some() { aggs.count * k } else { aggs.count * block };
                (aggs.count > 0 && coarse < n).then_some(aggs)
            };
            let Some(aggs) = aggs else {
                levels.push(Level { a, inv_diag, lambda_max: 1.1 * rho });
                break;
            };
            // smoothed prolongator P = (I − ω D⁻¹ A) P_tent
            let level_space = fitted.take();
            let t = match &level_space {
                None => tentative_prolongator(&aggs, block),
                Some((layout, b)) => {
                    let f = fit_near_nullspace(&aggs, layout, b, k);
                    fitted = Some((Layout::from_ptr(f.coarse_ptr), f.coarse_b));
                    f.t
                }
            };
            // The set-up's products take a node's unknowns together: A's rows by this level's
            // nodes, P's columns by the coarse nodes of a fitted near-nullspace (T holds each
            // aggregate's columns whole: checked, as the products rely on it).
            let rows = level_space.as_ref().and_then(|(layout, _)| Runs::of_layout(layout));
            let runs = fitted
                .as_ref()
                .and_then(|(layout, _)| Runs::of_layout(layout))
                .filter(|g| t.columns_grouped(g));
            let omega = 4.0 / (3.0 * rho);
            let mut p = a.matmul(&t, &rows, &runs);
            // P = T − ω D⁻¹ (A T), in parallel over runs of rows (each owns its values)
            let (p_ptr, p_col) = (&p.row_ptr, &p.col);
            let row_runs = |c: usize| c * CHUNK..((c + 1) * CHUNK).min(p.n_rows);
            let sizes = (0..p.n_rows.div_ceil(CHUNK)).map(|c| {
                let rows_here = row_runs(c);
                p_ptr[rows_here.end] - p_ptr[rows_here.start]
            });
            let runs_of_vals = split_runs(&mut p.val, sizes);
            runs_of_vals.into_par_iter().enumerate().for_each(|(c, vals)| {
                let rows_here = row_runs(c);
                let base = p_ptr[rows_here.start];
                for i in rows_here {
                    let scale = -omega * inv_diag[i];
                    let rr = p_ptr[i] - base..p_ptr[i + 1] - base;
                    for v in &mut vals[rr.clone()] {
                        *v *= scale;
                    }
                    let cols = &p_col[p_ptr[i]..p_ptr[i + 1]];
                    for k in t.row_ptr[i]..t.row_ptr[i + 1] {
                        // the pattern of A P_tent contains that of P_tent (A has its diagonal)
                        let pos = cols.binary_search(&t.col[k]).expect("diagonal present");
                        vals[rr.start + pos] += t.val[k];
                    }
                }
            });
            let r = match &runs {
                Some(g) => p.transpose_grouped(g),
                None => p.transpose(),
            };
            let ac = galerkin_product(&r, &a, &p, &rows, &runs);
            tracing::debug!(level = lvl, n, nnz = a.nnz(), coarse = ac.n_rows, "AMG level built");
            levels.push(Level { a, inv_diag, lambda_max: 1.1 * rho });
            transfers.push(Transfer { aggregates: aggs, p, r });
            a = ac;
        }
        let coarsest = levels.last().unwrap();
        let nc = coarsest.a.n_rows;
        let coarse = if nc <= MAX_DENSE {
            let mut m = vec![0.0; nc * nc];
            for i in 0..nc {
                for k in coarsest.a.row_ptr[i]..coarsest.a.row_ptr[i + 1] {
                    m[i * nc + coarsest.a.col[k] as usize] = coarsest.a.val[k];
                }
            }
            match crate::dense::DenseCholesky::factor(&m, nc) {
                Ok(c) => CoarseSolver::Dense(c),
                Err(row) => {
                    return Err(SolverError::NotPositiveDefinite {
                        field: "amg".into(),
                        detail: format!(
                            "Cholesky of the coarsest AMG level ({nc} unknowns, level {}) failed: pivot {row} is not positive",
                            levels.len() - 1
                        ),
                    });
                }
            }
        } else {
            tracing::warn!(
                n = nc,
                "AMG coarsening stalled; the coarsest level is smoothed, not solved"
            );
            CoarseSolver::Smooth
        };
        let work = (0..levels.len())
            .map(|l| {
                let n = levels[l].a.n_rows;
                let nc = levels.get(l + 1).map_or(0, |c| c.a.n_rows);
                Work {
                    r: vec![0.0; n],
                    d: vec![0.0; n],
                    d2: vec![0.0; n],
                    bc: vec![0.0; nc],
                    xc: vec![0.0; nc],
                }
            })
            .collect();
        Ok(AmgHierarchy {
            params: params.clone(),
            levels,
            transfers,
            coarse,
            work: Mutex::new(work),
            near_nullspace: nns,
            coarse_space,
        })
    }

    /// x = V-cycle(b) on level `l` (zero initial guess).
    fn vcycle(&self, l: usize, b: &[f64], x: &mut [f64], work: &mut [Work]) {
        let (w, rest) = work.split_first_mut().unwrap();
        let level = &self.levels[l];
        if l + 1 == self.levels.len() {
            match &self.coarse {
                CoarseSolver::Dense(c) => {
                    x.copy_from_slice(b);
                    c.solve_in_place(x);
                }
                CoarseSolver::Smooth => {
                    self.smooth(level, b, x, w, true, true, self.params.pre_sweeps);
                    self.smooth(level, b, x, w, false, false, self.params.post_sweeps);
                }
            }
            return;
        }
        // pre-smoothing from x = 0, leaving the residual in w.r
        self.smooth(level, b, x, w, true, true, self.params.pre_sweeps);
        let tr = &self.transfers[l];
        tr.r.spmv(&w.r, &mut w.bc);
        self.vcycle(l + 1, &w.bc, &mut w.xc, rest);
        tr.p.spmv_add(&w.xc, x);
        self.smooth(level, b, x, w, false, false, self.params.post_sweeps);
    }

    /// Smoother sweeps on A x = b. `zero_guess`: x's content is ignored and treated as 0.
    /// `forward`: Gauss–Seidel direction (pre-smoothing). On return, when `zero_guess` (the
    /// pre-smoothing case), `w.r` holds b − A x.
    #[allow(clippy::too_many_arguments)]
    fn smooth(
        &self,
        level: &Level,
        b: &[f64],
        x: &mut [f64],
        w: &mut Work,
        zero_guess: bool,
        forward: bool,
        sweeps: usize,
    ) {
        let need_residual = zero_guess;
        match self.params.smoother {
            Smoother::Chebyshev { degree, ratio } => {
                let ChebyshevInterval { theta, delta, sigma } =
                    ChebyshevInterval::new(level.lambda_max, ratio);
                for sweep in 0..sweeps {
                    // start: r = b − A x, d = D⁻¹ r / θ ; x does not yet include d
                    if sweep == 0 && zero_guess {
                        w.r.copy_from_slice(b);
                        x.fill(0.0);
                        scale_diag(&mut w.d, &level.inv_diag, &w.r, 1.0 / theta);
                    } else if sweep == 0 {
                        residual_and_scale(
                            &level.a,
                            b,
                            x,
                            &mut w.r,
                            &mut w.d,
                            &level.inv_diag,
                            1.0 / theta,
                        );
                    } else {
                        scale_diag(&mut w.d, &level.inv_diag, &w.r, 1.0 / theta);
                    }
                    let mut rho_prev = 1.0 / sigma;
                    for _ in 1..degree {
                        let rho = 1.0 / (2.0 * sigma - rho_prev);
                        cheb_step(
                            &level.a,
                            &level.inv_diag,
                            &w.d,
                            &mut w.d2,
                            &mut w.r,
                            x,
                            rho * rho_prev,
                            2.0 * rho / delta,
                        );
                        std::mem::swap(&mut w.d, &mut w.d2);
                        rho_prev = rho;
                    }
                    if need_residual || sweep + 1 < sweeps {
                        residual_update(&level.a, &w.d, &mut w.r, x);
                    } else {
                        add_into(x, &w.d);
                    }
                }
            }
            Smoother::SymmetricGaussSeidel => {
                if zero_guess {
                    x.fill(0.0);
                }
                let a = &level.a;
                for _ in 0..sweeps {
                    let mut sweep_row = |i: usize| {
                        let mut s = b[i];
                        let mut d = 0.0;
                        for k in a.row_ptr[i]..a.row_ptr[i + 1] {
                            let j = a.col[k] as usize;
                            if j == i {
                                d = a.val[k];
                            } else {
                                s -= a.val[k] * x[j];
                            }
                        }
                        x[i] = s / d;
                    };
                    if forward {
                        (0..a.n_rows).for_each(&mut sweep_row);
                    } else {
                        (0..a.n_rows).rev().for_each(&mut sweep_row);
                    }
                }
                if need_residual {
                    a.spmv(x, &mut w.r);
                    for (ri, bi) in w.r.iter_mut().zip(b) {
                        *ri = bi - *ri;
                    }
                }
            }
        }
    }
}

/// d = c D⁻¹ r.
fn scale_diag(d: &mut [f64], inv_diag: &[f64], r: &[f64], c: f64) {
    for ((di, &gi), &ri) in d.iter_mut().zip(inv_diag).zip(r) {
        *di = c * gi * ri;
    }
}

/// x += d.
fn add_into(x: &mut [f64], d: &[f64]) {
    for (xi, di) in x.iter_mut().zip(d) {
        *xi += di;
    }
}

/// Runs `body(first_row, rows)` over row chunks, in parallel when the matrix is large.
fn for_row_chunks<T: Send>(nnz: usize, parts: Vec<T>, body: impl Fn(usize, T) + Sync + Send) {
    if nnz < PAR_MIN {
        for (c, p) in parts.into_iter().enumerate() {
            body(c * CHUNK, p);
        }
    } else {
        parts.into_par_iter().enumerate().for_each(|(c, p)| body(c * CHUNK, p));
    }
}

/// r = b − A x and d = c D⁻¹ r in one pass (x is read, not written).
fn residual_and_scale(
    a: &Csr32,
    b: &[f64],
    x: &[f64],
    r: &mut [f64],
    d: &mut [f64],
    inv_diag: &[f64],
    c: f64,
) {
    let parts: Vec<_> = r.chunks_mut(CHUNK).zip(d.chunks_mut(CHUNK)).collect();
    for_row_chunks(a.nnz(), parts, |start, (r, d)| {
        for k in 0..r.len() {
            let i = start + k;
            let ri = b[i] - a.row_dot(i, x);
            r[k] = ri;
            d[k] = c * inv_diag[i] * ri;
        }
    });
}

/// One Chebyshev step: r −= A d; x += d; d_new = α d + γ D⁻¹ r (one pass; x is not read).
#[allow(clippy::too_many_arguments)]
fn cheb_step(
    a: &Csr32,
    inv_diag: &[f64],
    d: &[f64],
    d_new: &mut [f64],
    r: &mut [f64],
    x: &mut [f64],
    alpha: f64,
    gamma: f64,
) {
    let parts: Vec<_> =
        r.chunks_mut(CHUNK).zip(x.chunks_mut(CHUNK)).zip(d_new.chunks_mut(CHUNK)).collect();
    for_row_chunks(a.nnz(), parts, |start, ((r, x), dn)| {
        for k in 0..r.len() {
            let i = start + k;
            let ri = r[k] - a.row_dot(i, d);
            r[k] = ri;
            x[k] += d[i];
            dn[k] = alpha * d[i] + gamma * inv_diag[i] * ri;
        }
    });
}

/// r −= A d; x += d (one pass).
fn residual_update(a: &Csr32, d: &[f64], r: &mut [f64], x: &mut [f64]) {
    let parts: Vec<_> = r.chunks_mut(CHUNK).zip(x.chunks_mut(CHUNK)).collect();
    for_row_chunks(a.nnz(), parts, |start, (r, x)| {
        for k in 0..r.len() {
            let i = start + k;
            r[k] -= a.row_dot(i, d);
            x[k] += d[i];
        }
    });
}

impl Preconditioner for AmgHierarchy {
    /// z = one V-cycle applied to r (zero initial guess). Symmetric positive definite for an
    /// SPD matrix. Work vectors are preallocated; concurrent calls are serialized by a mutex.
    fn apply(&self, r: &[f64], z: &mut [f64]) {
        let n = self.levels[0].a.n_rows;
        assert!(
            r.len() == n && z.len() == n,
            "V-cycle on vectors of {} and {} for {n} unknowns",
            r.len(),
            z.len()
        );
        let mut work = self.work.lock().unwrap_or_else(|e| e.into_inner());
        self.vcycle(0, r, z, &mut work);
    }
}

/// AMG-preconditioned CG behind the [`LinearSolver`] trait.
///
/// `factor` builds the hierarchy (or, for a matrix with the same sparsity pattern as the last
/// one, refreshes its values keeping the aggregates); `solve_in_place` runs PCG to `CgParams`'
/// tolerance; `solve_transpose_in_place` is the same solve (the matrix is symmetric).
///
/// The first solve after a `factor` starts from zero and keeps its search directions (at most
/// [`AmgCgSolver::with_recycling`] of them, default [`DEFAULT_RECYCLED_DIRECTIONS`], and at
/// most [`RECYCLE_BUDGET_BYTES`] of memory); later solves with the same matrix — the adjoint
/// solve of a linear field — start from the projection of their solution onto those directions
/// ([`ConjugateDirections`]), which saves one CG iteration on the Kuhn-cube benchmark of
/// BENCHMARKS.md. Adjoint solves stop at [`DEFAULT_ADJOINT_REL_TOL`] (see there why), or at
/// `CgParams::rel_tol` where that is looser. Non-convergence is `IterativeNoConvergence` with the
/// relative residual; a curvature pᵀAp ≤ 0 is `NotPositiveDefinite`; a NaN or infinity in the
/// matrix or right-hand side is `NonFinite`.
///
/// The solver keeps a copy of A (32-bit column indices). CG iterates with the hierarchy's
/// finest operator (A without its numerically zero entries, half the entries for P1 on
/// right-angled tetrahedra) and confirms convergence on the exact A before returning.
pub struct AmgCgSolver {
    field: String,
    amg: AmgParams,
    cg: CgParams,
    /// The entries of A that the hierarchy's finest level leaves out (numerically zero):
    /// CG multiplies with that level, and with it plus these where it checks convergence.
    rest: Option<Csr32>,
    /// The pattern of the last factored matrix.
    pattern: Option<crate::linear::PatternKey>,
    hierarchy: Option<AmgHierarchy>,
    last_info: Option<CgInfo>,
    /// Most search directions kept for recycling (0: none).
    recycle_limit: usize,
    /// Directions of the first solve since the last `factor`.
    recycled: ConjugateDirections,
    /// Whether the next solve records its directions (the first after `factor`).
    record_next: bool,
    /// The relative tolerance of adjoint (transpose) solves (never below `cg.rel_tol`).
    adjoint_rel_tol: f64,
    /// A newer matrix than the hierarchy's ([`AmgCgSolver::update_operator`]): CG multiplies
    /// by it, the V-cycle stays that of the hierarchy.
    operator: Option<Csr32>,
    /// The near-nullspace of new hierarchies (`None`: the constant per component).
    near_nullspace: Option<Arc<NearNullspace>>,
    /// The first coarse level of new hierarchies (`None`: aggregation from the finest).
    coarse_space: Option<Arc<CoarseSpace>>,
}

/// The default relative tolerance of [`AmgCgSolver`]'s adjoint (transpose) solves.
///
/// An adjoint residual r_λ = b − Aλ (b = ∂J/∂u) changes a gradient component dJ/dp by
/// r_λᵀ A⁻¹ ∂R/∂p = −r_λᵀ du/dp, at most ‖r_λ‖ ‖du/dp‖ = (‖r_λ‖/‖b‖) · ‖∂J/∂u‖ ‖du/dp‖, and
/// ‖∂J/∂u‖ ‖du/dp‖ is the scale of the adjoint part of dJ/dp itself. A relative residual of 1e-7
/// keeps gradients accurate far beyond what optimizers and Taylor tests resolve (their steps
/// stay above ~1e-6), while the forward solve keeps its tighter 1e-10 because the objective
/// itself and every downstream field are computed from it. Measured on the Kuhn-cube benchmark
/// at 1e-7 with recycled directions: the per-element gradient differs from the one of a 1e-10
/// adjoint solve by 1·10⁻¹² (N = 46) and 5·10⁻¹³ (N = 79) relative (2-norm), and the adjoint CG
/// needs 9 iterations instead of 13–14.
pub const DEFAULT_ADJOINT_REL_TOL: f64 = 1e-7;

/// The default number of CG search directions an [`AmgCgSolver`] keeps for later solves.
pub const DEFAULT_RECYCLED_DIRECTIONS: usize = 32;

/// The most memory an [`AmgCgSolver`] spends on kept directions (256 MiB).
pub const RECYCLE_BUDGET_BYTES: usize = 256 << 20;

impl AmgCgSolver {
    /// A solver for the system of `field` (named in its errors).
    pub fn new(field: &str, amg: AmgParams, cg: CgParams) -> Self {
        AmgCgSolver {
            field: field.to_string(),
            amg,
            cg,
            rest: None,
            pattern: None,
            operator: None,
            hierarchy: None,
            last_info: None,
            recycle_limit: DEFAULT_RECYCLED_DIRECTIONS,
            recycled: ConjugateDirections::new(0),
            record_next: false,
            adjoint_rel_tol: DEFAULT_ADJOINT_REL_TOL,
            near_nullspace: None,
            coarse_space: None,
        }
    }

    /// Build hierarchies with the near-nullspace `nns` (see
    /// [`AmgHierarchy::with_near_nullspace`]); `factor` refuses a matrix of another size.
    pub fn with_near_nullspace(mut self, nns: impl Into<Arc<NearNullspace>>) -> Self {
        self.near_nullspace = Some(nns.into());
        self
    }

    /// Start every hierarchy with the given coarse level (p-multigrid,
    /// [`AmgHierarchy::with_coarse_space`]); `factor` refuses a matrix of another size.
    pub fn with_coarse_space(mut self, coarse: impl Into<Arc<CoarseSpace>>) -> Self {
        self.coarse_space = Some(coarse.into());
        self
    }

    /// Keep at most `directions` search directions of the first solve after each `factor` to
    /// start later solves with the same matrix (0 disables recycling: every solve starts from
    /// zero). The memory budget [`RECYCLE_BUDGET_BYTES`] still applies.
    pub fn with_recycling(mut self, directions: usize) -> Self {
        self.recycle_limit = directions;
        self
    }

    /// Solve adjoint (transpose) systems to the relative tolerance `rel_tol` instead of
    /// [`DEFAULT_ADJOINT_REL_TOL`] (a tolerance below `CgParams::rel_tol` is raised to it).
    pub fn with_adjoint_tolerance(mut self, rel_tol: f64) -> Self {
        self.adjoint_rel_tol = rel_tol;
        self
    }

    /// How many directions are kept for the next solve (0 before the first solve).
    pub fn recycled_directions(&self) -> usize {
        self.recycled.len()
    }

    /// What the last solve did (`None` before the first solve).
    pub fn last_info(&self) -> Option<&CgInfo> {
        self.last_info.as_ref()
    }

    /// A copy of the matrix of the last `factor` (`None` before it).
    pub fn matrix(&self) -> Option<CsrMatrix> {
        let (h, rest) = (self.hierarchy.as_ref()?, self.rest.as_ref()?);
        Some(h.levels[0].a.merged(rest))
    }

    /// The current hierarchy (`None` before `factor`).
    pub fn hierarchy(&self) -> Option<&AmgHierarchy> {
        self.hierarchy.as_ref()
    }

    /// Solve with `a` from now on while keeping the hierarchy of the last `factor` as the
    /// preconditioner: for a sequence of nearby matrices (the tangents of one Newton solve),
    /// where CG with a slightly stale V-cycle costs less than new set-ups. `a` must have the
    /// factored matrix's size; the next `factor` drops it. Errors: a non-finite entry
    /// (`NonFinite`).
    ///
    /// # Panics
    /// Before a successful `factor`, or when `a` has another size.
    pub fn update_operator(&mut self, a: &CsrMatrix) -> Result<(), SolverError> {
        let n = self.hierarchy.as_ref().expect("update_operator before factor").levels[0].a.n_rows;
        assert_eq!(a.n_rows, n, "operator with {} rows for a hierarchy of {n}", a.n_rows);
        crate::linear::check_finite_matrix(&self.field, a)?;
        match &mut self.operator {
            Some(op) if op.nnz() == a.nnz() && op.row_ptr == a.row_ptr => {
                op.val.copy_from_slice(&a.values)
            }
            _ => self.operator = Some(Csr32::from_csr(a, false)),
        }
        self.last_info = None;
        self.recycled.clear();
        self.record_next = self.recycled.capacity() > 0;
        Ok(())
    }

    /// Overwrite `b` with A⁻¹ b by PCG to the relative residual `rel_tol` instead of
    /// `CgParams::rel_tol` (an inexact Newton correction's forcing term).
    pub fn solve_with_tolerance(&mut self, b: &mut [f64], rel_tol: f64) -> Result<(), SolverError> {
        self.solve_to(b, rel_tol)
    }

    /// PCG to the relative tolerance `rel_tol` (the other settings from `CgParams`).
    fn solve_to(&mut self, b: &mut [f64], rel_tol: f64) -> Result<(), SolverError> {
        let (Some(rest), Some(h)) = (&self.rest, &self.hierarchy) else {
            panic!("AmgCgSolver: solve called before a successful factor()");
        };
        let fine = &h.levels[0].a;
        assert_eq!(
            b.len(),
            fine.n_rows,
            "right-hand side has {} entries for {} unknowns",
            b.len(),
            fine.n_rows
        );
        crate::linear::check_finite_vector(&self.field, "right-hand side", b)?;
        let cg = CgParams { rel_tol, ..self.cg.clone() };
        let rhs = b.to_vec();
        let record = std::mem::take(&mut self.record_next);
        if record || self.recycled.is_empty() {
            b.fill(0.0);
        } else {
            self.recycled.initial_guess(&rhs, b);
        }
        let hooks = CgHooks { record: record.then_some(&mut self.recycled), give_up: None };
        // CG iterates with the hierarchy's finest operator (A without its numerically zero
        // entries) and confirms convergence with the exact A (that operator plus the rest).
        let exact = |v: &[f64], y: &mut [f64]| {
            fine.spmv(v, y);
            rest.spmv_add(v, y);
        };
        let info = if let Some(op) = &self.operator {
            pcg_with(&|v: &[f64], y: &mut [f64]| op.spmv(v, y), None, &rhs, b, h, &cg, hooks)
        } else if rest.nnz() > 0 {
            pcg_with(
                &|v: &[f64], y: &mut [f64]| fine.spmv(v, y),
                Some(&exact),
                &rhs,
                b,
                h,
                &cg,
                hooks,
            )
        } else {
            pcg_with(&|v: &[f64], y: &mut [f64]| fine.spmv(v, y), None, &rhs, b, h, &cg, hooks)
        };
        let result = match info.stop {
            CgStop::Converged => Ok(()),
            CgStop::IndefiniteOperator | CgStop::IndefinitePreconditioner => {
                Err(SolverError::NotPositiveDefinite {
                    field: self.field.clone(),
                    detail: format!(
                        "{:?} met by AMG-CG in iteration {} (relative residual {:.3e})",
                        info.stop,
                        info.iterations,
                        info.relative_residual()
                    ),
                })
            }
            CgStop::MaxIterations | CgStop::NonFinite | CgStop::Abandoned => {
                Err(SolverError::IterativeNoConvergence {
                    field: self.field.clone(),
                    iterations: info.iterations,
                    residual: info.relative_residual(),
                })
            }
        };
        tracing::debug!(field = %self.field, iterations = info.iterations, residual = info.relative_residual(), "AMG-CG solve");
        self.last_info = Some(info);
        result
    }

    fn rename(&self, e: SolverError) -> SolverError {
        match e {
            SolverError::NotPositiveDefinite { detail, .. } => {
                SolverError::NotPositiveDefinite { field: self.field.clone(), detail }
            }
            SolverError::Singular { dof, detail, .. } => {
                SolverError::Singular { field: self.field.clone(), dof, detail }
            }
            other => other,
        }
    }
}

impl AmgCgSolver {
    /// `factor` of a matrix given as the part the hierarchy keeps (A without its numerically
    /// zero entries) and the rest, with `key` the pattern of A.
    fn factor_parts(
        &mut self,
        key: crate::linear::PatternKey,
        kept: Csr32,
        rest: Csr32,
    ) -> Result<(), SolverError> {
        let same_pattern = self.pattern == Some(key);
        self.last_info = None;
        let capacity = self.recycle_limit.min(RECYCLE_BUDGET_BYTES / (8 * kept.n_rows.max(1)));
        if capacity != self.recycled.capacity() {
            self.recycled = ConjugateDirections::new(capacity);
        } else {
            self.recycled.clear();
        }
        self.record_next = capacity > 0;
        self.rest = None;
        self.operator = None;
        if same_pattern && self.hierarchy.is_some() {
            let h = self.hierarchy.as_mut().unwrap();
            if let Err(e) = h.refresh_kept(kept) {
                self.hierarchy = None;
                self.pattern = None;
                return Err(self.rename(e));
            }
        } else {
            self.hierarchy = None;
            self.pattern = None;
            let nns = self.near_nullspace.clone();
            let h = AmgHierarchy::from_kept(kept, &self.amg, nns, self.coarse_space.clone())
                .map_err(|e| self.rename(e))?;
            self.hierarchy = Some(h);
            self.pattern = Some(key);
        }
        self.rest = Some(rest);
        Ok(())
    }
}

impl LinearSolver for AmgCgSolver {
    fn factor(&mut self, a: &CsrMatrix) -> Result<(), SolverError> {
        crate::linear::check_finite_matrix(&self.field, a)?;
        let key = crate::linear::PatternKey::of(a);
        self.factor_parts(key, Csr32::from_csr(a, true), Csr32::dropped_of(a))
    }

    /// The hierarchy's finest level is `a` itself, its numerically zero entries moved out:
    /// no copy of A.
    fn factor_owned(&mut self, a: CsrMatrix) -> Result<(), SolverError> {
        crate::linear::check_finite_matrix(&self.field, &a)?;
        let key = crate::linear::PatternKey::of(&a);
        let (kept, rest) = Csr32::split_owned(a);
        self.factor_parts(key, kept, rest)
    }

    fn solve_in_place(&mut self, b: &mut [f64]) -> Result<(), SolverError> {
        self.solve_to(b, self.cg.rel_tol)
    }

    fn solve_transpose_in_place(&mut self, b: &mut [f64]) -> Result<(), SolverError> {
        self.solve_to(b, self.adjoint_rel_tol.max(self.cg.rel_tol))
    }

    fn name(&self) -> &'static str {
        "amg-cg"
    }

    fn last_iterations(&self) -> Option<usize> {
        self.last_info.as_ref().map(|i| i.iterations)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to_csr(m: &Csr32) -> CsrMatrix {
        CsrMatrix {
            n_rows: m.n_rows,
            n_cols: m.n_cols,
            row_ptr: m.row_ptr.clone(),
            col_idx: m.col.clone(),
            values: m.val.clone(),
        }
    }

    /// 2D 5-point Laplacian on an n×n grid (Dirichlet all round).
    fn laplace_2d(n: usize) -> CsrMatrix {
        let id = |i: usize, j: usize| i * n + j;
        let mut row_ptr = vec![0];
        let (mut col_idx, mut values) = (Vec::new(), Vec::new());
        for i in 0..n {
            for j in 0..n {
                let mut row = vec![(id(i, j), 4.0)];
                if i > 0 {
                    row.push((id(i - 1, j), -1.0));
                }
                if i + 1 < n {
                    row.push((id(i + 1, j), -1.0));
                }
                if j > 0 {
                    row.push((id(i, j - 1), -1.0));
                }
                if j + 1 < n {
                    row.push((id(i, j + 1), -1.0));
                }
                row.sort_by_key(|e| e.0);
                for (c, v) in row {
                    col_idx.push(c as u32);
                    values.push(v);
                }
                row_ptr.push(col_idx.len());
            }
        }
        CsrMatrix { n_rows: n * n, n_cols: n * n, row_ptr, col_idx, values }
    }

    /// Every index its own group (the scalar products).
    const UNGROUPED: &Option<Runs<'static>> = &None;

    #[test]
    fn sparse_product_and_transpose_match_dense() {
        let a = Csr32::from_csr(&laplace_2d(5), false);
        let t = a.transpose();
        let p = a.matmul(&t, UNGROUPED, UNGROUPED);
        let dense = |m: &Csr32| {
            let mut d = vec![0.0; m.n_rows * m.n_cols];
            for i in 0..m.n_rows {
                for k in m.row_ptr[i]..m.row_ptr[i + 1] {
                    d[i * m.n_cols + m.col[k] as usize] = m.val[k];
                }
            }
            d
        };
        let (da, dp) = (dense(&a), dense(&p));
        let n = a.n_rows;
        for i in 0..n {
            for j in 0..n {
                let s: f64 = (0..n).map(|k| da[i * n + k] * da[j * n + k]).sum();
                assert!((dp[i * n + j] - s).abs() < 1e-12, "({i},{j})");
            }
        }
        assert_eq!(to_csr(&t), laplace_2d(5));
    }

    #[test]
    fn blocked_galerkin_product_is_the_product_in_one_block() {
        // A 2D Laplacian's first level: blocks of 1/8 of A read supports that overlap little
        // (the aggregates follow the row order), so the product is blocked, and every entry is
        // the one-block product's to the bit.
        let a = Csr32::from_csr(&laplace_2d(40), true);
        let aggs = aggregate(&strength(&a, &Layout::Uniform(1), 0.0));
        let p = a.matmul(&tentative_prolongator(&aggs, 1), UNGROUPED, UNGROUPED);
        let r = p.transpose();
        let budget = a.nnz() / 8;
        let blocks = galerkin_blocks(&r, &a, UNGROUPED, budget);
        assert_eq!(blocks.len(), 8);
        let read: usize = blocks.iter().map(|(_, s)| s.len()).sum();
        assert!(read < 3 * a.n_rows / 2, "{read} rows of A P read for {}", a.n_rows);
        let one = r.matmul(&a.matmul(&p, UNGROUPED, UNGROUPED), UNGROUPED, UNGROUPED);
        let blocked = galerkin_product_in_blocks(&r, &a, &p, &None, &None, budget);
        assert_eq!(to_csr(&blocked), to_csr(&one));
        // Supports that cover A many times over: the 64 blocks asked for halve until the
        // supports add up to at most 1.5 n.
        let mut shuffled = r.clone();
        let scatter = |c: u32| ((c as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as u32;
        shuffled.col.iter_mut().for_each(|c| *c = scatter(*c) % a.n_rows as u32);
        for row in shuffled.row_ptr.windows(2) {
            let cols = &mut shuffled.col[row[0]..row[1]];
            cols.sort_unstable();
        }
        let many = a.nnz().div_ceil(a.nnz() / 64);
        let fewer = galerkin_blocks(&shuffled, &a, UNGROUPED, a.nnz() / 64);
        assert!(fewer.len() < many / 2, "{} blocks of {many}", fewer.len());
        let read: usize = fewer.iter().map(|(_, s)| s.len()).sum();
        assert!(2 * read <= 3 * a.n_rows, "{read} rows of A P read for {}", a.n_rows);
    }

    #[test]
    fn grouped_products_are_the_scalar_products_to_the_bit() {
        // Three unknowns per node of a 2D grid, coupled through a 3×3 block (L ⊗ M + I), the
        // first component's coupling to the right neighbour numerically zero (so the copy
        // without it has rows of one node with different columns, and rows that reach fewer
        // aggregates than their node's others), the rigid-body modes fitted on its aggregates: the products that
        // take a node's rows and a coarse node's unknowns at once equal the scalar ones entry by
        // entry, blocked or not.
        let n = 24;
        let l = laplace_2d(n);
        let m = [[2.0, 0.3, -0.1], [0.3, 1.5, 0.2], [-0.1, 0.2, 1.0]];
        let mut row_ptr = vec![0usize];
        let (mut col_idx, mut values) = (Vec::new(), Vec::new());
        for i in 0..l.n_rows {
            for c in 0..3 {
                let (cols, vals) = l.row(i);
                for (&j, &v) in cols.iter().zip(vals) {
                    for d in 0..3 {
                        col_idx.push(j * 3 + d as u32);
                        let (row, column) = (3 * i + c, 3 * j as usize + d);
                        values.push(if row == column {
                            v * m[c][d] + 1.0
                        } else if c == 0 && j as usize == i + 1 {
                            // the first component does not see its right neighbour
                            1e-17
                        } else {
                            v * m[c][d]
                        });
                    }
                }
                row_ptr.push(col_idx.len());
            }
        }
        let big =
            CsrMatrix { n_rows: 3 * l.n_rows, n_cols: 3 * l.n_rows, row_ptr, col_idx, values };
        let a = Csr32::from_csr(&big, true);
        assert!(a.nnz() < big.nnz());
        let coords: Vec<[f64; 3]> =
            (0..l.n_rows).map(|i| [(i % n) as f64, (i / n) as f64, 0.0]).collect();
        let unknowns: Vec<(usize, usize)> =
            (0..l.n_rows).flat_map(|p| (0..3).map(move |c| (p, c))).collect();
        let nns = NearNullspace::rigid_body_modes(&coords, &unknowns).unwrap();
        let layout = Layout::from_ptr(nns.node_ptr.clone());
        let nodes = Runs::of_layout(&layout);
        assert_eq!(nodes.max_size(), 3);
        let aggs = aggregate(&strength(&a, &layout, 0.02));
        let f = fit_near_nullspace(&aggs, &layout, &nns.values, 6);
        let coarse = Layout::from_ptr(f.coarse_ptr.clone());
        let runs = Runs::of_layout(&coarse);
        assert_eq!(runs.max_size(), 6);
        assert!(f.t.columns_grouped(runs.as_ref().unwrap()));
        let p = a.matmul(&f.t, UNGROUPED, UNGROUPED);
        for (rows, cols) in [(&nodes, &None), (&None, &runs), (&nodes, &runs)] {
            assert_eq!(to_csr(&a.matmul(&f.t, rows, cols)), to_csr(&p));
        }
        assert!(p.columns_grouped(runs.as_ref().unwrap()));
        let r = p.transpose();
        assert_eq!(to_csr(&p.transpose_grouped(runs.as_ref().unwrap())), to_csr(&r));
        let one = galerkin_product_in_blocks(&r, &a, &p, &None, &None, usize::MAX);
        for budget in [usize::MAX, a.nnz() / 3] {
            for (rows, cols) in [(&nodes, &None), (&None, &runs), (&nodes, &runs)] {
                let g = galerkin_product_in_blocks(&r, &a, &p, rows, cols, budget);
                assert_eq!(to_csr(&g), to_csr(&one), "block budget {budget}");
            }
        }
        assert!(galerkin_blocks(&r, &a, &runs, a.nnz() / 3).len() > 1);
        // A prolongator with one unknown of a group per row is not grouped.
        let uniform =
            tentative_prolongator(&aggregate(&strength(&a, &Layout::Uniform(3), 0.02)), 3);
        let triples = Layout::from_ptr((0..=uniform.n_cols / 3).map(|g| 3 * g).collect());
        assert!(!uniform.columns_grouped(&Runs::of_layout(&triples).unwrap()));
    }

    #[test]
    fn an_owned_matrix_splits_into_the_kept_copy_and_the_dropped_rest() {
        let mut m = laplace_2d(12);
        // numerically zero couplings (symmetric), as a Kuhn mesh's elasticity has
        for i in 0..m.n_rows {
            for k in m.row_ptr[i]..m.row_ptr[i + 1] {
                let j = m.col_idx[k] as usize;
                if j != i && (i + j).is_multiple_of(7) {
                    m.values[k] = 1e-17;
                }
            }
        }
        let (kept, rest) = Csr32::split_owned(m.clone());
        let (copy, dropped) = (Csr32::from_csr(&m, true), Csr32::dropped_of(&m));
        assert!(rest.nnz() > 0 && kept.nnz() + rest.nnz() == m.nnz());
        assert_eq!(to_csr(&kept), to_csr(&copy));
        assert_eq!(to_csr(&rest), to_csr(&dropped));
        assert_eq!(kept.merged(&rest), m);
        // AMG-CG with the matrix handed over solves as with it borrowed, to the bit.
        let b: Vec<f64> = (0..m.n_rows).map(|i| (i as f64 * 0.37).sin()).collect();
        let solve = |owned: bool| {
            let mut s = AmgCgSolver::new("t", AmgParams::default(), CgParams::default());
            if owned { s.factor_owned(m.clone()) } else { s.factor(&m) }.unwrap();
            let mut x = b.clone();
            s.solve_in_place(&mut x).unwrap();
            (x, s.matrix().unwrap())
        };
        let (borrowed, owned) = (solve(false), solve(true));
        assert_eq!(borrowed, owned);
        assert_eq!(owned.1, m);
    }

    #[test]
    fn coarse_spaces_of_the_wrong_shape_are_refused() {
        // P₀ of 4 fine and 2 coarse unknowns (two coarse nodes of one unknown each)
        let p = CsrMatrix {
            n_rows: 4,
            n_cols: 2,
            row_ptr: vec![0, 1, 2, 3, 4],
            col_idx: vec![0, 1, 0, 1],
            values: vec![1.0, 1.0, 0.5, 0.5],
        };
        let one = |n: usize| NearNullspace::new(1, (0..=n).collect(), vec![1.0; n]).unwrap();
        assert!(CoarseSpace::new(&p, one(3)).is_err());
        let mut bad = p.clone();
        bad.values[2] = f64::NAN;
        assert!(CoarseSpace::new(&bad, one(2)).is_err());
        let square = CsrMatrix { n_rows: 2, row_ptr: vec![0, 1, 2], ..p.clone() };
        assert!(CoarseSpace::new(&square, one(2)).is_err());
        // A matrix of another size than P₀'s rows.
        let c = Arc::new(CoarseSpace::new(&p, one(2)).unwrap());
        let a = laplace_2d(3);
        let e = AmgHierarchy::with_coarse_space(&a, &AmgParams::default(), c).unwrap_err();
        assert!(matches!(e, SolverError::InvalidParameter { name: "CoarseSpace", .. }), "{e:?}");
    }

    #[test]
    fn lanczos_estimates_the_spectral_radius() {
        // D⁻¹A of the 1D-like 2D Laplacian: ρ = 1 + cos(π/(n+1)) = ~1.99 for n = 30
        let a = Csr32::from_csr(&laplace_2d(30), false);
        let inv: Vec<f64> = a.diagonal().iter().map(|d| 1.0 / d).collect();
        let rho = spectral_radius(&a, &inv);
        let exact = 1.0 + (std::f64::consts::PI / 31.0).cos();
        assert!(rho <= exact * (1.0 + 1e-12) && rho > 0.9 * exact, "{rho} vs {exact}");
    }

    #[test]
    fn tridiagonal_eigenvalue_by_bisection() {
        // tridiag(−1, 2, −1) of size 4: λ_max = 2 + 2 cos(π/5)
        let l = largest_tridiagonal_eigenvalue(&[2.0; 4], &[-1.0; 3]);
        assert!((l - (2.0 + 2.0 * (std::f64::consts::PI / 5.0).cos())).abs() < 1e-10, "{l}");
    }

    #[test]
    fn aggregation_covers_every_connected_node() {
        let a = Csr32::from_csr(&laplace_2d(20), false);
        let g = aggregate(&strength(&a, &Layout::Uniform(1), 0.0));
        assert!(g.of_node.iter().all(|&x| x != NONE));
        // 2D aggregates have about 3×3 nodes
        assert!(g.count > 400 / 12 && g.count < 400 / 4, "{}", g.count);
    }

    #[test]
    fn fitted_prolongator_reproduces_the_near_nullspace() {
        // 10 nodes of 3 unknowns on a line of points, rigid-body modes, aggregates {0..4},
        // {4..9} and node 9 alone (which cannot carry rotations: 3 unknowns for 6 modes)
        let coords: Vec<[f64; 3]> =
            (0..10).map(|i| [i as f64, (i * i) as f64 * 0.1, (i % 3) as f64]).collect();
        let unknowns: Vec<(usize, usize)> =
            (0..10).flat_map(|n| (0..3).map(move |c| (n, c))).collect();
        let nns = NearNullspace::rigid_body_modes(&coords, &unknowns).unwrap();
        let mut of_node = vec![0u32; 10];
        of_node[4..9].fill(1);
        of_node[9] = 2;
        let aggs = Aggregates { of_node, count: 3 };
        let layout = Layout::from_ptr(nns.node_ptr.clone());
        let f = fit_near_nullspace(&aggs, &layout, &nns.values, 6);
        assert_eq!(f.coarse_ptr, vec![0, 6, 12, 15]);
        // T B_c = B
        for i in 0..30 {
            for j in 0..6 {
                let mut s = 0.0;
                for k in f.t.row_ptr[i]..f.t.row_ptr[i + 1] {
                    s += f.t.val[k] * f.coarse_b[f.t.col[k] as usize * 6 + j];
                }
                assert!((s - nns.values[i * 6 + j]).abs() < 1e-12, "({i}, {j}): {s}");
            }
        }
        // orthonormal columns
        let tt = f.t.transpose().matmul(&f.t, UNGROUPED, UNGROUPED);
        for c in 0..tt.n_rows {
            for k in tt.row_ptr[c]..tt.row_ptr[c + 1] {
                let expect = if tt.col[k] as usize == c { 1.0 } else { 0.0 };
                assert!((tt.val[k] - expect).abs() < 1e-12, "TᵀT({c}, {})", tt.col[k]);
            }
        }
    }

    #[test]
    fn vcycle_is_symmetric() {
        let a = laplace_2d(40);
        for smoother in
            [Smoother::Chebyshev { degree: 3, ratio: 30.0 }, Smoother::SymmetricGaussSeidel]
        {
            let params = AmgParams { coarse_size: 50, smoother, ..Default::default() };
            let h = AmgHierarchy::new(&a, &params).unwrap();
            assert!(h.levels() >= 3);
            let n = a.n_rows;
            let u: Vec<f64> = (0..n).map(|i| (i as f64 * 0.7).sin()).collect();
            let v: Vec<f64> = (0..n).map(|i| (i as f64 * 1.3).cos()).collect();
            let (mut mu, mut mv) = (vec![0.0; n], vec![0.0; n]);
            h.apply(&u, &mut mu);
            h.apply(&v, &mut mv);
            let (uv, vu) = (dot(&v, &mu), dot(&u, &mv));
            assert!((uv - vu).abs() < 1e-10 * uv.abs(), "{smoother:?}: {uv} vs {vu}");
            assert!(dot(&u, &mu) > 0.0);
        }
    }
}
