//! Input distributions and their correlation.
//!
//! Every distribution maps a uniform u ∈ (0, 1) to a value by its inverse CDF, so one design
//! of uniforms (Monte Carlo, Latin hypercube, Sobol) serves every input. Correlated inputs go
//! through a Gaussian copula: ξ = Φ⁻¹(u) independent standard normals, z = L ξ with L the
//! Cholesky factor of the correlation matrix R, then x_i = F_i⁻¹(Φ(z_i)). For normal
//! marginals the correlation of x is R exactly; for others it is close to R (the Nataf
//! transformation), and the first-order variance uses C_ij = R_ij σ_i σ_j.

use crate::special::{normal_cdf, normal_pdf, normal_quantile, normal_sf};

/// A refused distribution or correlation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DistError {
    /// A parameter of a distribution out of its range.
    #[error("{0}")]
    Parameter(String),
    /// A correlation matrix that is not one.
    #[error("correlation: {0}")]
    Correlation(String),
}

/// The distribution of one uncertain input.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Distribution {
    /// Normal with mean and standard deviation.
    Normal { mean: f64, std: f64 },
    /// Log-normal given by the mean and standard deviation of the value itself (not of its
    /// logarithm).
    #[serde(rename = "lognormal")]
    LogNormal { mean: f64, std: f64 },
    /// Uniform on [lower, upper].
    Uniform { lower: f64, upper: f64 },
    /// A normal N(mean, std²) restricted to [lower, upper] (mean and std are the parent's;
    /// `f64::MIN`/`f64::MAX` stand for an open side where a finite number is needed, as in
    /// JSON).
    TruncatedNormal { mean: f64, std: f64, lower: f64, upper: f64 },
}

fn finite(name: &str, v: f64) -> Result<(), DistError> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(DistError::Parameter(format!("{name} = {v} must be a finite number")))
    }
}

impl Distribution {
    /// Check the parameters: finite, std > 0 (≥ 0 for a normal: 0 makes it a constant),
    /// lower < upper, a log-normal's mean > 0, a truncation interval holding probability.
    pub fn validate(&self) -> Result<(), DistError> {
        match *self {
            Distribution::Normal { mean, std } => {
                finite("mean", mean)?;
                finite("std", std)?;
                if std < 0.0 {
                    return Err(DistError::Parameter(format!("std = {std} must be ≥ 0")));
                }
            }
            Distribution::LogNormal { mean, std } => {
                finite("mean", mean)?;
                finite("std", std)?;
                if mean <= 0.0 {
                    return Err(DistError::Parameter(format!(
                        "a log-normal's mean = {mean} must be > 0"
                    )));
                }
                if std <= 0.0 {
                    return Err(DistError::Parameter(format!("std = {std} must be > 0")));
                }
            }
            Distribution::Uniform { lower, upper } => {
                finite("lower", lower)?;
                finite("upper", upper)?;
                if lower >= upper {
                    return Err(DistError::Parameter(format!(
                        "lower = {lower} must be below upper = {upper}"
                    )));
                }
            }
            Distribution::TruncatedNormal { mean, std, lower, upper } => {
                finite("mean", mean)?;
                finite("std", std)?;
                if std <= 0.0 {
                    return Err(DistError::Parameter(format!("std = {std} must be > 0")));
                }
                if lower.is_nan() || upper.is_nan() || lower >= upper {
                    return Err(DistError::Parameter(format!(
                        "lower = {lower} must be below upper = {upper}"
                    )));
                }
                let (a, b) = ((lower - mean) / std, (upper - mean) / std);
                if truncated_mass(a, b) <= 1e-300 {
                    return Err(DistError::Parameter(format!(
                        "[{}, {}] holds no probability of N({mean}, {std}²)",
                        bound(lower),
                        bound(upper)
                    )));
                }
            }
        }
        Ok(())
    }

    /// The name used in problem files and reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Distribution::Normal { .. } => "normal",
            Distribution::LogNormal { .. } => "lognormal",
            Distribution::Uniform { .. } => "uniform",
            Distribution::TruncatedNormal { .. } => "truncated_normal",
        }
    }

    /// (μ, σ) of ln X for a log-normal.
    fn log_params(mean: f64, std: f64) -> (f64, f64) {
        let s2 = (1.0 + (std / mean).powi(2)).ln();
        (mean.ln() - 0.5 * s2, s2.sqrt())
    }

    /// The value with CDF u (the inverse CDF), u ∈ (0, 1).
    pub fn quantile(&self, u: f64) -> f64 {
        match *self {
            Distribution::Normal { mean, std } => mean + std * normal_quantile(u),
            Distribution::LogNormal { mean, std } => {
                let (mu, s) = Self::log_params(mean, std);
                (mu + s * normal_quantile(u)).exp()
            }
            Distribution::Uniform { lower, upper } => lower + u * (upper - lower),
            Distribution::TruncatedNormal { mean, std, lower, upper } => {
                let (a, b) = ((lower - mean) / std, (upper - mean) / std);
                let z = if a > 0.0 {
                    // Both bounds in the upper tail: count from the top, by 1 − Φ.
                    let (sa, sb) = (normal_sf(a), normal_sf(b));
                    -normal_quantile(sb + (1.0 - u) * (sa - sb))
                } else {
                    let (pa, pb) = (normal_cdf(a), normal_cdf(b));
                    normal_quantile(pa + u * (pb - pa))
                };
                (mean + std * z).clamp(lower, upper)
            }
        }
    }

    /// The value of a standard normal z mapped through the copula: F⁻¹(Φ(z)) (exactly
    /// mean + std·z for a normal, exp(μ + σ z) for a log-normal).
    pub fn from_standard_normal(&self, z: f64) -> f64 {
        match *self {
            Distribution::Normal { mean, std } => mean + std * z,
            Distribution::LogNormal { mean, std } => {
                let (mu, s) = Self::log_params(mean, std);
                (mu + s * z).exp()
            }
            _ => {
                // Φ(z) in the tail where z lies, so far tails keep their digits.
                if z <= 0.0 {
                    self.quantile(normal_cdf(z))
                } else {
                    self.quantile(1.0 - normal_sf(z))
                }
            }
        }
    }

    /// d/dz of [`from_standard_normal`](Self::from_standard_normal): std for a normal,
    /// σ · value for a log-normal; None for the others (whose map goes through Φ).
    pub fn standard_normal_slope(&self, z: f64) -> Option<f64> {
        match *self {
            Distribution::Normal { std, .. } => Some(std),
            Distribution::LogNormal { mean, std } => {
                let (mu, s) = Self::log_params(mean, std);
                Some(s * (mu + s * z).exp())
            }
            _ => None,
        }
    }

    /// The mean of the distribution.
    pub fn mean(&self) -> f64 {
        match *self {
            Distribution::Normal { mean, .. } | Distribution::LogNormal { mean, .. } => mean,
            Distribution::Uniform { lower, upper } => 0.5 * (lower + upper),
            Distribution::TruncatedNormal { mean, std, lower, upper } => {
                let (a, b) = ((lower - mean) / std, (upper - mean) / std);
                mean + std * (pdf0(a) - pdf0(b)) / truncated_mass(a, b)
            }
        }
    }

    /// The standard deviation of the distribution.
    pub fn std(&self) -> f64 {
        match *self {
            Distribution::Normal { std, .. } | Distribution::LogNormal { std, .. } => std,
            Distribution::Uniform { lower, upper } => (upper - lower) / 12f64.sqrt(),
            Distribution::TruncatedNormal { mean, std, lower, upper } => {
                let (a, b) = ((lower - mean) / std, (upper - mean) / std);
                let z = truncated_mass(a, b);
                let d = (pdf0(a) - pdf0(b)) / z;
                let t = (xpdf(a) - xpdf(b)) / z;
                std * (1.0 + t - d * d).max(0.0).sqrt()
            }
        }
    }
}

/// A bound for messages: the stand-ins of open sides (`f64::MIN`, `f64::MAX`) as ∓∞.
fn bound(x: f64) -> String {
    if x <= f64::MIN {
        "−∞".into()
    } else if x >= f64::MAX {
        "∞".into()
    } else {
        x.to_string()
    }
}

/// φ(x), 0 at ±∞.
fn pdf0(x: f64) -> f64 {
    if x.is_finite() { normal_pdf(x) } else { 0.0 }
}

/// x φ(x), 0 at ±∞.
fn xpdf(x: f64) -> f64 {
    if x.is_finite() { x * normal_pdf(x) } else { 0.0 }
}

/// Φ(b) − Φ(a), in the tail where the interval lies.
fn truncated_mass(a: f64, b: f64) -> f64 {
    if a > 0.0 { normal_sf(a) - normal_sf(b) } else { normal_cdf(b) - normal_cdf(a) }
}

/// A correlation matrix and its Cholesky factor.
#[derive(Clone, Debug, PartialEq)]
pub struct Correlation {
    /// R, row-major, n × n.
    pub matrix: Vec<Vec<f64>>,
    /// Its lower Cholesky factor L (R = L Lᵀ).
    pub cholesky: Vec<Vec<f64>>,
}

impl Correlation {
    /// Check R (square, symmetric, unit diagonal, entries in [−1, 1], positive definite) and
    /// factor it.
    pub fn new(matrix: Vec<Vec<f64>>) -> Result<Self, DistError> {
        let n = matrix.len();
        let bad = |m: String| Err(DistError::Correlation(m));
        for (i, row) in matrix.iter().enumerate() {
            if row.len() != n {
                return bad(format!(
                    "row {} has {} entries; the matrix is {n} × {n}",
                    i + 1,
                    row.len()
                ));
            }
            for (j, &r) in row.iter().enumerate() {
                if !r.is_finite() || r.abs() > 1.0 {
                    return bad(format!("R[{}][{}] = {r} is not in [−1, 1]", i + 1, j + 1));
                }
                if i == j && r != 1.0 {
                    return bad(format!("R[{}][{}] = {r}: the diagonal must be 1", i + 1, i + 1));
                }
                if (r - matrix[j][i]).abs() > 1e-12 {
                    return bad(format!(
                        "R[{}][{}] = {r} but R[{}][{}] = {}: R must be symmetric",
                        i + 1,
                        j + 1,
                        j + 1,
                        i + 1,
                        matrix[j][i]
                    ));
                }
            }
        }
        let mut l = vec![vec![0.0; n]; n];
        for i in 0..n {
            for j in 0..=i {
                let s: f64 = (0..j).map(|k| l[i][k] * l[j][k]).sum();
                if i == j {
                    let d = matrix[i][i] - s;
                    if d <= 1e-12 {
                        return bad(format!(
                            "not positive definite (pivot {} is {d:.3e}): some inputs are (nearly) linear combinations of others",
                            i + 1
                        ));
                    }
                    l[i][i] = d.sqrt();
                } else {
                    l[i][j] = (matrix[i][j] - s) / l[j][j];
                }
            }
        }
        Ok(Correlation { matrix, cholesky: l })
    }

    /// z = L ξ.
    pub fn apply(&self, xi: &[f64]) -> Vec<f64> {
        self.cholesky.iter().map(|row| row.iter().zip(xi).map(|(a, b)| a * b).sum()).collect()
    }
}

/// Map one point of uniforms to input values: independent inputs by their inverse CDFs,
/// correlated ones through the Gaussian copula.
pub fn transform(u: &[f64], dists: &[Distribution], corr: Option<&Correlation>) -> Vec<f64> {
    match corr {
        None => u.iter().zip(dists).map(|(&u, d)| d.quantile(u)).collect(),
        Some(c) => {
            let xi: Vec<f64> = u.iter().map(|&u| normal_quantile(u)).collect();
            c.apply(&xi).iter().zip(dists).map(|(&z, d)| d.from_standard_normal(z)).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_normal_slope_is_the_derivative() {
        for d in [
            Distribution::Normal { mean: 2.0, std: 0.3 },
            Distribution::LogNormal { mean: 2.0, std: 0.3 },
        ] {
            for z in [-1.5, 0.0, 0.7] {
                let h = 1e-6;
                let fd =
                    (d.from_standard_normal(z + h) - d.from_standard_normal(z - h)) / (2.0 * h);
                let s = d.standard_normal_slope(z).unwrap();
                assert!((s - fd).abs() < 1e-8 * s.abs(), "{d:?} at {z}: {s} vs {fd}");
            }
        }
        assert_eq!(
            Distribution::Uniform { lower: 0.0, upper: 1.0 }.standard_normal_slope(0.0),
            None
        );
    }
    use rstest::rstest;

    /// Mean and std by the midpoint rule on the quantile function over 200 000 cells.
    fn moments_by_quantiles(d: &Distribution) -> (f64, f64) {
        let n = 200_000;
        let (mut s1, mut s2) = (0.0, 0.0);
        for i in 0..n {
            let x = d.quantile((i as f64 + 0.5) / n as f64);
            s1 += x;
            s2 += x * x;
        }
        let m = s1 / n as f64;
        (m, (s2 / n as f64 - m * m).sqrt())
    }

    #[rstest]
    #[case(Distribution::Normal { mean: 10.0, std: 2.0 })]
    #[case(Distribution::LogNormal { mean: 3.0, std: 0.6 })]
    #[case(Distribution::Uniform { lower: -1.0, upper: 5.0 })]
    #[case(Distribution::TruncatedNormal { mean: 1.0, std: 1.0, lower: 0.5, upper: 3.0 })]
    #[case(Distribution::TruncatedNormal { mean: 0.0, std: 1.0, lower: 4.0, upper: f64::INFINITY })]
    #[case(Distribution::TruncatedNormal { mean: 0.0, std: 2.0, lower: f64::NEG_INFINITY, upper: 0.0 })]
    fn quantile_function_has_the_stated_moments(#[case] d: Distribution) {
        d.validate().unwrap();
        let (m, s) = moments_by_quantiles(&d);
        // The midpoint rule misses a little of the infinite tails.
        assert!((m - d.mean()).abs() < 2e-3 * d.std(), "{d:?}: mean {m} vs {}", d.mean());
        assert!((s - d.std()).abs() < 5e-3 * d.std(), "{d:?}: std {s} vs {}", d.std());
    }

    #[test]
    fn truncated_normal_stays_inside_its_bounds() {
        let d = Distribution::TruncatedNormal { mean: 0.0, std: 1.0, lower: 6.0, upper: 7.0 };
        d.validate().unwrap();
        for k in 0..=100 {
            let x = d.quantile((k as f64 + 0.5) / 101.5);
            assert!((6.0..=7.0).contains(&x), "{x}");
        }
        // The far-tail mean is close to a + 1/a.
        assert!((d.mean() - (6.0 + 1.0 / 6.0)).abs() < 0.01, "{}", d.mean());
    }

    #[rstest]
    #[case(Distribution::Normal { mean: 1.0, std: -1.0 })]
    #[case(Distribution::LogNormal { mean: 0.0, std: 1.0 })]
    #[case(Distribution::Uniform { lower: 2.0, upper: 2.0 })]
    #[case(Distribution::TruncatedNormal { mean: 0.0, std: 1.0, lower: 50.0, upper: 60.0 })]
    #[case(Distribution::Normal { mean: f64::NAN, std: 1.0 })]
    fn bad_parameters_are_refused(#[case] d: Distribution) {
        assert!(d.validate().is_err());
    }

    #[test]
    fn correlated_normals_have_the_requested_correlation() {
        let r = vec![vec![1.0, 0.6, -0.3], vec![0.6, 1.0, 0.2], vec![-0.3, 0.2, 1.0]];
        let c = Correlation::new(r.clone()).unwrap();
        // L Lᵀ = R.
        for i in 0..3 {
            for j in 0..3 {
                let s: f64 = (0..3).map(|k| c.cholesky[i][k] * c.cholesky[j][k]).sum();
                assert!((s - r[i][j]).abs() < 1e-14);
            }
        }
        let d = vec![Distribution::Normal { mean: 0.0, std: 1.0 }; 3];
        let n = 100_000;
        let mut s01 = 0.0;
        for i in 0..n {
            let u: Vec<f64> =
                (0..3).map(|k| crate::rng::unit_open(crate::rng::hash4(5, 0, i, k))).collect();
            let x = transform(&u, &d, Some(&c));
            s01 += x[0] * x[1];
        }
        // SE of the sample correlation ≈ (1 − ρ²)/√n ≈ 2e-3.
        assert!((s01 / n as f64 - 0.6).abs() < 0.01, "{}", s01 / n as f64);
    }

    #[rstest]
    #[case(vec![vec![1.0, 0.5], vec![0.4, 1.0]])]
    #[case(vec![vec![1.0, 1.0], vec![1.0, 1.0]])]
    #[case(vec![vec![2.0, 0.0], vec![0.0, 1.0]])]
    #[case(vec![vec![1.0, 0.0]])]
    fn bad_correlations_are_refused(#[case] r: Vec<Vec<f64>>) {
        assert!(Correlation::new(r).is_err());
    }
}
