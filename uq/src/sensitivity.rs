//! First-order (linearized) variance of an output from its gradient at the mean.
//!
//! With J(p) ≈ J(μ) + gᵀ (p − μ), Var J ≈ gᵀ C g where C is the inputs' covariance:
//! Σ_i (g_i σ_i)² for independent inputs. Each input's share is its term's part of the
//! total: (g_i σ_i)² / Var for independent inputs, g_i (C g)_i / Var with correlation (those
//! shares still sum to 1 but a negatively correlated pair may give a negative one).

use serde::Serialize;

/// The linearized variance of one output and each input's share.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VarianceShares {
    /// gᵀ C g.
    pub variance: f64,
    /// √(gᵀ C g).
    pub std: f64,
    /// Each input's share of the variance (in input order; they sum to 1).
    pub shares: Vec<f64>,
}

/// The first-order variance of an output with gradient `g` at the mean, for inputs with
/// standard deviations `sigma` and correlation matrix `corr` (None: independent).
pub fn variance_shares(g: &[f64], sigma: &[f64], corr: Option<&[Vec<f64>]>) -> VarianceShares {
    let n = g.len();
    let gs: Vec<f64> = g.iter().zip(sigma).map(|(g, s)| g * s).collect();
    let terms: Vec<f64> = match corr {
        None => gs.iter().map(|v| v * v).collect(),
        Some(r) => (0..n)
            .map(|i| {
                let mut cg = 0.0;
                for j in 0..n {
                    cg += r[i][j] * gs[j];
                }
                gs[i] * cg
            })
            .collect(),
    };
    let mut variance = 0.0;
    for t in &terms {
        variance += t;
    }
    let shares = terms.iter().map(|t| if variance > 0.0 { t / variance } else { 0.0 }).collect();
    VarianceShares { variance, std: variance.max(0.0).sqrt(), shares }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn independent_inputs_add_their_squared_terms() {
        let v = variance_shares(&[2.0, -1.0], &[0.5, 3.0], None);
        assert!((v.variance - 10.0).abs() < 1e-14);
        assert!((v.shares[0] - 0.1).abs() < 1e-15 && (v.shares[1] - 0.9).abs() < 1e-15);
    }

    #[test]
    fn correlation_enters_as_g_c_g() {
        let r = vec![vec![1.0, 0.5], vec![0.5, 1.0]];
        let v = variance_shares(&[1.0, 1.0], &[1.0, 2.0], Some(&r));
        // 1 + 4 + 2 · 0.5 · 1 · 2 = 7.
        assert!((v.variance - 7.0).abs() < 1e-14);
        assert!((v.shares.iter().sum::<f64>() - 1.0).abs() < 1e-15);
    }

    /// The linearization is exact for a linear output: compare with a sampled variance.
    #[test]
    fn linear_output_variance_matches_sampling() {
        use crate::design::{Design, DesignKind};
        use crate::dist::{Correlation, Distribution, transform};
        let dists = vec![
            Distribution::Normal { mean: 1.0, std: 0.2 },
            Distribution::Normal { mean: 5.0, std: 1.0 },
        ];
        let r = vec![vec![1.0, -0.4], vec![-0.4, 1.0]];
        let c = Correlation::new(r.clone()).unwrap();
        let g = [3.0, 0.5];
        let n = 50_000;
        let d = Design::new(DesignKind::MonteCarlo, 2, n, 1, 1).unwrap();
        let y: Vec<f64> = (0..n)
            .map(|i| {
                let x = transform(&d.point(i), &dists, Some(&c));
                g[0] * x[0] + g[1] * x[1]
            })
            .collect();
        let sampled = crate::stats::variance(&y);
        let lin = variance_shares(&g, &[0.2, 1.0], Some(&r));
        assert!((sampled / lin.variance - 1.0).abs() < 0.03, "{sampled} vs {}", lin.variance);
    }
}
