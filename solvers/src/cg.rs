//! Preconditioned conjugate gradients for symmetric positive definite systems, and the
//! parallel, deterministic vector kernels it runs on.
//!
//! The algorithm is the classical PCG of Hestenes–Stiefel with a symmetric positive definite
//! preconditioner M ≈ A⁻¹:
//!
//! ```text
//! r₀ = b − A x₀,  z₀ = M r₀,  p₀ = z₀
//! αₖ = (rₖ·zₖ) / (pₖ·A pₖ),  xₖ₊₁ = xₖ + αₖ pₖ,  rₖ₊₁ = rₖ − αₖ A pₖ
//! zₖ₊₁ = M rₖ₊₁,  βₖ = (rₖ₊₁·zₖ₊₁) / (rₖ·zₖ),  pₖ₊₁ = zₖ₊₁ + βₖ pₖ
//! ```
//!
//! stopped when ‖rₖ‖₂ ≤ max(rel_tol ‖b‖₂, abs_tol). On convergence the true residual b − A x is
//! recomputed once; if round-off made it drift above the tolerance, the iteration restarts from
//! the current x (residual replacement), so the reported convergence is that of the true residual.
//! Where the tolerance lies below what double precision can resolve (‖b − A x‖ cannot be computed
//! more accurately than about ε ‖A‖ ‖x‖, which on a slender cantilever of 10⁵ unknowns reached
//! 1.2·10⁻¹⁰ ‖b‖), the true residual stops decreasing from one restart to the next; a true
//! residual that did not halve over a restart cycle and lies within [`ATTAINABLE_FACTOR`] of the
//! tolerance is then accepted as converged (logged as a warning) instead of restarting forever.
//!
//! faer has a CG (`faer::matrix_free::conjugate_gradient`), but it works on its own operator and
//! preconditioner traits with stack-allocated workspaces and does not expose per-iteration
//! residuals in the form the callers here want; this solver is small, and owning it lets the
//! AMG V-cycle plug in without adapters.
//!
//! Every reduction (dot products, norms) is summed over fixed-size chunks whose partial sums are
//! added in chunk order, so results are bit-identical whatever the number of rayon threads.

use rayon::prelude::*;

use crate::sparse::CsrMatrix;

/// Rows per parallel task in the vector kernels. Fixed (not derived from the thread count) so
/// that reductions are deterministic.
pub(crate) const CHUNK: usize = 4096;

/// Below this many entries the kernels run sequentially: rayon's fork/join costs a few µs.
pub(crate) const PAR_MIN: usize = 20_000;

/// A true residual that stagnated across a restart is accepted as converged when it is at most
/// this many times the tolerance (see the module docs): the limit of attainable accuracy.
pub const ATTAINABLE_FACTOR: f64 = 100.0;

/// Parameters of [`pcg`].
#[derive(Clone, Debug, PartialEq)]
pub struct CgParams {
    /// Stop when ‖r‖₂ ≤ `rel_tol` · ‖b‖₂ (default 1e-10).
    pub rel_tol: f64,
    /// … or when ‖r‖₂ ≤ `abs_tol` (default 0: only the relative test).
    pub abs_tol: f64,
    /// Give up after this many iterations (default 1000).
    pub max_iterations: usize,
}

impl Default for CgParams {
    fn default() -> Self {
        CgParams { rel_tol: 1e-10, abs_tol: 0.0, max_iterations: 1000 }
    }
}

/// Why [`pcg`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgStop {
    /// ‖r‖ reached the tolerance.
    Converged,
    /// `max_iterations` were done without reaching the tolerance.
    MaxIterations,
    /// pᵀAp ≤ 0 was met: A is not positive definite (or is singular on the Krylov space).
    IndefiniteOperator,
    /// rᵀMr ≤ 0 was met: the preconditioner is not positive definite.
    IndefinitePreconditioner,
    /// A NaN or infinity appeared in a residual or inner product.
    NonFinite,
    /// The caller's `give_up` test of [`pcg_until`] stopped the iteration.
    Abandoned,
}

/// What [`pcg`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct CgInfo {
    /// Iterations done (matrix-vector products with A, not counting the initial residual).
    pub iterations: usize,
    /// ‖rₖ‖₂ (absolute, unpreconditioned) for k = 0 ..= iterations.
    pub residual_history: Vec<f64>,
    /// Whether ‖r‖ reached max(rel_tol ‖b‖, abs_tol) (checked on the true residual b − A x).
    pub converged: bool,
    /// Why the iteration stopped.
    pub stop: CgStop,
    /// ‖b‖₂, the reference of the relative tolerance.
    pub rhs_norm: f64,
}

impl CgInfo {
    /// The final ‖r‖₂ / ‖b‖₂ (the final ‖r‖₂ when b = 0).
    pub fn relative_residual(&self) -> f64 {
        let r = self.residual_history.last().copied().unwrap_or(0.0);
        if self.rhs_norm > 0.0 { r / self.rhs_norm } else { r }
    }
}

/// A symmetric positive definite approximation M ≈ A⁻¹: z = M r.
pub trait Preconditioner: Send + Sync {
    /// z = M r (`z` is overwritten; its incoming content is ignored).
    fn apply(&self, r: &[f64], z: &mut [f64]);
}

/// The identity, M = I (plain CG).
#[derive(Clone, Copy, Debug, Default)]
pub struct IdentityPreconditioner;

impl Preconditioner for IdentityPreconditioner {
    fn apply(&self, r: &[f64], z: &mut [f64]) {
        z.copy_from_slice(r);
    }
}

/// Jacobi (diagonal) preconditioner, M = D⁻¹ with D = diag(A).
#[derive(Clone, Debug)]
pub struct JacobiPreconditioner {
    inv_diag: Vec<f64>,
}

impl JacobiPreconditioner {
    /// M = diag(A)⁻¹. Rows whose diagonal is zero or missing get weight 1 (CG will then report
    /// the indefiniteness it meets rather than dividing by zero here).
    pub fn new(a: &CsrMatrix) -> Self {
        let inv_diag = a.diagonal().iter().map(|&d| if d != 0.0 { 1.0 / d } else { 1.0 }).collect();
        JacobiPreconditioner { inv_diag }
    }
}

impl Preconditioner for JacobiPreconditioner {
    fn apply(&self, r: &[f64], z: &mut [f64]) {
        assert_eq!(
            r.len(),
            self.inv_diag.len(),
            "r has {} entries for {} rows",
            r.len(),
            self.inv_diag.len()
        );
        for ((zi, ri), di) in z.iter_mut().zip(r).zip(&self.inv_diag) {
            *zi = ri * di;
        }
    }
}

/// y = A x, in parallel over chunks of rows; each row is summed sequentially in column order,
/// so the result does not depend on the number of threads.
pub fn par_spmv(a: &CsrMatrix, x: &[f64], y: &mut [f64]) {
    assert_eq!(x.len(), a.n_cols, "x has {} entries for {} columns", x.len(), a.n_cols);
    assert_eq!(y.len(), a.n_rows, "y has {} entries for {} rows", y.len(), a.n_rows);
    let rows = |start: usize, ys: &mut [f64]| {
        for (k, yi) in ys.iter_mut().enumerate() {
            let i = start + k;
            let r = a.row_ptr[i]..a.row_ptr[i + 1];
            let mut s = 0.0;
            for (&j, &v) in a.col_idx[r.clone()].iter().zip(&a.values[r]) {
                s += v * x[j as usize];
            }
            *yi = s;
        }
    };
    if a.nnz() < PAR_MIN {
        rows(0, y);
    } else {
        y.par_chunks_mut(CHUNK).enumerate().for_each(|(c, ys)| rows(c * CHUNK, ys));
    }
}

/// x · y, deterministic (chunked partial sums added in order).
pub fn par_dot(x: &[f64], y: &[f64]) -> f64 {
    assert_eq!(x.len(), y.len(), "dot of vectors of lengths {} and {}", x.len(), y.len());
    let local = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
    if x.len() < PAR_MIN {
        return x.chunks(CHUNK).zip(y.chunks(CHUNK)).map(|(a, b)| local(a, b)).sum();
    }
    let partial: Vec<f64> =
        x.par_chunks(CHUNK).zip(y.par_chunks(CHUNK)).map(|(a, b)| local(a, b)).collect();
    partial.iter().sum()
}

/// Solves A x = b by preconditioned CG, starting from the guess held in `x`.
///
/// Returns the [`CgInfo`] whether or not the tolerance was reached: `info.converged` and
/// `info.stop` say how it ended, and the caller decides whether that is an error
/// ([`crate::amg::AmgCgSolver`] turns it into `SolverError::IterativeNoConvergence`). `x` then
/// holds the last iterate. This function never panics on bad numbers (an indefinite A or M, NaN);
/// it panics only on mismatched sizes.
pub fn pcg(
    a: &CsrMatrix,
    b: &[f64],
    x: &mut [f64],
    m: &dyn Preconditioner,
    params: &CgParams,
) -> CgInfo {
    pcg_until(a, b, x, m, params, &|_| false)
}

/// [`pcg`] that also stops, with [`CgStop::Abandoned`], as soon as `give_up` returns true.
/// `give_up` is asked after every iteration with the residual history ‖r₀‖, …, ‖rₖ‖ (as in
/// [`CgInfo::residual_history`]); a caller with a cheaper alternative (a fresh factorization)
/// uses it to stop an iteration that converges too slowly to be worth finishing.
pub fn pcg_until(
    a: &CsrMatrix,
    b: &[f64],
    x: &mut [f64],
    m: &dyn Preconditioner,
    params: &CgParams,
    give_up: &dyn Fn(&[f64]) -> bool,
) -> CgInfo {
    assert_eq!(a.n_rows, a.n_cols, "CG needs a square matrix, got {}×{}", a.n_rows, a.n_cols);
    let hooks = CgHooks { record: None, give_up: Some(give_up) };
    pcg_with(&|v: &[f64], y: &mut [f64]| par_spmv(a, v, y), None, b, x, m, params, hooks)
}

/// A test on the residual history ‖r₀‖, …, ‖rₖ‖ that stops CG when it returns true.
pub(crate) type GiveUp<'a> = &'a dyn Fn(&[f64]) -> bool;

/// Optional observers of [`pcg_with`]'s iteration.
#[derive(Default)]
pub(crate) struct CgHooks<'a> {
    /// Keep the search directions (see [`ConjugateDirections`]).
    pub(crate) record: Option<&'a mut ConjugateDirections>,
    /// Stop with [`CgStop::Abandoned`] when this returns true (see [`pcg_until`]).
    pub(crate) give_up: Option<GiveUp<'a>>,
}

/// Search directions kept from one CG solve, to start later solves with the same matrix.
///
/// CG's search directions p₀, p₁, … are A-conjugate (pᵢᵀ A pⱼ = 0 for i ≠ j), so for a new
/// right-hand side b the A-norm best approximation of A⁻¹ b in their span is
///
/// ```text
/// x₀ = Σₖ pₖ (pₖ · b) / (pₖᵀ A pₖ)
/// ```
///
/// (the Galerkin projection; no matrix product and no small system to solve). The adjoint of a
/// linear field solves with the matrix of its forward solve, and its right-hand side (∂J/∂T) is
/// built from the forward solution, whose smooth components the forward Krylov space has already
/// resolved; starting there saves CG iterations. Conjugacy holds to round-off over the few tens
/// of iterations an AMG-preconditioned CG takes; where it is lost, x₀ is merely a worse guess and
/// the CG that follows still converges to its tolerance on the true residual.
///
/// This is the "initial guess" flavour of Krylov-subspace recycling (no deflation of later
/// iterations), written here because it needs the directions from inside [`pcg`]'s loop.
#[derive(Clone, Debug, Default)]
pub struct ConjugateDirections {
    /// Keep at most this many directions.
    capacity: usize,
    /// The first `len` entries are the kept pₖ (buffers beyond are reused allocations).
    directions: Vec<Vec<f64>>,
    /// pₖᵀ A pₖ.
    curvatures: Vec<f64>,
    len: usize,
}

impl ConjugateDirections {
    /// An empty set that will keep up to `capacity` directions.
    pub fn new(capacity: usize) -> Self {
        ConjugateDirections { capacity, ..Default::default() }
    }

    /// The number of kept directions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no direction is kept.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most directions kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forget the directions (the matrix changed); the buffers are kept for reuse.
    pub fn clear(&mut self) {
        self.len = 0;
        self.curvatures.clear();
    }

    /// Keep `p` with curvature `pap` = pᵀ A p, unless full.
    fn push(&mut self, p: &[f64], pap: f64) {
        if self.len >= self.capacity {
            return;
        }
        if self.directions.len() == self.len {
            self.directions.push(p.to_vec());
        } else {
            let d = &mut self.directions[self.len];
            d.clear();
            d.extend_from_slice(p);
        }
        self.curvatures.push(pap);
        self.len += 1;
    }

    /// x = Σₖ pₖ (pₖ · b) / (pₖᵀ A pₖ) (x is overwritten). Deterministic: the dot products are
    /// summed over fixed chunks in chunk order, whatever the number of threads.
    pub fn initial_guess(&self, b: &[f64], x: &mut [f64]) {
        let m = self.len;
        let dirs = &self.directions[..m];
        for d in dirs {
            assert_eq!(d.len(), b.len(), "direction of {} entries for {}", d.len(), b.len());
        }
        assert_eq!(x.len(), b.len(), "x has {} entries for {}", x.len(), b.len());
        // pₖ · b / pₖᵀApₖ, each dot product deterministic (par_dot).
        let coef: Vec<f64> =
            dirs.iter().zip(&self.curvatures).map(|(d, &c)| par_dot(d, b) / c).collect();
        let combine = |c: usize, xc: &mut [f64]| {
            let range = c * CHUNK..c * CHUNK + xc.len();
            xc.fill(0.0);
            for (d, &ck) in dirs.iter().zip(&coef) {
                for (xi, pi) in xc.iter_mut().zip(&d[range.clone()]) {
                    *xi += ck * pi;
                }
            }
        };
        if x.len() < PAR_MIN {
            x.chunks_mut(CHUNK).enumerate().for_each(|(c, xc)| combine(c, xc));
        } else {
            x.par_chunks_mut(CHUNK).enumerate().for_each(|(c, xc)| combine(c, xc));
        }
    }
}

/// A matrix-vector product y = A v.
pub(crate) type Operator<'a> = &'a (dyn Fn(&[f64], &mut [f64]) + Sync);

/// [`pcg`] with the operator given as a closure y = A v (used by the AMG solver, which keeps
/// its own compact copy of A).
///
/// With `exact` given, `apply_a` may be a cheaper approximation of A (the AMG's copy without
/// its numerically zero entries): convergence is always confirmed with `exact`, and if that
/// check fails the iteration restarts and continues with `exact` alone.
pub(crate) fn pcg_with(
    apply_a: Operator<'_>,
    exact: Option<Operator<'_>>,
    b: &[f64],
    x: &mut [f64],
    m: &dyn Preconditioner,
    params: &CgParams,
    hooks: CgHooks<'_>,
) -> CgInfo {
    let CgHooks { mut record, give_up } = hooks;
    let n = b.len();
    assert_eq!(x.len(), n, "x has {} entries for a right-hand side of {n}", x.len());
    let rhs_norm = par_dot(b, b).sqrt();
    let tol = (params.rel_tol * rhs_norm).max(params.abs_tol);
    let mut info = CgInfo {
        iterations: 0,
        residual_history: Vec::new(),
        converged: false,
        stop: CgStop::MaxIterations,
        rhs_norm,
    };
    let mut r = vec![0.0; n];
    let mut z = vec![0.0; n];
    let mut p = vec![0.0; n];
    let mut q = vec![0.0; n];

    let mut op = apply_a;
    let check = exact.unwrap_or(apply_a);
    // The true residual at the last failed convergence check (a restart).
    let mut last_true = f64::INFINITY;
    // r = b − A x; restarted here on residual replacement.
    'restart: loop {
        let apply_a = op;
        apply_a(x, &mut q);
        zip_map(&mut r, b, &q, |bi, qi| bi - qi);
        let mut rnorm = par_dot(&r, &r).sqrt();
        if info.residual_history.is_empty() {
            info.residual_history.push(rnorm);
        } else {
            *info.residual_history.last_mut().unwrap() = rnorm;
        }
        if !rnorm.is_finite() {
            info.stop = CgStop::NonFinite;
            return info;
        }
        if rnorm <= tol {
            info.converged = true;
            info.stop = CgStop::Converged;
            return info;
        }
        m.apply(&r, &mut z);
        p.copy_from_slice(&z);
        let mut rz = par_dot(&r, &z);
        loop {
            if !rz.is_finite() {
                info.stop = CgStop::NonFinite;
                return info;
            }
            if rz <= 0.0 {
                info.stop = CgStop::IndefinitePreconditioner;
                return info;
            }
            if info.iterations >= params.max_iterations {
                info.stop = CgStop::MaxIterations;
                return info;
            }
            apply_a(&p, &mut q);
            let pq = par_dot(&p, &q);
            if !pq.is_finite() {
                info.stop = CgStop::NonFinite;
                return info;
            }
            if pq <= 0.0 {
                info.stop = CgStop::IndefiniteOperator;
                return info;
            }
            if let Some(rec) = record.as_deref_mut() {
                rec.push(&p, pq);
            }
            let alpha = rz / pq;
            axpy2(x, &mut r, &p, &q, alpha);
            rnorm = par_dot(&r, &r).sqrt();
            info.iterations += 1;
            info.residual_history.push(rnorm);
            if !rnorm.is_finite() {
                info.stop = CgStop::NonFinite;
                return info;
            }
            if rnorm <= tol {
                // Check the true residual once; restart if the recurrence drifted.
                check(x, &mut q);
                let true_norm = {
                    let mut t = std::mem::take(&mut z);
                    zip_map(&mut t, b, &q, |bi, qi| bi - qi);
                    let s = par_dot(&t, &t).sqrt();
                    z = t;
                    s
                };
                *info.residual_history.last_mut().unwrap() = true_norm;
                if true_norm <= tol {
                    info.converged = true;
                    info.stop = CgStop::Converged;
                    return info;
                }
                if true_norm > 0.5 * last_true && true_norm <= ATTAINABLE_FACTOR * tol {
                    tracing::warn!(
                        iteration = info.iterations,
                        true_residual = true_norm,
                        tolerance = tol,
                        "CG: the true residual stagnated above the tolerance, at the limit of \
                         attainable accuracy; accepted"
                    );
                    info.converged = true;
                    info.stop = CgStop::Converged;
                    return info;
                }
                last_true = true_norm;
                tracing::debug!(
                    iteration = info.iterations,
                    recursive = rnorm,
                    true_residual = true_norm,
                    "CG residual drifted; restarting from the current iterate"
                );
                op = check;
                // Directions after a restart are not conjugate to those before it.
                record = None;
                continue 'restart;
            }
            if give_up.is_some_and(|g| g(&info.residual_history)) {
                info.stop = CgStop::Abandoned;
                return info;
            }
            m.apply(&r, &mut z);
            let rz_new = par_dot(&r, &z);
            let beta = rz_new / rz;
            rz = rz_new;
            zip_map_mut(&mut p, &z, |pi, zi| zi + beta * pi);
        }
    }
}

/// out[i] = f(a[i], b[i]), in parallel for long vectors.
fn zip_map(out: &mut [f64], a: &[f64], b: &[f64], f: impl Fn(f64, f64) -> f64 + Sync) {
    if out.len() < PAR_MIN {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = f(x, y);
        }
    } else {
        out.par_chunks_mut(CHUNK).zip(a.par_chunks(CHUNK)).zip(b.par_chunks(CHUNK)).for_each(
            |((o, x), y)| {
                for ((o, &x), &y) in o.iter_mut().zip(x).zip(y) {
                    *o = f(x, y);
                }
            },
        );
    }
}

/// out[i] = f(out[i], a[i]), in parallel for long vectors.
fn zip_map_mut(out: &mut [f64], a: &[f64], f: impl Fn(f64, f64) -> f64 + Sync) {
    if out.len() < PAR_MIN {
        for (o, &x) in out.iter_mut().zip(a) {
            *o = f(*o, x);
        }
    } else {
        out.par_chunks_mut(CHUNK).zip(a.par_chunks(CHUNK)).for_each(|(o, x)| {
            for (o, &x) in o.iter_mut().zip(x) {
                *o = f(*o, x);
            }
        });
    }
}

/// x += α p, r −= α q in one pass.
fn axpy2(x: &mut [f64], r: &mut [f64], p: &[f64], q: &[f64], alpha: f64) {
    let body = |x: &mut [f64], r: &mut [f64], p: &[f64], q: &[f64]| {
        for i in 0..x.len() {
            x[i] += alpha * p[i];
            r[i] -= alpha * q[i];
        }
    };
    if x.len() < PAR_MIN {
        body(x, r, p, q);
    } else {
        x.par_chunks_mut(CHUNK)
            .zip(r.par_chunks_mut(CHUNK))
            .zip(p.par_chunks(CHUNK).zip(q.par_chunks(CHUNK)))
            .for_each(|((x, r), (p, q))| body(x, r, p, q));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recording(kept: &mut ConjugateDirections) -> CgHooks<'_> {
        CgHooks { record: Some(kept), give_up: None }
    }

    /// 1D Laplacian tridiag(−1, 2, −1) of size n.
    fn laplace_1d(n: usize) -> CsrMatrix {
        let mut row_ptr = vec![0];
        let mut col_idx = Vec::new();
        let mut values = Vec::new();
        for i in 0..n {
            if i > 0 {
                col_idx.push(i as u32 - 1);
                values.push(-1.0);
            }
            col_idx.push(i as u32);
            values.push(2.0);
            if i + 1 < n {
                col_idx.push(i as u32 + 1);
                values.push(-1.0);
            }
            row_ptr.push(col_idx.len());
        }
        CsrMatrix { n_rows: n, n_cols: n, row_ptr, col_idx, values }
    }

    #[test]
    fn par_spmv_matches_sequential_product() {
        let a = laplace_1d(50_000);
        let x: Vec<f64> = (0..a.n_rows).map(|i| (i as f64 * 0.37).sin()).collect();
        let (mut y1, mut y2) = (vec![0.0; a.n_rows], vec![0.0; a.n_rows]);
        par_spmv(&a, &x, &mut y1);
        a.mul_vec_into(&x, &mut y2);
        assert_eq!(y1, y2);
    }

    #[test]
    fn cg_solves_1d_laplacian_in_n_steps() {
        let a = laplace_1d(40);
        let b = vec![1.0; 40];
        let mut x = vec![0.0; 40];
        let info = pcg(&a, &b, &mut x, &IdentityPreconditioner, &CgParams::default());
        assert!(info.converged, "{info:?}");
        assert!(info.iterations <= 21, "{}", info.iterations);
        // exact solution of −u'' = 1 discretized: x_i = (i+1)(n−i)/2
        for (i, xi) in x.iter().enumerate() {
            let exact = ((i + 1) * (40 - i)) as f64 / 2.0;
            assert!((xi - exact).abs() < 1e-8 * exact, "{i}: {xi} vs {exact}");
        }
    }

    #[test]
    fn indefinite_matrix_is_reported() {
        // −A is negative definite: the very first curvature pᵀAp is negative.
        let mut a = laplace_1d(10);
        a.values.iter_mut().for_each(|v| *v = -*v);
        let b = vec![1.0; 10];
        let mut x = vec![0.0; 10];
        let info = pcg(&a, &b, &mut x, &IdentityPreconditioner, &CgParams::default());
        assert!(!info.converged);
        assert_eq!(info.stop, CgStop::IndefiniteOperator);
    }

    #[test]
    fn kept_directions_reproduce_the_solution_and_project_other_right_hand_sides() {
        let n = 60;
        let a = laplace_1d(n);
        let b1: Vec<f64> = (0..n).map(|i| 1.0 + (i as f64 * 0.3).sin()).collect();
        let mut x1 = vec![0.0; n];
        let jacobi = JacobiPreconditioner::new(&a);
        let op = |v: &[f64], y: &mut [f64]| par_spmv(&a, v, y);
        let mut kept = ConjugateDirections::new(100);
        let info =
            pcg_with(&op, None, &b1, &mut x1, &jacobi, &CgParams::default(), recording(&mut kept));
        assert!(info.converged);
        assert_eq!(kept.len(), info.iterations);
        // CG's iterate is Σ αₖ pₖ with αₖ = pₖ·b / pₖᵀApₖ: the projection gives it back
        let mut x0 = vec![1.0; n];
        kept.initial_guess(&b1, &mut x0);
        let err = x0.iter().zip(&x1).map(|(p, q)| (p - q).abs()).fold(0.0, f64::max);
        let scale = x1.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
        assert!(err < 1e-8 * scale, "{err} vs {scale}");
        // another right-hand side: the residual of the projection is orthogonal to the kept
        // directions (Galerkin condition)
        let b2: Vec<f64> = (0..n).map(|i| (i as f64 * 0.11).cos()).collect();
        kept.initial_guess(&b2, &mut x0);
        let mut ax = vec![0.0; n];
        a.mul_vec_into(&x0, &mut ax);
        let r: Vec<f64> = b2.iter().zip(&ax).map(|(p, q)| p - q).collect();
        for d in &kept.directions[..kept.len()] {
            let dn = par_dot(d, d).sqrt();
            assert!(par_dot(d, &r).abs() < 1e-8 * dn * par_dot(&b2, &b2).sqrt());
        }
        // capacity and clearing
        let mut small = ConjugateDirections::new(3);
        let mut x = vec![0.0; n];
        pcg_with(&op, None, &b1, &mut x, &jacobi, &CgParams::default(), recording(&mut small));
        assert_eq!(small.len(), 3);
        small.clear();
        assert!(small.is_empty() && small.capacity() == 3);
    }

    #[test]
    fn zero_rhs_converges_immediately() {
        let a = laplace_1d(10);
        let mut x = vec![0.0; 10];
        let info = pcg(&a, &[0.0; 10], &mut x, &IdentityPreconditioner, &CgParams::default());
        assert!(info.converged && info.iterations == 0);
    }
}
