//! Gaussian random fields over the cells of a mesh, by their Karhunen–Loève expansion.
//!
//! A stationary field g of zero mean, unit variance and correlation ρ(|x − y|) (exponential
//! exp(−r/ℓ) or squared exponential exp(−r²/(2ℓ²)), ℓ the correlation length) is expanded as
//!
//! g(x) = Σₖ √λₖ φₖ(x) ξₖ,  ξₖ independent standard normals,
//!
//! where (λₖ, φₖ) are the eigenpairs of the covariance operator ∫ ρ(x, y) φ(y) dy = λ φ(x),
//! ∫ φₖ φₗ = δₖₗ. Over the cells (centroids xᵢ, volumes wᵢ) the operator is discretized by the
//! Nyström rule, symmetrized as A = W^½ R W^½ (Rᵢⱼ = ρ(|xᵢ − xⱼ|)), so that vₖ = W^½ φₖ are
//! A's orthonormal eigenvectors. Keeping the m largest λₖ keeps the share Σₖ λₖ / |Ω| of the
//! field's variance integrated over the domain (|Ω| = Σ wᵢ = trace A), the best any m
//! independent variables can do in that measure.
//!
//! The m wanted pairs come from subspace iteration with Rayleigh–Ritz on a block of 2m + 8
//! vectors: R is never stored (each block product recomputes its entries, n² correlation
//! values per product), so memory stays O(n m); small problems (n ≤ 256) are decomposed
//! whole. Beyond 4096 cells the eigenproblem is solved on a coarser quadrature — the cells
//! binned on a uniform grid, each bin one point at its volume-weighted centroid with the bin's
//! volume — and the modes are carried to every cell by the Nyström extension
//! φₖ(x) = λₖ⁻¹ Σⱼ Wⱼ ρ(|x − Xⱼ|) φₖ(Xⱼ), which is the eigenfunction equation itself, so the
//! cost grows as n · 4096 · m rather than n²; the bin size is reported (it should stay well
//! below the correlation length). Every row of a product is summed in one order by one thread, the start
//! block comes from a fixed seed, and each mode's sign is fixed (its largest entry positive):
//! the modes are the same bytes on every run, thread count and MPI rank.

use rayon::prelude::*;

use gradfem_solvers::dense::symmetric_eigen;

use crate::rng::{SplitMix64, unit_open};
use crate::special::normal_quantile;

/// The correlation function of a stationary random field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Covariance {
    /// ρ(r) = exp(−r/ℓ): rough fields, continuous but nowhere differentiable.
    Exponential,
    /// ρ(r) = exp(−r²/(2ℓ²)): smooth fields.
    SquaredExponential,
}

impl Covariance {
    /// Every covariance, in the order the error messages list them.
    pub const ALL: [Covariance; 2] = [Covariance::Exponential, Covariance::SquaredExponential];

    /// The name used in problem files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Covariance::Exponential => "exponential",
            Covariance::SquaredExponential => "squared_exponential",
        }
    }

    /// The covariance of a name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    /// ρ at distance r for correlation length ℓ.
    pub fn correlation(self, r: f64, length: f64) -> f64 {
        match self {
            Covariance::Exponential => (-r / length).exp(),
            Covariance::SquaredExponential => {
                let s = r / length;
                (-0.5 * s * s).exp()
            }
        }
    }
}

/// Why an expansion could not be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FieldError {
    /// Points, weights, length or mode count out of range.
    #[error("{0}")]
    Input(String),
    /// Subspace iteration did not reach its tolerance.
    #[error(
        "the Karhunen–Loève modes did not converge in {iterations} iterations (largest relative residual {residual:e})"
    )]
    NoConvergence {
        /// Iterations run.
        iterations: usize,
        /// max ‖A v − λ v‖ / λ₁ of the wanted pairs at the end.
        residual: f64,
    },
}

/// The truncated Karhunen–Loève expansion of a unit-variance random field over weighted
/// points.
#[derive(Clone, Debug, PartialEq)]
pub struct KarhunenLoeve {
    /// λ₁ ≥ λ₂ ≥ … of the kept modes (units of volume: the variance each carries, integrated
    /// over the domain).
    pub eigenvalues: Vec<f64>,
    /// φₖ at each point, normalized so that Σᵢ wᵢ φₖ(xᵢ)² = 1.
    pub modes: Vec<Vec<f64>>,
    /// |Ω| = Σ wᵢ: the whole field's integrated variance.
    pub total: f64,
    /// The points of the eigenproblem: the cells, or the bins of a coarser quadrature.
    pub quadrature_points: usize,
    /// The edge of the bins when the cells were binned.
    pub bin_size: Option<f64>,
}

/// Relative residual ‖A v − λ v‖ / λ₁ at which a Ritz pair is taken as converged.
const TOLERANCE: f64 = 1e-9;
const MAX_ITERATIONS: usize = 500;
/// At or below this many points the matrix is formed and decomposed whole.
const DENSE_LIMIT: usize = 256;
const START_SEED: u64 = 0x004b_4c66_6965_6c64;
/// Above this many cells the eigenproblem is solved on binned cells.
const COARSE_LIMIT: usize = 4096;

impl KarhunenLoeve {
    /// The `modes` largest pairs of the field of `covariance` with correlation length `length`
    /// over `points` with quadrature weights (cell volumes) `weights`.
    pub fn compute(
        points: &[[f64; 3]],
        weights: &[f64],
        covariance: Covariance,
        length: f64,
        modes: usize,
    ) -> Result<Self, FieldError> {
        Self::compute_binned_above(points, weights, covariance, length, modes, COARSE_LIMIT)
    }

    /// [`compute`](Self::compute), binning the cells into at most `limit` points when there
    /// are more.
    fn compute_binned_above(
        points: &[[f64; 3]],
        weights: &[f64],
        covariance: Covariance,
        length: f64,
        modes: usize,
        limit: usize,
    ) -> Result<Self, FieldError> {
        let n = points.len();
        if n == 0 {
            return Err(FieldError::Input("a random field needs at least one cell".into()));
        }
        if weights.len() != n {
            return Err(FieldError::Input(format!("{} weights for {n} points", weights.len())));
        }
        if let Some((i, w)) =
            weights.iter().enumerate().find(|(_, w)| !(w.is_finite() && **w > 0.0))
        {
            return Err(FieldError::Input(format!("cell {i}: volume {w} is not positive")));
        }
        if let Some(i) = points.iter().position(|p| p.iter().any(|c| !c.is_finite())) {
            return Err(FieldError::Input(format!("cell {i}: its centroid is not finite")));
        }
        if !(length.is_finite() && length > 0.0) {
            return Err(FieldError::Input(format!(
                "correlation length {length} must be a positive number"
            )));
        }
        if modes == 0 || modes > n {
            return Err(FieldError::Input(format!(
                "{modes} modes: between 1 and the number of cells ({n})"
            )));
        }
        let total: f64 = weights.iter().sum();
        if n > limit {
            let (bins, bin_weights, size) = bin_cells(points, weights, limit);
            if modes > bins.len() {
                return Err(FieldError::Input(format!(
                    "{modes} modes: at most the {} bins of {size:e} the cells were grouped into",
                    bins.len()
                )));
            }
            let coarse = Self::compute_binned_above(
                &bins,
                &bin_weights,
                covariance,
                length,
                modes,
                usize::MAX,
            )?;
            let op = Operator::new(&bins, &bin_weights, covariance, length);
            let mut modes = op.extend(points, &coarse.modes, &coarse.eigenvalues);
            modes.iter_mut().for_each(|m| fix_sign(m));
            return Ok(KarhunenLoeve {
                eigenvalues: coarse.eigenvalues,
                modes,
                total,
                quadrature_points: bins.len(),
                bin_size: Some(size),
            });
        }
        let op = Operator::new(points, weights, covariance, length);
        let (values, vectors) =
            if n <= DENSE_LIMIT { op.dense(modes) } else { op.subspace(modes)? };
        let modes = vectors
            .into_iter()
            .map(|v| {
                let mut phi: Vec<f64> = v.iter().zip(&op.sqrt_w).map(|(v, s)| v / s).collect();
                fix_sign(&mut phi);
                phi
            })
            .collect();
        Ok(KarhunenLoeve {
            eigenvalues: values,
            modes,
            total,
            quadrature_points: n,
            bin_size: None,
        })
    }

    /// The number of modes kept.
    pub fn len(&self) -> usize {
        self.eigenvalues.len()
    }

    /// Whether no mode is kept.
    pub fn is_empty(&self) -> bool {
        self.eigenvalues.is_empty()
    }

    /// The share of the field's integrated variance the first m modes carry.
    pub fn captured(&self, m: usize) -> f64 {
        self.eigenvalues[..m.min(self.len())].iter().sum::<f64>() / self.total
    }

    /// The fewest modes carrying at least `energy` of the variance, if the kept ones do.
    pub fn modes_for(&self, energy: f64) -> Option<usize> {
        (1..=self.len()).find(|&m| self.captured(m) >= energy)
    }

    /// Keep the first m modes.
    pub fn truncate(&mut self, m: usize) {
        self.eigenvalues.truncate(m);
        self.modes.truncate(m);
    }

    /// √λₖ φₖ at each point: ∂g/∂ξₖ.
    pub fn scaled_mode(&self, k: usize) -> Vec<f64> {
        let s = self.eigenvalues[k].max(0.0).sqrt();
        self.modes[k].iter().map(|p| s * p).collect()
    }

    /// g = Σₖ √λₖ φₖ ξₖ at each point.
    pub fn field(&self, xi: &[f64]) -> Vec<f64> {
        assert_eq!(xi.len(), self.len(), "one coefficient per mode");
        let n = self.modes.first().map_or(0, Vec::len);
        let mut g = vec![0.0; n];
        for (k, &x) in xi.iter().enumerate() {
            let s = self.eigenvalues[k].max(0.0).sqrt() * x;
            for (g, p) in g.iter_mut().zip(&self.modes[k]) {
                *g += s * p;
            }
        }
        g
    }

    /// The variance of the truncated field at each point, Σₖ λₖ φₖ² (≤ 1; 1 with every mode).
    pub fn pointwise_variance(&self) -> Vec<f64> {
        let n = self.modes.first().map_or(0, Vec::len);
        let mut v = vec![0.0; n];
        for (l, phi) in self.eigenvalues.iter().zip(&self.modes) {
            for (v, p) in v.iter_mut().zip(phi) {
                *v += l * p * p;
            }
        }
        v
    }
}

/// Group the cells into at most `limit` bins of a uniform grid: each bin's volume-weighted
/// centroid and volume, in the grid's order, and the bin edge.
fn bin_cells(points: &[[f64; 3]], weights: &[f64], limit: usize) -> (Vec<[f64; 3]>, Vec<f64>, f64) {
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    for p in points {
        for d in 0..3 {
            lo[d] = lo[d].min(p[d]);
            hi[d] = hi[d].max(p[d]);
        }
    }
    let extents: Vec<f64> = (0..3).map(|d| hi[d] - lo[d]).filter(|e| *e > 0.0).collect();
    let measure: f64 = extents.iter().product();
    let mut size = if extents.is_empty() {
        1.0
    } else {
        (measure / limit as f64).powf(1.0 / extents.len() as f64)
    };
    loop {
        let mut bins: std::collections::BTreeMap<[i64; 3], (f64, [f64; 3])> = Default::default();
        for (p, w) in points.iter().zip(weights) {
            let key = [0, 1, 2].map(|d| ((p[d] - lo[d]) / size).floor() as i64);
            let e = bins.entry(key).or_insert((0.0, [0.0; 3]));
            e.0 += w;
            for d in 0..3 {
                e.1[d] += w * p[d];
            }
        }
        if bins.len() <= limit {
            let (centroids, volumes) =
                bins.values().map(|(w, s)| ([s[0] / w, s[1] / w, s[2] / w], *w)).unzip();
            return (centroids, volumes, size);
        }
        size *= 1.1;
    }
}

/// Make the entry of largest magnitude positive (the first such entry on ties).
fn fix_sign(v: &mut [f64]) {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if x.abs() > v[best].abs() {
            best = i;
        }
    }
    if v.get(best).is_some_and(|x| *x < 0.0) {
        v.iter_mut().for_each(|x| *x = -*x);
    }
}

/// A = W^½ R W^½, applied without being stored.
struct Operator<'a> {
    points: &'a [[f64; 3]],
    sqrt_w: Vec<f64>,
    covariance: Covariance,
    length: f64,
}

impl<'a> Operator<'a> {
    fn new(points: &'a [[f64; 3]], weights: &[f64], covariance: Covariance, length: f64) -> Self {
        Operator { points, sqrt_w: weights.iter().map(|w| w.sqrt()).collect(), covariance, length }
    }

    fn entry(&self, i: usize, j: usize) -> f64 {
        let (a, b) = (self.points[i], self.points[j]);
        let r = ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt();
        self.sqrt_w[i] * self.sqrt_w[j] * self.covariance.correlation(r, self.length)
    }

    /// The Nyström extension of the unit modes `phi` (over these points) with eigenvalues
    /// `lambda` to `targets`: φₖ(x) = λₖ⁻¹ Σⱼ wⱼ ρ(|x − xⱼ|) φₖ(xⱼ), each correlation value
    /// computed once for every mode.
    fn extend(&self, targets: &[[f64; 3]], phi: &[Vec<f64>], lambda: &[f64]) -> Vec<Vec<f64>> {
        let m = phi.len();
        // w_j φ_k(x_j) / λ_k, row-major by point.
        let mut wphi = vec![0.0; self.points.len() * m];
        for (k, (p, l)) in phi.iter().zip(lambda).enumerate() {
            for (j, (v, s)) in p.iter().zip(&self.sqrt_w).enumerate() {
                wphi[j * m + k] = v * s * s / l;
            }
        }
        let rows: Vec<Vec<f64>> = targets
            .par_iter()
            .map(|x| {
                let mut out = vec![0.0; m];
                for (j, p) in self.points.iter().enumerate() {
                    let r = ((x[0] - p[0]).powi(2) + (x[1] - p[1]).powi(2) + (x[2] - p[2]).powi(2))
                        .sqrt();
                    let c = self.covariance.correlation(r, self.length);
                    for (o, w) in out.iter_mut().zip(&wphi[j * m..(j + 1) * m]) {
                        *o += c * w;
                    }
                }
                out
            })
            .collect();
        (0..m).map(|k| rows.iter().map(|r| r[k]).collect()).collect()
    }

    /// Every pair, from the whole matrix: (λ descending, unit vectors), the first m.
    fn dense(&self, m: usize) -> (Vec<f64>, Vec<Vec<f64>>) {
        let n = self.points.len();
        let a: Vec<f64> = (0..n * n).map(|k| self.entry(k / n, k % n)).collect();
        let eig = symmetric_eigen(&a, n);
        let order: Vec<usize> = (0..n).rev().take(m).collect();
        (
            order.iter().map(|&k| eig.values[k]).collect(),
            order.iter().map(|&k| eig.vectors[k].clone()).collect(),
        )
    }

    /// Z = A Q for a row-major n × b block Q.
    fn apply(&self, q: &[f64], b: usize) -> Vec<f64> {
        let n = self.points.len();
        let mut z = vec![0.0; n * b];
        z.par_chunks_mut(b).enumerate().for_each(|(i, zi)| {
            for j in 0..n {
                let a = self.entry(i, j);
                let qj = &q[j * b..(j + 1) * b];
                for (z, q) in zi.iter_mut().zip(qj) {
                    *z += a * q;
                }
            }
        });
        z
    }

    /// The m largest pairs by subspace iteration with Rayleigh–Ritz.
    fn subspace(&self, m: usize) -> Result<(Vec<f64>, Vec<Vec<f64>>), FieldError> {
        let n = self.points.len();
        let b = (2 * m + 8).min(n);
        let mut rng = SplitMix64::new(START_SEED);
        let mut q: Vec<f64> =
            (0..n * b).map(|_| normal_quantile(unit_open(rng.next_u64()))).collect();
        orthonormalize(&mut q, n, b, &mut rng);
        let mut residual = f64::INFINITY;
        for _ in 0..MAX_ITERATIONS {
            let z = self.apply(&q, b);
            // H = Qᵀ Z, its eigenpairs descending.
            let mut h = vec![0.0; b * b];
            for i in 0..n {
                let (qi, zi) = (&q[i * b..(i + 1) * b], &z[i * b..(i + 1) * b]);
                for r in 0..b {
                    for c in 0..b {
                        h[r * b + c] += qi[r] * zi[c];
                    }
                }
            }
            let eig = symmetric_eigen(&h, b);
            let order: Vec<usize> = (0..b).rev().collect();
            // Ritz vectors V = Q S and A V = Z S.
            let mut v = vec![0.0; n * b];
            let mut av = vec![0.0; n * b];
            for i in 0..n {
                let (qi, zi) = (&q[i * b..(i + 1) * b], &z[i * b..(i + 1) * b]);
                for (c, &k) in order.iter().enumerate() {
                    let s = &eig.vectors[k];
                    let (mut x, mut y) = (0.0, 0.0);
                    for r in 0..b {
                        x += qi[r] * s[r];
                        y += zi[r] * s[r];
                    }
                    v[i * b + c] = x;
                    av[i * b + c] = y;
                }
            }
            let theta: Vec<f64> = order.iter().map(|&k| eig.values[k]).collect();
            let scale = theta[0].abs().max(f64::MIN_POSITIVE);
            residual = (0..m)
                .map(|c| {
                    let mut s = 0.0;
                    for i in 0..n {
                        let d = av[i * b + c] - theta[c] * v[i * b + c];
                        s += d * d;
                    }
                    s.sqrt() / scale
                })
                .fold(0.0, f64::max);
            if residual <= TOLERANCE {
                let vectors = (0..m).map(|c| (0..n).map(|i| v[i * b + c]).collect()).collect();
                return Ok((theta[..m].to_vec(), vectors));
            }
            q = av;
            orthonormalize(&mut q, n, b, &mut rng);
        }
        Err(FieldError::NoConvergence { iterations: MAX_ITERATIONS, residual })
    }
}

/// Orthonormalize the columns of a row-major n × b block by Gram–Schmidt applied twice; a
/// column that vanishes (a rank-deficient block) is replaced by a random one.
fn orthonormalize(q: &mut [f64], n: usize, b: usize, rng: &mut SplitMix64) {
    for c in 0..b {
        let mut tries = 0;
        loop {
            let before = column_norm(q, n, b, c);
            for _pass in 0..2 {
                for k in 0..c {
                    let mut d = 0.0;
                    for i in 0..n {
                        d += q[i * b + k] * q[i * b + c];
                    }
                    for i in 0..n {
                        q[i * b + c] -= d * q[i * b + k];
                    }
                }
            }
            let norm = column_norm(q, n, b, c);
            if norm > 1e-10 * before && norm > 0.0 {
                for i in 0..n {
                    q[i * b + c] /= norm;
                }
                break;
            }
            tries += 1;
            assert!(
                tries < 100,
                "no vector is left outside a block of {c} columns in {n} dimensions"
            );
            for i in 0..n {
                q[i * b + c] = normal_quantile(unit_open(rng.next_u64()));
            }
        }
    }
}

fn column_norm(q: &[f64], n: usize, b: usize, c: usize) -> f64 {
    (0..n).map(|i| q[i * b + c] * q[i * b + c]).sum::<f64>().sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    /// Midpoints of n equal cells of [−a, a] on the x axis.
    fn segment(n: usize, a: f64) -> (Vec<[f64; 3]>, Vec<f64>) {
        let h = 2.0 * a / n as f64;
        ((0..n).map(|i| [-a + (i as f64 + 0.5) * h, 0.0, 0.0]).collect(), vec![h; n])
    }

    /// The eigenvalues of exp(−|x − y|/ℓ) on [−a, a] in closed form (Ghanem & Spanos 1991,
    /// §2.3.3): λ = 2ℓ / (1 + ℓ² ω²), ω the roots of 1/ℓ − ω tan(ω a) = 0 (even modes) and
    /// ω + tan(ω a)/ℓ = 0 (odd modes), one of each in every interval of length π/a.
    fn exponential_eigenvalues(a: f64, ell: f64, count: usize) -> Vec<f64> {
        let bisect = |f: &dyn Fn(f64) -> f64, mut lo: f64, mut hi: f64| {
            for _ in 0..200 {
                let mid = 0.5 * (lo + hi);
                if f(lo) * f(mid) <= 0.0 {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            0.5 * (lo + hi)
        };
        let eps = 1e-12;
        let mut omegas = Vec::new();
        for k in 0..count {
            let (lo, hi) =
                (k as f64 * std::f64::consts::PI / a, (k as f64 + 0.5) * std::f64::consts::PI / a);
            omegas.push(bisect(&|w| 1.0 / ell - w * (w * a).tan(), lo + eps, hi - eps));
            let (lo, hi) = (
                (k as f64 + 0.5) * std::f64::consts::PI / a,
                (k as f64 + 1.0) * std::f64::consts::PI / a,
            );
            omegas.push(bisect(&|w| w + (w * a).tan() / ell, lo + eps, hi - eps));
        }
        let mut l: Vec<f64> =
            omegas.iter().map(|w| 2.0 * ell / (1.0 + ell * ell * w * w)).collect();
        l.sort_by(|x, y| y.total_cmp(x));
        l.truncate(count);
        l
    }

    /// The Nyström eigenvalues converge to the closed form at second order in the cell size
    /// (the midpoint rule), through the subspace iteration (n > 256) as through the whole
    /// decomposition.
    #[test]
    fn exponential_kernel_matches_the_closed_form_at_second_order() {
        let (a, ell, m) = (0.5, 0.3, 6);
        let exact = exponential_eigenvalues(a, ell, m);
        let mut errors = Vec::new();
        for n in [200, 400, 800] {
            let (p, w) = segment(n, a);
            let kl = KarhunenLoeve::compute(&p, &w, Covariance::Exponential, ell, m).unwrap();
            let e = kl
                .eigenvalues
                .iter()
                .zip(&exact)
                .map(|(l, x)| ((l - x) / x).abs())
                .fold(0.0, f64::max);
            errors.push(e);
        }
        assert!(errors[2] < 1e-4, "{errors:?}");
        for w in errors.windows(2) {
            let rate = (w[0] / w[1]).log2();
            assert!(rate > 1.8, "rate {rate} ({errors:?})");
        }
    }

    /// The subspace iteration gives the pairs of the whole decomposition.
    #[rstest]
    #[case(Covariance::Exponential, 0.2)]
    #[case(Covariance::SquaredExponential, 0.15)]
    fn subspace_iteration_matches_the_whole_decomposition(
        #[case] covariance: Covariance,
        #[case] ell: f64,
    ) {
        // A cloud of 300 points in a box with unequal weights.
        let mut rng = SplitMix64::new(7);
        let p: Vec<[f64; 3]> = (0..300)
            .map(|_| {
                [
                    unit_open(rng.next_u64()),
                    0.5 * unit_open(rng.next_u64()),
                    0.2 * unit_open(rng.next_u64()),
                ]
            })
            .collect();
        let w: Vec<f64> = (0..300).map(|_| 0.5 + unit_open(rng.next_u64())).collect();
        let op = Operator::new(&p, &w, covariance, ell);
        let (dense_values, dense_vectors) = op.dense(8);
        let (values, vectors) = op.subspace(8).unwrap();
        for k in 0..8 {
            assert!((values[k] / dense_values[k] - 1.0).abs() < 1e-10, "λ{k}");
            let dot: f64 = vectors[k].iter().zip(&dense_vectors[k]).map(|(a, b)| a * b).sum();
            assert!((dot.abs() - 1.0).abs() < 1e-8, "mode {k}: |cos| = {}", dot.abs());
        }
    }

    /// With every mode the expansion's covariance Σ λ φφᵀ is the correlation matrix itself,
    /// and the modes are orthonormal in the weighted inner product.
    #[test]
    fn every_mode_reproduces_the_correlation_matrix() {
        let p: Vec<[f64; 3]> =
            (0..40).map(|i| [(i % 8) as f64 * 0.1, (i / 8) as f64 * 0.1, 0.0]).collect();
        let w: Vec<f64> = (0..40).map(|i| 1.0 + 0.01 * i as f64).collect();
        let kl = KarhunenLoeve::compute(&p, &w, Covariance::Exponential, 0.25, 40).unwrap();
        assert!((kl.captured(40) - 1.0).abs() < 1e-12);
        for i in 0..40 {
            for j in 0..40 {
                let c: f64 =
                    (0..40).map(|k| kl.eigenvalues[k] * kl.modes[k][i] * kl.modes[k][j]).sum();
                let r = ((p[i][0] - p[j][0]).powi(2) + (p[i][1] - p[j][1]).powi(2)).sqrt();
                assert!((c - (-r / 0.25).exp()).abs() < 1e-12, "({i}, {j})");
            }
        }
        for k in 0..40 {
            for l in 0..40 {
                let d: f64 = (0..40).map(|i| w[i] * kl.modes[k][i] * kl.modes[l][i]).sum();
                assert!((d - f64::from(u8::from(k == l))).abs() < 1e-12);
            }
        }
        assert!(kl.pointwise_variance().iter().all(|v| (v - 1.0).abs() < 1e-12));
    }

    /// Sampled fields have the expansion's covariance.
    #[test]
    fn sampled_fields_have_the_truncated_covariance() {
        let (p, w) = segment(50, 1.0);
        let kl = KarhunenLoeve::compute(&p, &w, Covariance::SquaredExponential, 0.5, 10).unwrap();
        let mut rng = SplitMix64::new(3);
        let samples = 40_000;
        let (i, j) = (10, 17);
        let (mut sii, mut sij) = (0.0, 0.0);
        for _ in 0..samples {
            let xi: Vec<f64> =
                (0..10).map(|_| normal_quantile(unit_open(rng.next_u64()))).collect();
            let g = kl.field(&xi);
            sii += g[i] * g[i];
            sij += g[i] * g[j];
        }
        let var = kl.pointwise_variance()[i];
        let cov: f64 = (0..10).map(|k| kl.eigenvalues[k] * kl.modes[k][i] * kl.modes[k][j]).sum();
        // Standard errors of the sample moments of a normal pair are about √(2/N) · scale.
        let se = (2.0 / samples as f64).sqrt();
        assert!(
            (sii / samples as f64 - var).abs() < 4.0 * se * var,
            "{} vs {var}",
            sii / samples as f64
        );
        assert!((sij / samples as f64 - cov).abs() < 4.0 * se, "{} vs {cov}", sij / samples as f64);
        // Ten modes of a smooth field on a domain of four correlation lengths carry nearly all.
        assert!(kl.captured(10) > 0.999, "{}", kl.captured(10));
    }

    #[test]
    fn modes_are_the_same_bytes_on_any_thread_count() {
        let (p, w) = segment(400, 1.0);
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let a = one
            .install(|| KarhunenLoeve::compute(&p, &w, Covariance::Exponential, 0.4, 5).unwrap());
        let b = KarhunenLoeve::compute(&p, &w, Covariance::Exponential, 0.4, 5).unwrap();
        assert_eq!(a, b);
        // The sign convention: each mode's largest entry is positive.
        for phi in &a.modes {
            let big =
                phi.iter().copied().fold(0.0, |m: f64, x| if x.abs() > m.abs() { x } else { m });
            assert!(big > 0.0);
        }
    }

    /// Binned cells with the Nyström extension against the exact expansion: eigenvalues to
    /// the bins' quadrature error, modes to the same order, the variance pointwise ≤ 1.
    #[test]
    fn binned_expansion_approaches_the_exact_one() {
        let (p, w) = segment(1200, 1.0);
        let exact = KarhunenLoeve::compute(&p, &w, Covariance::Exponential, 0.5, 6).unwrap();
        let binned =
            KarhunenLoeve::compute_binned_above(&p, &w, Covariance::Exponential, 0.5, 6, 300)
                .unwrap();
        assert!(binned.quadrature_points <= 300);
        let h = binned.bin_size.unwrap();
        assert!(h > 2.0 / 300.0 && h < 2.0 / 200.0, "bin {h}");
        for k in 0..6 {
            let rel = (binned.eigenvalues[k] / exact.eigenvalues[k] - 1.0).abs();
            assert!(rel < 1e-3, "λ{k}: {rel}");
            // Up to sign: an odd mode's two extremes are equal but for round-off.
            let apart = |s: f64| {
                binned.modes[k]
                    .iter()
                    .zip(&exact.modes[k])
                    .map(|(a, b)| (a - s * b).abs())
                    .fold(0.0, f64::max)
            };
            let diff = apart(1.0).min(apart(-1.0));
            let scale = exact.modes[k].iter().fold(0.0, |m: f64, x| m.max(x.abs()));
            assert!(diff < 1e-2 * scale, "mode {k}: {diff} of {scale}");
        }
        assert!(binned.pointwise_variance().iter().all(|v| *v < 1.0 + 1e-3));
    }

    #[test]
    fn energy_picks_the_fewest_modes() {
        let (p, w) = segment(100, 1.0);
        let kl = KarhunenLoeve::compute(&p, &w, Covariance::Exponential, 0.5, 20).unwrap();
        let m = kl.modes_for(0.8).unwrap();
        assert!(kl.captured(m) >= 0.8 && kl.captured(m - 1) < 0.8);
        assert_eq!(kl.modes_for(1.1), None);
    }

    #[rstest]
    #[case(vec![], vec![], 1.0, 1, "at least one cell")]
    #[case(vec![[0.0; 3]], vec![0.0], 1.0, 1, "cell 0: volume 0 is not positive")]
    #[case(vec![[0.0; 3]], vec![1.0], 0.0, 1, "correlation length 0 must be a positive number")]
    #[case(vec![[0.0; 3]], vec![1.0], 1.0, 2, "2 modes: between 1 and the number of cells (1)")]
    #[case(vec![[f64::NAN, 0.0, 0.0]], vec![1.0], 1.0, 1, "cell 0: its centroid is not finite")]
    fn bad_input_is_refused(
        #[case] p: Vec<[f64; 3]>,
        #[case] w: Vec<f64>,
        #[case] ell: f64,
        #[case] m: usize,
        #[case] message: &str,
    ) {
        let e = KarhunenLoeve::compute(&p, &w, Covariance::Exponential, ell, m).unwrap_err();
        assert!(e.to_string().contains(message), "{e}");
    }

    #[test]
    fn covariance_names_round_trip() {
        for c in Covariance::ALL {
            assert_eq!(Covariance::parse(c.name()), Some(c));
        }
        assert_eq!(Covariance::parse("matern"), None);
    }
}
