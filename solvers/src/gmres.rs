//! Non-symmetric systems that are nearly symmetric blocks: restarted GMRES, preconditioned by
//! block Gauss–Seidel over the diagonal blocks, each block's symmetric part factored by
//! Cholesky ([`BlockGmresSolver`]).
//!
//! Finite-element tangents of nonlinear conduction (k(T)) and of coupled fields (the φ ⇄ T
//! Jacobian of electro-thermal problems with ρ(T)) are not symmetric, but their diagonal blocks
//! are dominated by a symmetric positive definite operator and the pattern is structurally
//! symmetric. faer's sparse LU orders columns for the pattern of AᵀA (COLAMD), which on 3-D
//! meshes costs 8–40× a Cholesky factorization of the same size. Factoring only the symmetric
//! parts of the diagonal blocks, with the symmetric orderings of [`CholeskySolver`], and letting
//! GMRES correct for the rest is far cheaper; where a block's symmetric part is not positive
//! definite, or GMRES does not reach its tolerance, the solver falls back to [`LuSolver`] for
//! that matrix and says so in the log.
//!
//! The preconditioner P is block lower triangular: its diagonal blocks are the Cholesky factors
//! of sym(A_bb) = (A_bb + A_bbᵀ)/2, its strictly lower blocks those of A. Transposed solves
//! (adjoints) use Pᵀ, so the strong coupling of a forward sweep (the Joule heat of φ feeding T)
//! is inside the preconditioner both ways. A solve stops when every block's residual is below
//! `rel_tol` times that block's scale ‖b_b‖ + ‖(|A| |x|)_b‖, a normwise backward error per
//! block: fields in different units (volts, kelvin) are each solved to the tolerance.
//!
//! Everything is sequential and in a fixed order, so results do not depend on the thread count.

use crate::error::SolverError;
use crate::linear::{CholeskySolver, LinearSolver, LuSolver, first_non_finite_row, non_finite};
use crate::sparse::CsrMatrix;

/// Settings of [`BlockGmresSolver`].
#[derive(Clone, Copy, Debug)]
pub struct GmresParams {
    /// Per-block normwise backward error at which a solve stops.
    pub rel_tol: f64,
    /// Krylov vectors kept before a restart.
    pub restart: usize,
    /// Iterations (matrix products) allowed per solve before falling back to LU.
    pub max_iterations: usize,
}

impl Default for GmresParams {
    fn default() -> Self {
        GmresParams { rel_tol: 1e-13, restart: 60, max_iterations: 600 }
    }
}

/// One diagonal block: the symmetric part's matrix in the block's own numbering, where each of
/// its entries comes from in `A` (the entry and its transposed twin), and its Cholesky solver.
struct DiagonalBlock {
    start: usize,
    sym: CsrMatrix,
    sources: Vec<(usize, usize)>,
    cholesky: CholeskySolver,
}

/// The structure derived from one pattern of `A` (the pattern of the matrix kept in
/// [`BlockGmresSolver`]).
struct Prepared {
    /// Block boundaries `0 = s_0 < s_1 < … < s_k = n`.
    starts: Vec<usize>,
    blocks: Vec<DiagonalBlock>,
}

/// GMRES preconditioned by Cholesky factors of the diagonal blocks' symmetric parts (module
/// docs); LU when that does not work for a matrix.
pub struct BlockGmresSolver {
    field: String,
    boundaries: Vec<usize>,
    params: GmresParams,
    prepared: Option<Prepared>,
    matrix: Option<CsrMatrix>,
    lu: Option<LuSolver>,
    on_lu: bool,
    last_iterations: Option<usize>,
    fallbacks: usize,
    /// Vectors kept from one solve to the next (the Krylov basis and the work vectors).
    work: GmresWork,
}

/// The vectors of a GMRES solve, kept between solves so that a solve of the same size
/// allocates nothing: the Krylov basis (its first vectors in use), r, z, w, u and the
/// |A||x| of the convergence test.
#[derive(Default)]
struct GmresWork {
    basis: Vec<Vec<f64>>,
    r: Vec<f64>,
    z: Vec<f64>,
    w: Vec<f64>,
    u: Vec<f64>,
    ax: Vec<f64>,
}

impl GmresWork {
    /// Size every work vector for `n` unknowns (values left as they are).
    fn size_for(&mut self, n: usize) {
        for v in [&mut self.r, &mut self.z, &mut self.w, &mut self.u, &mut self.ax] {
            v.resize(n, 0.0);
        }
        for v in &mut self.basis {
            v.resize(n, 0.0);
        }
    }
}

/// Set basis vector k to `v / norm`, growing the basis by one vector when it is shorter.
fn set_basis(basis: &mut Vec<Vec<f64>>, k: usize, v: &[f64], norm: f64) {
    if basis.len() <= k {
        basis.push(vec![0.0; v.len()]);
    }
    for (b, x) in basis[k].iter_mut().zip(v) {
        *b = x / norm;
    }
}

impl BlockGmresSolver {
    /// A solver for the system of `field`; `boundaries` are the first unknowns of the second,
    /// third, … block (empty: the whole matrix is one block).
    pub fn new(field: &str, boundaries: Vec<usize>) -> Self {
        BlockGmresSolver {
            field: field.to_string(),
            boundaries,
            params: GmresParams::default(),
            prepared: None,
            matrix: None,
            lu: None,
            on_lu: false,
            last_iterations: None,
            fallbacks: 0,
            work: GmresWork::default(),
        }
    }

    /// Use `params` from the next solve on.
    pub fn with_params(mut self, params: GmresParams) -> Self {
        self.params = params;
        self
    }

    /// How many matrices or solves went to the LU fallback so far.
    pub fn fallbacks(&self) -> usize {
        self.fallbacks
    }

    /// Whether the current matrix is solved by the LU fallback.
    pub fn on_lu(&self) -> bool {
        self.on_lu
    }

    fn prepare(&self, a: &CsrMatrix) -> Result<Prepared, String> {
        let n = a.n_rows;
        let mut starts = vec![0];
        for &b in &self.boundaries {
            if b > *starts.last().unwrap() && b < n {
                starts.push(b);
            }
        }
        starts.push(n);
        let mut blocks = Vec::with_capacity(starts.len() - 1);
        for w in starts.windows(2) {
            let (s, e) = (w[0], w[1]);
            let mut row_ptr = Vec::with_capacity(e - s + 1);
            let mut col_idx = Vec::new();
            let mut sources = Vec::new();
            row_ptr.push(0);
            for i in s..e {
                let (cols, _) = a.row(i);
                for (k, &j) in cols.iter().enumerate() {
                    let j = j as usize;
                    if j < s || j >= e {
                        continue;
                    }
                    let p = a.row_ptr[i] + k;
                    let twin = a.find(j, i).ok_or_else(|| {
                        format!("entry ({i}, {j}) has no transposed entry (pattern not symmetric)")
                    })?;
                    col_idx.push((j - s) as u32);
                    sources.push((p, twin));
                }
                row_ptr.push(col_idx.len());
            }
            let sym = CsrMatrix::zeros(e - s, e - s, row_ptr, col_idx);
            let cholesky = CholeskySolver::new(&self.field);
            blocks.push(DiagonalBlock { start: s, sym, sources, cholesky });
        }
        Ok(Prepared { starts, blocks })
    }

    fn switch_to_lu(&mut self, a: &CsrMatrix, why: &str) -> Result<(), SolverError> {
        tracing::info!(field = %self.field, "GMRES preconditioner not usable ({why}); LU for this matrix");
        self.fallbacks += 1;
        self.on_lu = true;
        self.lu.get_or_insert_with(|| LuSolver::new(&self.field)).factor(a)
    }

    /// z = P⁻¹ r (or P⁻ᵀ r).
    fn precondition(
        &mut self,
        r: &[f64],
        z: &mut [f64],
        transpose: bool,
    ) -> Result<(), SolverError> {
        let a = self.matrix.as_ref().expect("factored");
        let prep = self.prepared.as_mut().expect("prepared");
        let nb = prep.blocks.len();
        z.copy_from_slice(r);
        if !transpose {
            for b in 0..nb {
                let (s, e) = (prep.starts[b], prep.starts[b + 1]);
                for i in s..e {
                    let (cols, vals) = a.row(i);
                    let mut acc = 0.0;
                    for (&j, &v) in cols.iter().zip(vals) {
                        if (j as usize) < s {
                            acc += v * z[j as usize];
                        }
                    }
                    z[i] -= acc;
                }
                prep.blocks[b].cholesky.solve_in_place(&mut z[s..e])?;
            }
        } else {
            for b in (0..nb).rev() {
                let (s, e) = (prep.starts[b], prep.starts[b + 1]);
                prep.blocks[b].cholesky.solve_in_place(&mut z[s..e])?;
                for i in s..e {
                    let zi = z[i];
                    let (cols, vals) = a.row(i);
                    for (&j, &v) in cols.iter().zip(vals) {
                        if (j as usize) < s {
                            z[j as usize] -= v * zi;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// y = op(A) x: A x, or Aᵀ x for a transposed solve.
    fn apply(&self, x: &[f64], y: &mut [f64], transpose: bool) {
        let a = self.matrix.as_ref().expect("factored");
        if transpose {
            a.mul_transpose_vec_into(x, y);
        } else {
            a.mul_vec_into(x, y);
        }
    }

    /// Whether every block of `r = b − op(A) x` is below the tolerance (module docs); also
    /// returns the largest block ratio.
    fn converged(
        &self,
        b: &[f64],
        x: &[f64],
        r: &[f64],
        transpose: bool,
        tol: f64,
        ax: &mut [f64],
    ) -> (bool, f64) {
        let a = self.matrix.as_ref().expect("factored");
        let n = a.n_rows;
        ax.fill(0.0);
        for i in 0..n {
            let (cols, vals) = a.row(i);
            if transpose {
                let xi = x[i].abs();
                for (&j, &v) in cols.iter().zip(vals) {
                    ax[j as usize] += v.abs() * xi;
                }
            } else {
                ax[i] = cols.iter().zip(vals).map(|(&j, &v)| v.abs() * x[j as usize].abs()).sum();
            }
        }
        let starts = &self.prepared.as_ref().expect("prepared").starts;
        let mut worst: f64 = 0.0;
        for w in starts.windows(2) {
            let norm = |v: &[f64]| v[w[0]..w[1]].iter().map(|t| t * t).sum::<f64>().sqrt();
            let scale = norm(b) + norm(ax);
            let rn = norm(r);
            let ratio = if scale > 0.0 {
                rn / scale
            } else if rn == 0.0 {
                0.0
            } else {
                f64::INFINITY
            };
            worst = worst.max(ratio);
        }
        (worst <= tol, worst)
    }

    /// Restarted right-preconditioned GMRES for op(A) x = b from x = 0 (modified Gram–Schmidt
    /// with one reorthogonalization). Returns the solution, the iterations and whether it
    /// reached the tolerance.
    fn gmres(
        &mut self,
        b: &[f64],
        transpose: bool,
    ) -> Result<(Vec<f64>, usize, bool), SolverError> {
        let mut work = std::mem::take(&mut self.work);
        work.size_for(b.len());
        let out = self.gmres_in(&mut work, b, transpose);
        self.work = work;
        out
    }

    /// [`Self::gmres`] on the kept work vectors.
    fn gmres_in(
        &mut self,
        ws: &mut GmresWork,
        b: &[f64],
        transpose: bool,
    ) -> Result<(Vec<f64>, usize, bool), SolverError> {
        let n = b.len();
        let m = self.params.restart.max(1);
        let tol = self.params.rel_tol;
        let mut x = vec![0.0; n];
        let bnorm = dot(b, b).sqrt();
        if bnorm == 0.0 {
            return Ok((x, 0, true));
        }
        ws.r.copy_from_slice(b);
        let mut beta = bnorm;
        let mut total = 0;
        let mut h = vec![vec![0.0; m]; m + 1];
        let mut cs = vec![0.0; m];
        let mut sn = vec![0.0; m];
        let mut g = vec![0.0; m + 1];
        let mut last_cycle_beta = f64::INFINITY;
        loop {
            set_basis(&mut ws.basis, 0, &ws.r, beta);
            g.iter_mut().for_each(|v| *v = 0.0);
            g[0] = beta;
            // Stop the Arnoldi process well below the tolerance of the whole vector; the
            // per-block test after the cycle decides.
            let inner = if beta > tol * bnorm { 0.1 * tol * bnorm } else { 1e-4 * beta };
            let mut k = 0;
            while k < m && total < self.params.max_iterations {
                self.precondition(&ws.basis[k], &mut ws.z, transpose)?;
                self.apply(&ws.z, &mut ws.w, transpose);
                for col in h.iter_mut() {
                    col[k] = 0.0;
                }
                for _pass in 0..2 {
                    for (i, v) in ws.basis[..=k].iter().enumerate() {
                        let c = dot(&ws.w, v);
                        h[i][k] += c;
                        axpy(-c, v, &mut ws.w);
                    }
                }
                let norm = dot(&ws.w, &ws.w).sqrt();
                h[k + 1][k] = norm;
                for i in 0..k {
                    let t = cs[i] * h[i][k] + sn[i] * h[i + 1][k];
                    h[i + 1][k] = -sn[i] * h[i][k] + cs[i] * h[i + 1][k];
                    h[i][k] = t;
                }
                let rho = h[k][k].hypot(h[k + 1][k]);
                if rho == 0.0 {
                    break;
                }
                cs[k] = h[k][k] / rho;
                sn[k] = h[k + 1][k] / rho;
                h[k][k] = rho;
                h[k + 1][k] = 0.0;
                g[k + 1] = -sn[k] * g[k];
                g[k] *= cs[k];
                total += 1;
                k += 1;
                if g[k].abs() <= inner || norm == 0.0 {
                    break;
                }
                set_basis(&mut ws.basis, k, &ws.w, norm);
            }
            // y = H⁻¹ g, u = V y, x += P⁻¹ u.
            let mut y = vec![0.0; k];
            for i in (0..k).rev() {
                let mut s = g[i];
                for j in i + 1..k {
                    s -= h[i][j] * y[j];
                }
                y[i] = s / h[i][i];
            }
            ws.u.fill(0.0);
            for (yi, v) in y.iter().zip(&ws.basis) {
                axpy(*yi, v, &mut ws.u);
            }
            self.precondition(&ws.u, &mut ws.z, transpose)?;
            axpy(1.0, &ws.z, &mut x);
            // The true residual.
            self.apply(&x, &mut ws.w, transpose);
            for i in 0..n {
                ws.r[i] = b[i] - ws.w[i];
            }
            let (done, _) = self.converged(b, &x, &ws.r, transpose, tol, &mut ws.ax);
            if done {
                return Ok((x, total, true));
            }
            beta = dot(&ws.r, &ws.r).sqrt();
            let stalled = beta > 0.5 * last_cycle_beta;
            last_cycle_beta = beta;
            if total >= self.params.max_iterations || stalled || !beta.is_finite() || beta == 0.0 {
                return Ok((x, total, false));
            }
        }
    }

    fn solve(&mut self, b: &mut [f64], transpose: bool) -> Result<(), SolverError> {
        if self.on_lu {
            let lu = self.lu.as_mut().expect("factored");
            return if transpose { lu.solve_transpose_in_place(b) } else { lu.solve_in_place(b) };
        }
        let (x, iterations, converged) = self.gmres(b, transpose)?;
        self.last_iterations = Some(iterations);
        tracing::debug!(field = %self.field, iterations, converged, transpose, "GMRES solve");
        if converged {
            b.copy_from_slice(&x);
            return Ok(());
        }
        let a = self.matrix.take().expect("factored");
        let result = self.switch_to_lu(&a, &format!("GMRES stopped after {iterations} iterations"));
        self.matrix = Some(a);
        result?;
        let lu = self.lu.as_mut().expect("factored");
        if transpose { lu.solve_transpose_in_place(b) } else { lu.solve_in_place(b) }
    }
}

impl LinearSolver for BlockGmresSolver {
    fn factor(&mut self, a: &CsrMatrix) -> Result<(), SolverError> {
        assert_eq!(a.n_rows, a.n_cols, "GMRES needs a square matrix");
        self.on_lu = false;
        self.last_iterations = None;
        // Before any state changes: `prepared` belongs to the pattern of the kept `matrix`.
        if let Some(row) = first_non_finite_row(a) {
            return Err(non_finite(&self.field, "matrix", row));
        }
        let same_pattern = self.prepared.is_some()
            && self
                .matrix
                .as_ref()
                .is_some_and(|m| m.row_ptr == a.row_ptr && m.col_idx == a.col_idx);
        if !same_pattern {
            match self.prepare(a) {
                Ok(p) => self.prepared = Some(p),
                Err(why) => {
                    self.prepared = None;
                    self.matrix = None;
                    return self.switch_to_lu(a, &why);
                }
            }
        }
        let prep = self.prepared.as_mut().expect("prepared");
        let mut failure = None;
        for block in prep.blocks.iter_mut() {
            for (v, &(p, q)) in block.sym.values.iter_mut().zip(&block.sources) {
                *v = 0.5 * (a.values[p] + a.values[q]);
            }
            if let Err(e) = block.cholesky.factor(&block.sym) {
                failure = Some(format!("block at unknown {}: {e}", block.start));
                break;
            }
        }
        match &mut self.matrix {
            Some(m) if m.row_ptr == a.row_ptr && m.col_idx == a.col_idx => {
                m.values.copy_from_slice(&a.values)
            }
            slot => *slot = Some(a.clone()),
        }
        match failure {
            Some(why) => self.switch_to_lu(a, &why),
            None => Ok(()),
        }
    }

    fn solve_in_place(&mut self, b: &mut [f64]) -> Result<(), SolverError> {
        self.solve(b, false)
    }

    fn solve_transpose_in_place(&mut self, b: &mut [f64]) -> Result<(), SolverError> {
        self.solve(b, true)
    }

    fn name(&self) -> &'static str {
        if self.on_lu { "lu" } else { "gmres" }
    }

    fn last_iterations(&self) -> Option<usize> {
        self.last_iterations
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn axpy(alpha: f64, x: &[f64], y: &mut [f64]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_matrices::{csr, grid_system};
    use rstest::rstest;

    /// Two coupled grid fields in different units: block 1 a Laplacian with a convection-like
    /// skew part, block 2 `scale` times another, coupled one way strongly (`lower`) and back
    /// weakly (`upper`), the ρ(T)-cycle's shape.
    fn coupled(m: usize, skew: f64, scale: f64, lower: f64, upper: f64) -> CsrMatrix {
        let g = grid_system(m, &[&[1.0]], 0.1);
        let n = g.n_rows;
        let mut rows: Vec<Vec<(usize, f64)>> = vec![Vec::new(); 2 * n];
        for i in 0..n {
            let (cols, vals) = g.row(i);
            for (&j, &v) in cols.iter().zip(vals) {
                let j = j as usize;
                let s = if j > i {
                    skew
                } else if j < i {
                    -skew
                } else {
                    0.0
                };
                rows[i].push((j, v + s));
                rows[n + i].push((n + j, scale * (v - 0.5 * s)));
                rows[n + i].push((j, lower * v));
                rows[i].push((n + j, upper * v));
            }
        }
        csr(rows)
    }

    fn lu_solution(a: &CsrMatrix, b: &[f64], transpose: bool) -> Vec<f64> {
        let mut lu = LuSolver::new("reference");
        lu.factor(a).unwrap();
        let mut x = b.to_vec();
        if transpose {
            lu.solve_transpose_in_place(&mut x).unwrap();
        } else {
            lu.solve_in_place(&mut x).unwrap();
        }
        x
    }

    fn rhs(n: usize) -> Vec<f64> {
        (0..n)
            .map(|i| ((i * 37 % 101) as f64 / 101.0 - 0.3) * if i < n / 2 { 1e-3 } else { 1.0 })
            .collect()
    }

    /// Largest relative error per block (the blocks are in different units).
    fn block_error(x: &[f64], reference: &[f64], split: usize) -> f64 {
        [0..split, split..x.len()]
            .into_iter()
            .map(|r| {
                let d: f64 = r.clone().map(|i| (x[i] - reference[i]).powi(2)).sum::<f64>().sqrt();
                let s: f64 = r.map(|i| reference[i].powi(2)).sum::<f64>().sqrt();
                d / s
            })
            .fold(0.0, f64::max)
    }

    #[rstest]
    #[case::symmetric_blocks(0.0, 1.0)]
    #[case::skew_blocks(0.4, 1.0)]
    #[case::fields_in_different_units(0.4, 1e6)]
    fn agrees_with_lu_both_ways(#[case] skew: f64, #[case] scale: f64) {
        let a = coupled(8, skew, scale, -0.8, 0.05);
        let n = a.n_rows;
        let mut s = BlockGmresSolver::new("coupled", vec![n / 2]);
        s.factor(&a).unwrap();
        for transpose in [false, true] {
            let b = rhs(n);
            let mut x = b.clone();
            if transpose {
                s.solve_transpose_in_place(&mut x).unwrap();
            } else {
                s.solve_in_place(&mut x).unwrap();
            }
            let err = block_error(&x, &lu_solution(&a, &b, transpose), n / 2);
            assert!(err < 1e-10, "transpose {transpose}: relative error {err:e}");
            let it = s.last_iterations().unwrap();
            assert!(it <= 40, "transpose {transpose}: {it} iterations");
        }
        assert!(!s.on_lu());
        assert_eq!(s.fallbacks(), 0);
        assert_eq!(s.name(), "gmres");
    }

    #[test]
    fn a_new_matrix_of_the_same_pattern_is_solved_with_its_own_values() {
        let mut a = coupled(6, 0.3, 1.0, -0.5, 0.1);
        let n = a.n_rows;
        let mut s = BlockGmresSolver::new("coupled", vec![n / 2]);
        s.factor(&a).unwrap();
        let mut first = rhs(n);
        s.solve_in_place(&mut first).unwrap();
        for v in a.values.iter_mut() {
            *v *= 2.0;
        }
        s.factor(&a).unwrap();
        let mut second = rhs(n);
        s.solve_in_place(&mut second).unwrap();
        for (p, q) in first.iter().zip(&second) {
            assert!((p - 2.0 * q).abs() <= 1e-9 * p.abs().max(1e-12), "{p} vs 2·{q}");
        }
    }

    #[test]
    fn an_indefinite_symmetric_part_falls_back_to_lu() {
        // Block 2's symmetric part is negative definite: no Cholesky factor.
        let a = coupled(5, 0.2, -1.0, -0.5, 0.1);
        let n = a.n_rows;
        let mut s = BlockGmresSolver::new("coupled", vec![n / 2]);
        s.factor(&a).unwrap();
        assert!(s.on_lu());
        assert_eq!(s.fallbacks(), 1);
        assert_eq!(s.name(), "lu");
        let b = rhs(n);
        let mut x = b.clone();
        s.solve_in_place(&mut x).unwrap();
        assert!(block_error(&x, &lu_solution(&a, &b, false), n / 2) < 1e-12);
    }

    #[test]
    fn a_pattern_that_is_not_symmetric_falls_back_to_lu() {
        let a = csr(vec![vec![(0, 2.0), (1, 1.0)], vec![(1, 3.0)]]);
        let mut s = BlockGmresSolver::new("t", Vec::new());
        s.factor(&a).unwrap();
        assert!(s.on_lu());
        let mut x = vec![3.0, 3.0];
        s.solve_in_place(&mut x).unwrap();
        assert!((x[0] - 1.0).abs() < 1e-14 && (x[1] - 1.0).abs() < 1e-14, "{x:?}");
    }

    #[test]
    fn gmres_that_cannot_reach_the_tolerance_hands_the_solve_to_lu() {
        // Strong two-way coupling and two iterations: GMRES stops short, LU answers.
        let a = coupled(6, 0.4, 1.0, -0.9, 0.9);
        let n = a.n_rows;
        let params = GmresParams { max_iterations: 2, ..Default::default() };
        let mut s = BlockGmresSolver::new("coupled", vec![n / 2]).with_params(params);
        s.factor(&a).unwrap();
        let b = rhs(n);
        let mut x = b.clone();
        s.solve_in_place(&mut x).unwrap();
        assert!(s.on_lu());
        assert_eq!(s.fallbacks(), 1);
        assert!(block_error(&x, &lu_solution(&a, &b, false), n / 2) < 1e-12);
        // The next matrix tries GMRES again.
        s.factor(&a).unwrap();
        assert!(!s.on_lu());
    }

    #[test]
    fn a_zero_right_hand_side_gives_zero_and_a_nan_matrix_is_located() {
        let mut a = coupled(4, 0.1, 1.0, -0.5, 0.1);
        let n = a.n_rows;
        let mut s = BlockGmresSolver::new("coupled", vec![n / 2]);
        s.factor(&a).unwrap();
        let mut x = vec![0.0; n];
        s.solve_in_place(&mut x).unwrap();
        assert!(x.iter().all(|&v| v == 0.0));
        let k = a.row_ptr[n / 2 + 3];
        a.values[k] = f64::NAN;
        match s.factor(&a).unwrap_err() {
            SolverError::NonFinite { dof, quantity, .. } => {
                assert_eq!((dof, quantity), (n / 2 + 3, "matrix"));
            }
            other => panic!("{other:?}"),
        }
    }
}
